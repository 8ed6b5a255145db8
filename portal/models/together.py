"""A transaction's last writes sent to PostgreSQL together, in one round trip.

Inside ``together()``, ``insert``, ``update`` and ``waiting.notify`` are not sent one by
one: they wait, and go as one statement (each insert and update a data-modifying ``WITH``
query, the notifies its ``SELECT``) as the block ends, or before any other statement the
block runs, so whatever reads them sees them. They are still inside the caller's
transaction: its rollback undoes them, and the notifies are delivered at its commit only.
Elsewhere, and on SQLite, each is executed at once, as the ORM would.

The rows' keys must be set in Python, no model signal is sent, and a write that fails
(a broken constraint) raises when it is sent, failing the whole transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models.sql import InsertQuery, UpdateQuery

__all__ = ["gathered_notify", "insert", "together", "update"]

_block = threading.local()


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Send the block's ``insert``, ``update`` and notifies as one statement as it ends,
    or before its next other statement (on PostgreSQL). An exception sends nothing more:
    the transaction is rolling back."""
    if getattr(_block, "writes", None) is not None or not _postgres():  # an outer block sends
        yield
        return
    _block.writes, _block.pairs = [], []
    try:
        with connections[DEFAULT_DB_ALIAS].execute_wrapper(_sent_first):
            yield
        _send()
    finally:
        _block.writes = _block.pairs = None


def _sent_first(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    """Another statement of the block: what waits goes first, so it is seen."""
    _send()
    return execute(sql, params, many, context)


def insert(obj: models.Model) -> None:
    """Insert ``obj`` (a new row whose primary key is set in Python), now or as the
    ``together`` block ends."""
    writes = getattr(_block, "writes", None)
    if writes is None:
        obj.save(force_insert=True)
        return
    meta = obj._meta
    query = InsertQuery(type(obj))
    query.insert_values([f for f in meta.local_concrete_fields if not f.generated], [obj])
    [statement] = query.get_compiler(DEFAULT_DB_ALIAS).as_sql()
    writes.append(statement)
    obj._state.adding, obj._state.db = False, DEFAULT_DB_ALIAS


def update(obj: models.Model, fields: list[str]) -> None:
    """Write ``obj``'s ``fields`` to its row, now or as the ``together`` block ends."""
    writes = getattr(_block, "writes", None)
    if writes is None:
        obj.save(update_fields=fields)
        return
    model = type(obj)
    query = cast(UpdateQuery, model._base_manager.filter(pk=obj.pk).query.chain(UpdateQuery))
    query.add_update_values({name: getattr(obj, name) for name in fields})
    writes.append(query.get_compiler(DEFAULT_DB_ALIAS).as_sql())


def gathered_notify(channel: str, payload: str) -> bool:
    """Keep a ``NOTIFY`` for the block's statement; False outside a block."""
    pairs: list[tuple[str, str]] | None = getattr(_block, "pairs", None)
    if pairs is None:
        return False
    pairs.append((channel, payload))
    return True


def _postgres() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def _send() -> None:
    writes: list[tuple[str, Sequence[Any]]] = _block.writes[:]
    pairs: list[tuple[str, str]] = list(dict.fromkeys(_block.pairs))
    if not writes and not pairs:
        return
    _block.writes.clear()
    _block.pairs.clear()
    # PostgreSQL runs every data-modifying WITH query to completion, read or not.
    queries = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(writes))
    select = ", ".join("pg_notify(%s, %s)" for _ in pairs) or "1"
    statement = (f"WITH {queries} " if writes else "") + f"SELECT {select}"
    params = [p for _, ps in writes for p in ps] + [part for pair in pairs for part in pair]
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(statement, params)
