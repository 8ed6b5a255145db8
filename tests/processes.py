"""Helpers for tests that start real processes (workers, servers) on the test database."""

from __future__ import annotations

import itertools
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.testagents import read_effects

ROOT = Path(__file__).resolve().parents[1]


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


# Under pytest-xdist each worker hands out ports from a block of its own (below the
# kernel's ephemeral range), so two workers never pick the same port between one's check
# and its server's bind. A random start keeps concurrent runs on the machine apart too.
_BLOCK = 500
_FIRST = 20_000


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    return int(worker[2:]) if worker[2:].isdigit() else 0


_ports = itertools.cycle(
    (lambda start: [*range(start, _FIRST + _BLOCK), *range(_FIRST, start)])(
        _FIRST + random.randrange(_BLOCK)
    )
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a test starts:
    one of this xdist worker's block, never handed out twice in a row."""
    offset = _worker_index() * _BLOCK
    for _ in range(_BLOCK):
        port = next(_ports) + offset
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the whole block is busy: any port the kernel offers
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], *, timeout: float = 30, what: str = "") -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)


def output(proc: subprocess.Popen) -> str:
    return Path(proc.log_path).read_text()  # type: ignore[attr-defined]


def held_at(
    spawn: Callable[..., subprocess.Popen], effects: Path, point: str, name: str, **env: str
) -> subprocess.Popen:
    """A ``run_worker`` named ``name`` that has run the queued run until the test agents'
    ``point`` (see testagents.hold), and waits there until the file ``hold_<point>`` goes."""
    (effects / f"hold_{point}").touch()
    worker = spawn("run_worker", "--id", name, "--poll", "0.1", **env)
    wait_for(lambda: read_effects(effects, f"reached_{point}"), timeout=60, what=point)
    return worker
