"""Connections to Django's database beside Django's own: ``connect_kwargs`` for a sync
psycopg connection (a ``LISTEN``), ``aconnect`` for the worker's async one; and
``prepared_cursor``, Django's connection binding on the server for the reads a web
process repeats."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import connection

# OPTIONS that Django's backend interprets itself rather than passing to psycopg.
_DJANGO_ONLY = frozenset({"isolation_level", "server_side_binding", "pool", "assume_role"})


def connect_kwargs() -> dict[str, Any]:
    """``psycopg.connect`` arguments for the database Django uses (its test database
    during tests), for the connections the worker keeps beside Django's own."""
    db = connection.settings_dict
    return {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        **{k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in _DJANGO_ONLY},
    }


async def aconnect() -> Any:
    """A new autocommit psycopg ``AsyncConnection`` to Django's database, for the
    checkpointer of a worker (``DjangoCheckpointer(connection=...)``). The caller closes
    it."""
    return await psycopg.AsyncConnection.connect(**connect_kwargs(), autocommit=True)


# How many times a connection runs a statement before psycopg prepares it (psycopg's own
# default), where Django would turn preparing off: the loops' connections
# (``loops.keep_connections``) and ``prepared_cursor``.
PREPARE_THRESHOLD = 5


@contextlib.contextmanager
def prepared_cursor() -> Iterator[Any]:
    """A cursor of Django's connection that binds its parameters on the server, so that
    psycopg prepares a statement the connection repeats and PostgreSQL plans it once per
    connection, not on every request (the web's connections bind on the client, which
    lets ``portal.models.together`` send several statements in one round trip). Outside a
    transaction, a statement whose prepared plan a migration made stale is run once more,
    planned afresh; inside one, the error fails the transaction, whose rollback drops the
    stale plans (``stale_plan`` tells the error).
    Elsewhere than PostgreSQL, Django's cursor as it is."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:  # Django turns preparing off unless told a threshold
        raw.prepare_threshold = PREPARE_THRESHOLD
    factory, raw.cursor_factory = raw.cursor_factory, ServerBindingCursor
    try:
        cursor = connection.cursor()
    finally:
        raw.cursor_factory = factory
    with connection.execute_wrapper(_again_if_stale), cursor:
        yield cursor


def stale_plan(exc: BaseException) -> bool:
    """Whether ``exc`` (psycopg's, or Django's wrapping it) is a prepared statement that no
    longer fits its table: a migration changed the type of a column it returns, under a
    running process. Every later run of it on that connection fails the same way until
    its prepared statements are dropped: by a rollback, or ``DEALLOCATE ALL`` (psycopg
    forgets its own on either). Told by the server routine that raised it, which its
    ``lc_messages`` does not translate, unlike the message ("cached plan must not change
    result type")."""
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    return (
        isinstance(cause, psycopg.errors.FeatureNotSupported)
        and cause.diag.source_function == "RevalidateCachedQuery"
    )


def _again_if_stale(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    try:
        return execute(sql, params, many, context)
    except Exception as exc:
        if not stale_plan(exc) or connection.in_atomic_block:
            raise
    connection.connection.execute("DEALLOCATE ALL")
    return execute(sql, params, many, context)
