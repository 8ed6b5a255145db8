"""Plain psycopg connections to Django's PostgreSQL database, for the two places that need
one beside Django's own: the worker's LISTEN connection and the checkpointer's async path."""

from __future__ import annotations

from typing import Any

from django.db import connection

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
