"""Keyset paging: a page starts where the one before it ended, never at an OFFSET.

Lists are ordered by a time column, then by the primary key to break ties, and a
``Cursor`` is that pair for the last row a page showed. A page is one ``LIMIT`` query that
starts at the cursor on the index, so the thousandth page costs what the first does, and
rows added meanwhile neither repeat nor hide rows on later pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last row's time and primary key."""

    at: datetime
    id: Any

    @classmethod
    def of(cls, row: Any, field: str) -> Cursor:
        """The cursor of ``row`` (a model instance or a ``values()`` dict)."""
        if isinstance(row, dict):
            return cls(row[field], row["id"])
        return cls(getattr(row, field), row.pk)

    def encode(self) -> str:
        """The cursor as a query-string value."""
        return f"{self.at.isoformat()}~{self.id}"

    @classmethod
    def decode(cls, raw: str | None, key: Callable[[str], Any] = str) -> Cursor | None:
        """The cursor ``encode`` wrote, its id read with ``key``; None for anything else
        (a damaged or hand-made link), so the caller can fall back to the first page."""
        when, sep, pk = (raw or "").partition("~")
        if not sep or not pk:
            return None
        try:
            at = parse_datetime(when)
            ident = key(pk)
        except (ValueError, TypeError):
            return None
        if at is None or timezone.is_naive(at):
            return None
        try:
            at.astimezone(UTC)  # what a query does with it: year 1 at +05:00 is out of range
        except OverflowError:
            return None
        return cls(at, ident)


def after(cursor: Cursor, *, field: str, descending: bool) -> Q:
    """Rows strictly past ``cursor`` in ``(field, id)`` order, ascending or descending."""
    # The plain bound on ``field`` is implied by the OR, but it lets the index range start
    # at the cursor instead of filtering its way there from the first row.
    if descending:
        return Q(**{f"{field}__lte": cursor.at}) & (
            Q(**{f"{field}__lt": cursor.at}) | Q(id__lt=cursor.id)
        )
    return Q(**{f"{field}__gte": cursor.at}) & (
        Q(**{f"{field}__gt": cursor.at}) | Q(id__gt=cursor.id)
    )


def page(
    qs: QuerySet[Any], cursor: Cursor | None, *, field: str, descending: bool, size: int
) -> tuple[list[Any], bool]:
    """Up to ``size`` rows of ``qs`` past ``cursor`` in ``(field, id)`` order, and whether
    more follow them; one query (it reads one row more to know)."""
    if cursor is not None:
        qs = qs.filter(after(cursor, field=field, descending=descending))
    order = [f"-{field}", "-id"] if descending else [field, "id"]
    rows = list(qs.order_by(*order)[: size + 1])
    return rows[:size], len(rows) > size
