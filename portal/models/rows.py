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


def columns(model: type[Model], alias: str, only: tuple[str, ...] = ()) -> str:
    """``model``'s concrete columns, in field order, from the table aliased ``alias``;
    with ``only``, just those fields' (the rest are deferred, as ``QuerySet.only``)."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(str(f.column))}" for f in _fields(model, only))


def width(model: type[Model], only: tuple[str, ...] = ()) -> int:
    """How many values ``columns`` reads."""
    return len(_fields(model, only))


def loaded(model: type[M], values: Sequence[Any], only: tuple[str, ...] = ()) -> M:
    """The ``model`` instance from the values ``columns`` read (with the same ``only``)."""
    names, plan = _plan(model, connection.vendor, only)
    converted = list(values)
    for i, converters, expression in plan:
        value = converted[i]
        for convert in converters:
            value = convert(value, expression, connection)
        converted[i] = value
    return model.from_db(connection.alias, names, converted)


def converted(expression: Any, value: Any) -> Any:
    """The value a statement read for ``expression`` (an annotation such as a ``RawSQL``,
    with its ``output_field``), as the ORM gives an annotation's value."""
    for convert in _converters(expression):
        value = convert(value, expression, connection)
    return value


def _converters(expression: Any) -> list[Callable[..., Any]]:
    # As SQLCompiler.get_converters: the backend's converters, then the field's.
    converters: list[Callable[..., Any]] = connection.ops.get_db_converters(expression)
    converters += expression.get_db_converters(connection)
    return converters


@cache
def _fields(model: type[Model], only: tuple[str, ...]) -> list[Any]:
    fields = model._meta.concrete_fields
    if not only:
        return list(fields)
    return [f for f in fields if f.primary_key or f.name in only or f.attname in only]


@cache
def _plan(
    model: type[Model], vendor: str, only: tuple[str, ...]
) -> tuple[list[str], list[tuple[int, list[Callable[..., Any]], Any]]]:
    fields = _fields(model, only)
    names = [f.attname for f in fields]
    plan = []
    for i, field in enumerate(fields):
        expression = field.get_col(model._meta.db_table)
        converters = _converters(expression)
        if converters:
            plan.append((i, converters, expression))
    return names, plan
