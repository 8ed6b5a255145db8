"""Helpers for tests that start real processes (workers, servers) on the test database."""

from __future__ import annotations

import socket
from urllib.parse import quote


def database_env() -> dict[str, str]:
    """Environment that points a child process at this test run's database."""
    from django.conf import settings
    from django.db import connection

    # The child would derive its channel prefix from the test database's name; it must
    # use this process's, or the two would not hear each other over Redis.
    prefix = {"PORTAL_CHANNEL_PREFIX": settings.PORTAL_CHANNEL_PREFIX}
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = quote(db["USER"] or "")
        if db.get("PASSWORD"):
            auth += ":" + quote(db["PASSWORD"])
        host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
        return {"DATABASE_URL": f"postgres://{auth}@{host}/{db['NAME']}", **prefix}
    return {"SQLITE_PATH": str(db["NAME"]), **prefix}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
