"""A transaction's last writes sent to PostgreSQL together, in one round trip.

Inside ``together()``, ``insert``, ``update`` and ``waiting.notify`` are not sent one by
one: they wait, and go as one statement (each insert and update a data-modifying ``WITH``
query, the notifies its ``SELECT``) as the block ends, or ahead of any other statement the
block runs, in its round trip, so whatever reads them sees them. ``then`` keeps a
statement of its own (the chains' lock) to go after them. They are still inside the
caller's transaction: its rollback undoes them, and the notifies are delivered at its
commit only. Elsewhere, and on SQLite, each write and notify is executed at once, as the
ORM would, and ``then`` keeps nothing (it says so).

The rows' keys must be set in Python, no model signal is sent, and a write that fails
(a broken constraint) raises when it is sent, failing the whole transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models.sql import InsertQuery, UpdateQuery

__all__ = ["gathered_notify", "insert", "then", "together", "update"]

_block = threading.local()


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Send the block's ``insert``, ``update`` and notifies as one statement as it ends,
    or before its next other statement (on PostgreSQL). An exception sends nothing more:
    the transaction is rolling back."""
    if getattr(_block, "writes", None) is not None or not _postgres():  # an outer block sends
        yield
        return
    _block.writes, _block.pairs, _block.then = [], [], []
    try:
        with connections[DEFAULT_DB_ALIAS].execute_wrapper(_sent_first):
            yield
        _send()
    finally:
        _block.writes = _block.pairs = _block.then = None


def _sent_first(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    """Another statement of the block: what waits goes first, so it is seen. Where the
    cursor binds on the client it goes in the same query string, one round trip, each
    statement run in turn with its own snapshot; the cursor is then moved past what went
    first, onto the caller's own result."""
    cursor = context["cursor"].cursor
    if many or isinstance(params, Mapping) or not isinstance(cursor, psycopg.ClientCursor):
        _send()
        return execute(sql, params, many, context)
    taken = _taken()
    if not taken:
        return execute(sql, params, many, context)
    if params is None:  # nothing bound, so a % in the statement is its own
        sql, params = sql.replace("%", "%%"), ()
    statements = [statement for statement, _ in taken]
    values = [value for _, bound in taken for value in bound]
    result = execute("; ".join([*statements, sql]), [*values, *params], many, context)
    for _ in taken:
        cursor.nextset()
    return result


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


def then(statement: str) -> bool:
    """Keep ``statement`` (one statement, nothing bound) to go after the block's writes,
    in their round trip where the cursor binds on the client; False outside a block."""
    if ";" in statement:  # the caller's result is found by counting statements
        raise ValueError(f"one statement at a time, not {statement!r}")
    kept: list[str] | None = getattr(_block, "then", None)
    if kept is None:
        return False
    kept.append(statement)
    return True


def _postgres() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def _taken() -> list[tuple[str, Sequence[Any]]]:
    """What waits, as statements in order with their parameters, no longer waiting."""
    writes: list[tuple[str, Sequence[Any]]] = _block.writes[:]
    pairs: list[tuple[str, str]] = list(dict.fromkeys(_block.pairs))
    taken: list[tuple[str, Sequence[Any]]] = []
    if writes or pairs:
        # PostgreSQL runs every data-modifying WITH query to completion, read or not.
        queries = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(writes))
        select = ", ".join("pg_notify(%s, %s)" for _ in pairs) or "1"
        statement = (f"WITH {queries} " if writes else "") + f"SELECT {select}"
        params = [p for _, ps in writes for p in ps] + [part for pair in pairs for part in pair]
        taken.append((statement, params))
    taken += [(statement.replace("%", "%%"), ()) for statement in _block.then]
    for kept in (_block.writes, _block.pairs, _block.then):
        kept.clear()
    return taken


def _send() -> None:
    taken = _taken()
    if not taken:
        return
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        for statement, params in taken:  # a round trip each
            cursor.execute(statement, params)
