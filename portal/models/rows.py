"""Model instances from the rows of written-out statements, loaded as the ORM loads them.

A statement the code names (``portal.accounts.sql``, ``portal.api.sql``) reads a model's
columns with ``columns``; ``loaded`` makes the instance from them, passing each value
through the converters the ORM would apply (SQLite's datetimes and UUIDs, JSON), so the
instance is the one a queryset would have given. Only what does not depend on the row is
worked out once per model and backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


def columns(model: type[Model], alias: str) -> str:
    """``model``'s concrete columns, in field order, from the table aliased ``alias``."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(str(f.column))}" for f in model._meta.concrete_fields)


def width(model: type[Model]) -> int:
    """How many values ``columns`` reads."""
    return len(model._meta.concrete_fields)


def loaded(model: type[M], values: Sequence[Any]) -> M:
    """The ``model`` instance from the values ``columns`` read."""
    names, plan = _plan(model, connection.vendor)
    converted = list(values)
    for i, converters, expression in plan:
        value = converted[i]
        for convert in converters:
            value = convert(value, expression, connection)
        converted[i] = value
    return model.from_db(connection.alias, names, converted)


@cache
def _plan(
    model: type[Model], vendor: str
) -> tuple[list[str], list[tuple[int, list[Callable[..., Any]], Any]]]:
    # As SQLCompiler.get_converters: the backend's converters, then the field's.
    names = [f.attname for f in model._meta.concrete_fields]
    plan = []
    for i, field in enumerate(model._meta.concrete_fields):
        expression = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(expression)
        converters += expression.get_db_converters(connection)
        if converters:
            plan.append((i, converters, expression))
    return names, plan
