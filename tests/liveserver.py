"""A live portal in a subprocess (daphne, through runserver) on the test database, for
tests that talk HTTP to it as an outside program would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.processes import database_env, free_port

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def live_portal(log_dir: Path, **env: str) -> Iterator[str]:
    """Serve the portal on a free loopback port; yield its base URL. ``env`` adds to the
    server's environment (the test database's is set already)."""
    skip = ("DATABASE_URL", "SQLITE_PATH", "PORTAL_NO_WORKER", "PORTAL_EMBEDDED_WORKER")
    full = {k: v for k, v in os.environ.items() if k not in skip}
    full.update(database_env())
    # The tests' webhook receivers listen on loopback, which the portal refuses by default.
    full.update(
        {
            "PYTHONUNBUFFERED": "1",
            "PORTAL_MODEL": "scripted",
            "DEBUG": "1",
            "PORTAL_ALLOW_PRIVATE_TARGETS": "1",
            **env,
        }
    )
    port = free_port()
    log = log_dir / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=full,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # Start-up can take long on a machine shared with other test runs.
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the live server exited early:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the live server did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
