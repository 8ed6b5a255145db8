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
