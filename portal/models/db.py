"""Connections to Django's database beside Django's own: ``connect_kwargs`` for a sync
psycopg connection (a ``LISTEN``), ``aconnect`` for the worker's async one."""

from __future__ import annotations

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
