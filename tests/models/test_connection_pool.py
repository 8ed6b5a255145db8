"""The web tier's connection pool, in a real daphne process on the test database: its
requests (each run in a thread of its own) reuse a few PostgreSQL connections instead of
opening one each; a connection dropped while it sat in the pool is replaced, not lent to
a request; waiting requests hold no connection while they wait.

daphne reaches PostgreSQL through a loopback relay of the test's own, which counts the
connections daphne opens and can cut them: nothing server-wide is read."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import pytest
from django.db import connection

from portal.accounts.tokens import api_token_create
from tests.processes import ROOT, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


class Relay:
    """A loopback TCP relay to PostgreSQL that counts and can cut its connections."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.opened = 0
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.opened += 1
            self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> int:
        """Drop every connection relayed so far, as a restarting server would."""
        pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for end in pair:
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(pairs)

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def relay() -> Iterator[Relay]:
    db = connection.settings_dict
    relay = Relay(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432))
    yield relay
    relay.close()


@pytest.fixture
def daphne(worker_env, tmp_path, relay) -> Iterator[Callable[..., str]]:
    """Start daphne on the test database, through ``relay``; returns its URL."""
    procs: list[subprocess.Popen] = []

    def start(**env: str) -> str:
        port = free_port()
        log = tmp_path / f"daphne-{port}.log"
        db = connection.settings_dict
        auth = quote(db["USER"] or "") + (":" + quote(db["PASSWORD"]) if db.get("PASSWORD") else "")
        url = f"postgres://{auth}@127.0.0.1:{relay.port}/{db['NAME']}"
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


def status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def get(base: str, headers: dict[str, str], n: int) -> list[int]:
    return [status(base + "/api/interrupts", headers) for _ in range(n)]


def test_daphne_requests_reuse_a_few_pooled_connections(daphne, relay, token):
    base = daphne()
    assert get(base, token, 2) == [200, 200]
    warmed_up = relay.opened

    assert get(base, token, 20) == [200] * 20

    # Without a pool each of the 20 requests would open a connection of its own.
    assert relay.opened - warmed_up <= 1, (warmed_up, relay.opened)
    assert 1 <= relay.opened <= 4


def test_a_pooled_connection_dropped_while_idle_is_replaced_before_a_request_gets_it(
    daphne, relay, token
):
    base = daphne()
    assert get(base, token, 3) == [200] * 3
    assert relay.cut() >= 1

    assert get(base, token, 5) == [200] * 5
    assert relay.opened >= 2  # the dropped ones were replaced


def test_waiting_requests_do_not_hold_pooled_connections_while_they_wait(
    daphne, support_agent, test_agents
):
    from portal.reviews import threads

    base = daphne(PORTAL_DB_POOL_SIZE="2")
    headers = {"Authorization": f"Bearer {api_token_create(user=support_agent, name='w')[1]}"}
    thread, _ = threads.thread_start(
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
