"""Plain psycopg connections to Django's PostgreSQL database, for the two places that need
one beside Django's own: the worker's LISTEN connection and the checkpointer's async path;
and ``fetch``, which runs the checkpointer's statements on the latter through libpq."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID as UUID_TYPE

from django.db import connection
from psycopg import errors, pq

log = logging.getLogger(__name__)

# OPTIONS that Django's backend interprets itself rather than passing to psycopg.
_DJANGO_ONLY = frozenset({"isolation_level", "server_side_binding", "pool", "assume_role"})


def connect_kwargs() -> dict[str, Any]:
    """``psycopg.connect`` arguments for the database Django uses (its test database
    during tests)."""
    db = connection.settings_dict
    return {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        **{k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in _DJANGO_ONLY},
    }


# --- statements sent through libpq directly ----------------------------------------------
# The checkpointer's step is one statement per write, on the worker's own autocommit
# connection. Through psycopg's cursor it costs about 0.06 ms more client CPU than the same
# statement through libpq (adapting each parameter, a cursor per call, its wait loop): as
# much as a tenth of a pause on PostgreSQL. So that statement goes through
# ``AsyncConnection.pgconn`` (psycopg's public libpq wrapper): prepared once per connection
# (or unnamed each time when the connection was opened with ``prepare_threshold=None``, for
# a pooler that cannot keep prepared statements), its parameters sent as text, and server
# errors raised as psycopg's own exceptions. The checkpointer's loads on that connection go
# the same way, so every statement it prepares is prepared again after a migration.

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# Parameter types the server cannot infer from every place a parameter is used.
UUID, INT4, TIMESTAMPTZ, UNKNOWN = 2950, 23, 1184, 0


@dataclass(frozen=True)
class Statement:
    """A statement written with ``%(name)s`` placeholders (as Django's cursor takes it) in
    the ``$n`` form libpq takes, with the parameters' names in order and their types
    (``UNKNOWN`` for text: the server types it where it is used, as psycopg has it)."""

    name: bytes
    sql: bytes
    params: tuple[str, ...]
    types: tuple[int, ...]

    @classmethod
    def of(cls, sql: str, types: dict[str, int]) -> Statement:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        text = _PLACEHOLDER.sub(number, sql)
        if "%" in text:
            raise ValueError(f"a placeholder other than %(name)s in {sql!r}")
        kinds = tuple(types.get(name, UNKNOWN) for name in names)
        # Named for its text and its parameters' types: another statement never gets a
        # name this one prepared.
        digest = hashlib.sha256(f"{text}\0{kinds}".encode()).hexdigest()[:16]
        return cls(f"portal_{digest}".encode(), text.encode(), tuple(names), kinds)

    def values(self, params: dict[str, Any], encoding: str) -> list[bytes | None]:
        """The parameters as libpq sends them: text in the connection's encoding."""
        values = []
        for name in self.params:
            try:
                values.append(_text(params[name], encoding))
            except (TypeError, ValueError) as exc:  # (UnicodeEncodeError is a ValueError)
                kind = TypeError if isinstance(exc, TypeError) else ValueError
                raise kind(f"parameter {name!r}: {exc}") from exc
        return values


def _text(value: Any, encoding: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        if "\0" in value:
            # libpq reads a parameter as a C string: the rest would be dropped in silence.
            raise ValueError("PostgreSQL text cannot contain NUL (0x00) characters")
        return value.encode(encoding)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime ({value}) would be read in the session's zone")
        return value.isoformat().encode()
    if isinstance(value, int | UUID_TYPE) and not isinstance(value, bool):
        return str(value).encode()
    raise TypeError(f"no text form for a value of type {type(value).__name__}")


# The statements each open connection has prepared (a new connection starts with none).
_prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()


async def fetch_first(
    conn: Any,
    statement: Statement,
    params: dict[str, Any],
    *,
    meanwhile: Callable[[], None] | None = None,
) -> list[Any]:
    """``fetch``'s first row; [] for no row."""
    rows = await fetch(conn, statement, params, meanwhile=meanwhile)
    return rows[0] if rows else []


async def fetch(
    conn: Any,
    statement: Statement,
    params: dict[str, Any],
    *,
    meanwhile: Callable[[], None] | None = None,
) -> list[list[Any]]:
    """Run ``statement`` on ``conn`` (an autocommit psycopg ``AsyncConnection``) and return
    its rows as a cursor would: integers as ``int``, every other value as text (None for
    NULL). A server error raises psycopg's
    exception for it; a broken connection, ``psycopg.OperationalError``. Should the caller
    be cancelled while the statement is in flight, the connection is closed: nobody could
    tell whether it committed, and its owner opens another (as it does for any connection
    that fails).

    ``meanwhile``, if given, is called once the statement is on its way, before waiting
    for the server: work that need not wait for the result, done while the server runs
    it. It must not raise (an exception is logged and the statement goes on)."""
    values = statement.values(params, conn.info.encoding)
    pg = conn.pgconn
    async with conn.lock:
        try:
            if conn.prepare_threshold is None:
                pg.send_query_params(statement.sql, values, param_types=statement.types)
                return _rows(conn, await _results(pg, meanwhile))
            names = _prepared.setdefault(conn, set())
            for attempt in (1, 2):
                if statement.name not in names:
                    pg.send_prepare(statement.name, statement.sql, param_types=statement.types)
                    _check(conn, await _results(pg))
                    names.add(statement.name)
                pg.send_query_prepared(statement.name, values)
                try:
                    return _rows(conn, await _results(pg, meanwhile))
                except (errors.InvalidSqlStatementName, errors.FeatureNotSupported) as exc:
                    # The server refused the statement before running any of it: it was
                    # deallocated behind our back (DISCARD ALL), or a migration changed
                    # a table it returns ("cached plan must not change result type").
                    # Prepare it again, once.
                    stale = isinstance(exc, errors.InvalidSqlStatementName)
                    if attempt == 2 or not (stale or "cached plan" in str(exc)):
                        raise
                    names.discard(statement.name)
                    meanwhile = None  # (it ran with the refused attempt)
                    if not stale:
                        pg.send_query(b"DEALLOCATE " + statement.name)
                        _check(conn, await _results(pg))
            raise AssertionError("unreachable: the second attempt returns or raises")
        except BaseException:
            if pg.transaction_status == pq.TransactionStatus.ACTIVE:
                await conn.close()
            raise


_OK = frozenset({pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK})


def _check(conn: Any, results: list[Any]) -> Any:
    for result in results:
        if result.status not in _OK:
            raise errors.error_from_result(result, encoding=conn.info.encoding)
    if len(results) != 1:
        raise RuntimeError(f"expected one result from the server, got {len(results)}")
    return results[0]


# Integer columns (int2, int4, int8) come back as numbers; the rest as text.
_INTEGERS = frozenset({21, INT4, 20})


def _rows(conn: Any, results: list[Any]) -> list[list[Any]]:
    result = _check(conn, results)
    encoding = conn.info.encoding
    columns = [
        (column, int if result.ftype(column) in _INTEGERS else None)
        for column in range(result.nfields)
    ]
    rows = []
    for row in range(result.ntuples):
        values = []
        for column, number in columns:
            value = result.get_value(row, column)
            if value is not None:
                value = number(value) if number else value.decode(encoding)
            values.append(value)
        rows.append(values)
    return rows


async def _results(pg: Any, meanwhile: Callable[[], None] | None = None) -> list[Any]:
    """Send what libpq has buffered and collect the results of the one command sent,
    calling ``meanwhile`` once it is sent."""
    while pg.flush():
        # Read too while the rest waits to go out, as libpq asks: a server blocked on
        # writing to us would otherwise never read the rest.
        await _ready(pg.socket, write=True)
        pg.consume_input()
    if meanwhile is not None:
        try:
            meanwhile()
        except Exception:
            log.exception("work done while a statement ran failed")
    results: list[Any] = []
    while True:
        pg.consume_input()
        if pg.is_busy():
            await _ready(pg.socket)
            continue
        result = pg.get_result()
        if result is None:
            return results
        results.append(result)


async def _ready(fd: int, *, write: bool = False) -> None:
    """Until ``fd`` can be read (or, with ``write``, read or written)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not waiter.done():  # (the loop may call again before the waiter resumes)
            waiter.set_result(None)

    loop.add_reader(fd, ready)
    if write:
        loop.add_writer(fd, ready)
    try:
        await waiter
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
