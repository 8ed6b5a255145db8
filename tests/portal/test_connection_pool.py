"""The web tier's connection pool, in a real daphne process on the test database: its
requests (each run in a thread of its own) reuse a few PostgreSQL connections instead of
opening one each; a connection the server dropped while it sat in the pool is replaced,
not lent to a request; waiting requests hold no connection while they wait."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from portal.api import api_token_create
from tests.portal.conftest import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

APP = "portal-pool-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daphne(worker_env, tmp_path) -> Iterator[Callable[..., str]]:
    """Start daphne on the test database (its connections named APP); returns its URL."""
    procs: list[subprocess.Popen] = []

    def start(**env: str) -> str:
        port = _free_port()
        log = tmp_path / f"daphne-{port}.log"
        url = worker_env["DATABASE_URL"] + f"?application_name={APP}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-v", "0", "-p", str(port), "portal.asgi:application"],
            cwd=ROOT,
            env={**worker_env, "DATABASE_URL": url, "PORTAL_API_RATE": "", **env},
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as response:
                    if response.status == 200:
                        return base
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"daphne did not start: {log.read_text()}")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture
def token(reviewer) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_token_create(user=reviewer, name='pool')[1]}"}


def backends() -> list[tuple[int, object]]:
    """(pid, backend_start) of daphne's connections to the test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [APP],
        )
        return list(cursor.fetchall())


def status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def get(base: str, headers: dict[str, str], n: int) -> list[int]:
    return [status(base + "/api/interrupts", headers) for _ in range(n)]


def test_daphne_requests_reuse_a_few_pooled_connections(daphne, token):
    base = daphne()
    assert get(base, token, 2) == [200, 200]
    time.sleep(0.2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (after_warm_up,) = cursor.fetchone()

    assert get(base, token, 20) == [200] * 20

    # Without a pool each request would open a connection of its own and close it.
    kept = backends()
    assert 1 <= len(kept) <= 3, kept
    assert all(started < after_warm_up for _, started in kept), kept


def test_a_pooled_connection_the_server_dropped_is_replaced_before_a_request_gets_it(daphne, token):
    base = daphne()
    assert get(base, token, 3) == [200] * 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [APP],
        )
        assert cursor.fetchall()

    assert get(base, token, 5) == [200] * 5


def test_waiting_requests_do_not_hold_pooled_connections_while_they_wait(
    daphne, support_agent, test_agents
):
    from portal import services

    base = daphne(PORTAL_DB_POOL_SIZE="2")
    headers = {"Authorization": f"Bearer {api_token_create(user=support_agent, name='w')[1]}"}
    thread, _ = services.thread_start(
        agent="approve",
        input={"messages": [{"role": "user", "content": "pay 1"}]},
        user=support_agent,
    )  # no worker runs here: it stays queued, so every waiter waits its full time

    url = f"{base}/api/threads/{thread.pk}?wait=3"
    began = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(lambda _: status(url, headers), range(6))) == [200] * 6
    # Six waiters on a pool of two: holding a connection each, they would take turns.
    assert time.monotonic() - began < 6
