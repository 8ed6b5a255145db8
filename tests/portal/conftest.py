"""Fixtures for the durable-threads tests: test agents, side-effect files, and worker
processes that share nothing with the test but its database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.portal.testagents import AGENTS
from tests.processes import database_env

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    # The personas are created with passwords; PBKDF2 costs ~0.3 s a user on this
    # machine, which dominated these tests. Tests never need a strong hash.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where test agents record their side effects (also for in-process runs)."""
    path = tmp_path / "effects"
    path.mkdir()
    monkeypatch.setenv("PORTAL_TEST_EFFECTS", str(path))
    return path


@pytest.fixture
def test_agents(settings) -> dict[str, str]:
    settings.PORTAL_AGENTS = {**settings.PORTAL_AGENTS, **AGENTS}
    settings.PORTAL_MODEL = "scripted"
    return AGENTS


@pytest.fixture
def worker_env(effects: Path, transactional_db) -> dict[str, str]:
    """The environment of a worker process on the test database."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SQLITE_PATH")}
    env.update(database_env())
    env.update(
        {
            "PORTAL_AGENTS_EXTRA": json.dumps(AGENTS),
            "PORTAL_TEST_EFFECTS": str(effects),
            "PORTAL_MODEL": "scripted",
            "PORTAL_NO_WORKER": "1",
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


@pytest.fixture
def spawn(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``manage.py <args>`` in a new process; every one is stopped after the test."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, **env: str) -> subprocess.Popen:
        log = (tmp_path / f"proc-{len(procs)}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**worker_env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def output(proc: subprocess.Popen) -> str:
    return Path(proc.log_path).read_text()  # type: ignore[attr-defined]


def held_at(
    spawn: Callable[..., subprocess.Popen], effects: Path, point: str, name: str, **env: str
) -> subprocess.Popen:
    """A ``run_worker`` named ``name`` that has run the queued run until the test agents'
    ``point`` (see testagents.hold), and waits there until the file ``hold_<point>`` goes."""
    from tests.portal.testagents import read_effects

    (effects / f"hold_{point}").touch()
    worker = spawn("run_worker", "--id", name, "--poll", "0.1", **env)
    wait_for(lambda: read_effects(effects, f"reached_{point}"), timeout=60, what=point)
    return worker


@pytest.fixture(scope="module")
def application():
    """The portal's ASGI application, for websocket tests. The embedded worker must not
    start inside the test process (importing portal.asgi would start it); the variable is
    put back so later tests' subprocesses don't see it."""
    saved = os.environ.get("PORTAL_NO_WORKER")
    os.environ["PORTAL_NO_WORKER"] = "1"
    try:
        from portal.asgi import application

        yield application
    finally:
        if saved is None:
            os.environ.pop("PORTAL_NO_WORKER", None)
        else:
            os.environ["PORTAL_NO_WORKER"] = saved
