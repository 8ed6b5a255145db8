"""The durable run queue: a ``Run`` row is the work, ``notify_workers()`` the doorbell.

Services queue runs; the worker drains them. This module sits below both, so that a
service can ring and a worker can listen without either importing the other.

On PostgreSQL the doorbell is ``NOTIFY portal_runs``, sent inside the caller's
transaction: PostgreSQL delivers it at commit and drops it on rollback. In-process (the
demo's embedded worker, SQLite) it is ``wake``, a ``threading.Event`` set on commit. The
worker's short poll covers a lost ring either way.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import connection, transaction

NOTIFY_CHANNEL = "portal_runs"

wake = threading.Event()


def notify_workers() -> None:
    """Wake idle workers once the current transaction commits."""
    if connection.vendor == "postgresql":
        # Inside a transaction PostgreSQL delivers the notification at commit and drops
        # it on rollback, which is exactly "on commit".
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    transaction.on_commit(wake.set)


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
    import psycopg

    return await psycopg.AsyncConnection.connect(**connect_kwargs(), autocommit=True)
