"""End to end through HTTP: the portal against LangGraph's agent server, the same refund graph.

Ours: one daphne process (``portal.asgi``) serving the JSON API, and 1 or 4 ``manage.py
run_worker`` processes, on PostgreSQL and Redis, running ``agents/examples/refunds.py``
with the scripted model (no model latency). A support user's token starts threads, a
reviewer's token approves them (separation of duties: the starter may not decide). Each
is one request, ``POST ...?wait=30``, answered once the run has paused or finished (a
waiting ``GET /api/threads/<id>?wait=30`` follows only if that wait ran out).

The peer: LangGraph's agent server (``langgraph-api`` under uvicorn) on its PostgreSQL +
Redis runtime (``langgraph-runtime-pg``), running ``bench/e2e_peer_graph.py``: the same
model -> tool -> model shape, ``interrupt()`` before the refund is paid, a deterministic
model node. One server process runs the API and its queue; ``N_JOBS_PER_WORKER`` is the
number of workers. The client uses its own waiting call, ``POST
/threads/<id>/runs/wait`` (creating the thread on the first call).

A cycle: start a thread until it is paused on the approval (start -> paused), then
approve it until the thread is done (resume -> done). For 1 and 4 workers, with 1 client
and with 20 concurrent clients, batches of ours and the peer's alternate in one run. Then,
for ours alone, the web tier and the workers apart: the workers are stopped (SIGSTOP)
while the API takes a burst of starts and then of approvals from 20 clients, and each
burst is timed while the workers drain it alone.

Run: ``.venv-bench/bin/python -m bench e2e`` (or ``-m bench.e2e``); ``-m bench.e2e
profile`` samples our web process and workers with py-spy during a 20-client batch;
``-m bench.e2e servers`` runs ours behind daphne and behind uvicorn side by side;
``-m bench.e2e ceiling`` measures what one web process serves at most (a 404 each);
``-m bench.e2e cpu`` sets one client's step against the CPU each side spent on it;
``-m bench.e2e statements`` lists PostgreSQL's CPU by statement over one client's cycles
(read from the server's log, which must be readable here: ``BENCH_PG_LOG`` names it).
``BENCH_E2E_MODEL=openai`` gives both sides a model over HTTP instead: each side's model
node is a chat-completions client of one fake OpenAI-compatible server process on loopback
(``agents.testing.fake_openai``), scripted to call the refund tool and then to answer with
its result; ours names a model (``PORTAL_MODEL``), the peer's node holds one ``openai``
client built as its graph module loads. The model is mocked at its boundary only.
``BENCH_E2E_MODEL=openai-tls`` serves the same over HTTPS, as a model provider does, with a
certificate made for the run that both sides trust (``SSL_CERT_FILE``).
PostgreSQL databases ``bench_e2e_ours`` and ``bench_e2e_peer`` (names end in
``BENCH_E2E_DB_SUFFIX``; dropped and created anew
each run), Redis DB 6 (``BENCH_E2E_REDIS_URL``). Servers are subprocesses on 127.0.0.1;
every loop is bounded in count and in time.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import servers as shape
from bench.report import load_note, machine, percentile, table, write_section

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "artifacts" / "bench" / "e2e"
PG = os.environ.get("BENCH_E2E_PG", "postgres://postgres@127.0.0.1:5432")
# Lets two runs share one PostgreSQL server without sharing databases.
DB_SUFFIX = os.environ.get("BENCH_E2E_DB_SUFFIX", "")
OURS_DB = f"{PG}/bench_e2e_ours{DB_SUFFIX}"
PEER_DB = f"{PG}/bench_e2e_peer{DB_SUFFIX}"
REDIS_URL = os.environ.get("BENCH_E2E_REDIS_URL", "redis://127.0.0.1:6379/6")
ROUNDS = int(os.environ.get("BENCH_E2E_ROUNDS", "2"))
CYCLES_ONE = int(os.environ.get("BENCH_E2E_CYCLES_ONE", "25"))
CYCLES_MANY = int(os.environ.get("BENCH_E2E_CYCLES_MANY", "200"))
MANY = int(os.environ.get("BENCH_E2E_CLIENTS", "20"))
WORKERS = [int(n) for n in os.environ.get("BENCH_E2E_WORKERS", "1,4").split(",")]
# The starts and approvals timed apart: long enough (several seconds at today's rates) that
# the burst's ramp up and its tail do not set the rate.
BURST = int(os.environ.get("BENCH_E2E_BURST", "1000"))
BATCH_SECONDS = float(os.environ.get("BENCH_E2E_BATCH_SECONDS", "60"))
# Seconds one waiting request may wait for a run (the API's limit is 30).
WAIT = float(os.environ.get("BENCH_E2E_WAIT_SECONDS", "30"))
# A start-up takes a minute when other jobs load the machine several times over.
STARTUP_SECONDS = float(os.environ.get("BENCH_E2E_STARTUP_SECONDS", "180"))
# Each side's model: its own offline model ("scripted"), or a client of the fake
# OpenAI-compatible server ("openai"; see the module's docstring).
MODEL = os.environ.get("BENCH_E2E_MODEL", "scripted")
TEXT = "Refund $42.50 for order A-1001, it arrived broken."
SECRET = "bench-e2e-" + "s" * 60


@dataclass(frozen=True)
class Checkout:
    """A work tree of the portal that ``Ours`` serves, the database it serves it on and
    where its processes' logs go: this one on ``OURS_DB``, or another beside it
    (``bench.ab``)."""

    root: Path = ROOT
    db: str = OURS_DB
    logs: Path = LOGS


HERE = Checkout()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fresh_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _wait_http(
    url: str, proc: subprocess.Popen[bytes], seconds: float = 60, logs: Path = LOGS
) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}; see {logs}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- ours -----------------------------------------------------------------------------------


def _web(
    server: str, processes: int = 1, loop: str = shape.LOOP, checkout: Checkout = HERE
) -> tuple[int, subprocess.Popen[bytes]]:
    """``processes`` web processes serving ``portal.asgi`` under ``server`` (daphne,
    uvicorn or granian: ``bench.shape.command``) on a free port."""
    port = _free_port()
    proc = subprocess.Popen(
        shape.command(server, port, processes, loop),
        cwd=checkout.root,
        env=_ours_env(checkout),
        stdout=(checkout.logs / f"ours-{server}.log").open("a"),
        stderr=subprocess.STDOUT,
    )
    return port, proc


# What the fake model answers: the refund's tool call to the customer's request, and the
# tool's result, repeated, to the result (the fake matches the latest message).
FAKE_MODEL_SCRIPT = [
    {"text": "Refund of $42.50 issued for order A-1001.", "match": "^Refund of", "forever": True},
    {
        "tool_calls": [
            {"name": "issue_refund", "arguments": {"order_id": "A-1001", "amount": 42.5}}
        ],
        "forever": True,
    },
]


@functools.cache
def fake_model_url() -> str:
    """The base URL of the fake OpenAI-compatible server both sides' models call, started
    (once, in a process of its own, until the bench exits) on first use; over HTTPS with
    ``BENCH_E2E_MODEL=openai-tls``, with a certificate made for the run that both sides
    trust (``model_trust``)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    script = LOGS / "fake-model-script.json"
    script.write_text(json.dumps(FAKE_MODEL_SCRIPT))
    tls: list[str] = []
    if MODEL == "openai-tls":
        cert, key = LOGS / "fake-model-cert.pem", LOGS / "fake-model-key.pem"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "ec"),
                *("-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"),
                *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
                *("-keyout", str(key), "-out", str(cert)),
            ],
            check=True,
            capture_output=True,
        )
        tls = ["--certfile", str(cert), "--keyfile", str(key)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agents.testing.fake_openai", "--script", str(script), *tls],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    atexit.register(_stop, [proc])
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def command(tool: str) -> str:
    """The command line a report names, with the model when it is not the default."""
    model = f"BENCH_E2E_MODEL={MODEL} " if MODEL != "scripted" else ""
    return f"{model}.venv-bench/bin/python -m {tool}"


def model_words() -> tuple[str, str]:
    """What ours runs its agent with, and what the peer's model node is, in a report."""
    if MODEL == "scripted":
        return (
            "the scripted model (`PORTAL_MODEL=scripted`, no delay)",
            "a deterministic model node",
        )
    fake = (
        "a fake OpenAI-compatible server process on loopback (`agents.testing.fake_openai`), "
        "scripted to call the refund tool and then to answer with its result"
    )
    over = "HTTPS, with a certificate made for the run" if MODEL == "openai-tls" else "HTTP"
    return (
        f"a model over {over} (`PORTAL_MODEL=gpt-bench`, `OPENAI_BASE_URL`): {fake}",
        "a model node asking the same server through one `openai` client built as its module "
        "loads (not streamed; ours streams)",
    )


def model_trust() -> dict[str, str]:
    """What a side's processes need to trust the fake model server's certificate."""
    if MODEL != "openai-tls":
        return {}
    fake_model_url()
    return {"SSL_CERT_FILE": str(LOGS / "fake-model-cert.pem")}


def _model_env() -> dict[str, str]:
    if MODEL == "scripted":
        return {"PORTAL_MODEL": "scripted"}
    if MODEL not in ("openai", "openai-tls"):
        raise SystemExit(f"BENCH_E2E_MODEL={MODEL!r}: 'scripted', 'openai' or 'openai-tls'")
    url = fake_model_url()
    return {
        "PORTAL_MODEL": "gpt-bench",
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "bench",
        **model_trust(),
    }


def _ours_env(checkout: Checkout = HERE) -> dict[str, str]:
    # PYTHONPATH too: each process imports the portal from its checkout's root.
    unset = (
        *("SQLITE_PATH", "TEST_DB_SUFFIX", "PORTAL_EMBEDDED_WORKER", "PORTAL_NO_WORKER"),
        "PYTHONPATH",
    )
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(
        {
            "DATABASE_URL": checkout.db,
            "REDIS_URL": REDIS_URL,
            "DJANGO_SETTINGS_MODULE": "bench.e2e_settings",
            **_model_env(),
            "PORTAL_SCRIPTED_DELAY_MS": "0",
            # PORTAL_EMBEDDED_WORKER unset, as in production: off with PostgreSQL and
            # Redis (portal/settings.py), so no web process runs a worker of its own.
            # As deployed: DEBUG off (no query log), plain HTTP on loopback.
            "DEBUG": "0",
            "SECRET_KEY": SECRET,
            "SECURE_SSL_REDIRECT": "0",
            # No per-token request limit: the peer has none, and one client's token makes
            # hundreds of requests a minute here.
            "PORTAL_API_RATE": "",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def setup_ours() -> None:
    """In a subprocess of its own (Django is configured once): migrate, two users, tokens."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from portal.accounts.groups import ensure_roles
    from portal.accounts.roles import REVIEWER, SUPPORT
    from portal.accounts.tokens import api_token_create

    call_command("migrate", verbosity=0, interactive=False)
    ensure_roles()
    tokens = {}
    for name, role in (("bench-e2e-support", SUPPORT), ("bench-e2e-reviewer", REVIEWER)):
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.groups.set([Group.objects.get(name=role)])
        tokens[role] = api_token_create(user=user, name="bench.e2e")[1]
    print(json.dumps(tokens))


class Ours:
    name = "ours"

    def __init__(
        self,
        workers: int,
        tokens: dict[str, str],
        server: str = shape.SERVER,
        processes: int | None = None,
        checkout: Checkout = HERE,
    ) -> None:
        """The production shape (``bench.shape``) unless ``server`` and ``processes``
        say otherwise; ``checkout``'s code on its database."""
        self.checkout = checkout
        logs = checkout.logs
        logs.mkdir(parents=True, exist_ok=True)
        self.server = server
        self.processes = shape.web_processes() if processes is None else processes
        self.support = {"Authorization": f"Bearer {tokens['support']}"}
        self.reviewer = {"Authorization": f"Bearer {tokens['reviewer']}"}
        env = _ours_env(checkout)
        self.port, self.web = _web(server, self.processes, checkout=checkout)
        self.base = f"http://127.0.0.1:{self.port}"
        self.workers = []
        for k in range(workers):
            log = logs / f"ours-worker-{k}.log"
            log.write_text("")
            self.workers.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "run_worker", "--id", f"e2e-{k}"],
                    cwd=checkout.root,
                    env=env,
                    stdout=log.open("a"),
                    stderr=subprocess.STDOUT,
                )
            )
        try:
            _wait_http(self.base + "/healthz", self.web, seconds=STARTUP_SECONDS, logs=logs)
            deadline = time.monotonic() + STARTUP_SECONDS
            for k, proc in enumerate(self.workers):
                while "ready" not in (logs / f"ours-worker-{k}.log").read_text():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"worker {k} did not start; see {logs}")
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        _stop([self.web, *self.workers])

    async def start(self, client: Any, stats: Stats, wait: float = 0) -> dict:
        """Start a thread; with ``wait``, answered once its run has paused (or at the
        limit: 202 with the thread as it is then)."""
        r = await stats.timed(
            "POST /api/threads" + ("?wait" if wait else ""),
            client.post(
                self.base + "/api/threads",
                params={"wait": wait} if wait else None,
                headers=self.support,
                json={
                    "agent": "refunds",
                    "input": {"messages": [{"role": "user", "content": TEXT}]},
                },
            ),
        )
        if r.status_code not in ((200, 202) if wait else (202,)):
            raise RuntimeError(f"start: {r.status_code} {r.text[:200]}")
        return dict(r.json())

    async def wait(self, client: Any, stats: Stats, answer: dict, status: str) -> dict:
        """The thread once its run has paused or finished: from the waiting POST's own
        answer, or (only if that timed out) from waiting GETs."""
        thread_id = answer["thread_id"]
        deadline = time.monotonic() + 30
        body = answer.get("thread") or {}
        while True:
            if body.get("status") == "failed":
                raise RuntimeError(f"thread {thread_id} failed")
            if body.get("status") == status and (
                status != "interrupted" or body["pending_interrupt"]
            ):
                return body
            if time.monotonic() >= deadline:
                raise RuntimeError(f"thread {thread_id} not {status} within 30 s")
            r = await stats.timed(
                "GET /api/threads/<id>?wait",
                client.get(
                    f"{self.base}/api/threads/{thread_id}",
                    params={"wait": WAIT},
                    headers=self.support,
                ),
            )
            if r.status_code != 200:
                raise RuntimeError(f"wait: {r.status_code} {r.text[:200]}")
            body = r.json()

    async def resume(
        self, client: Any, stats: Stats, thread_id: str, interrupt_id: str, wait: float = 0
    ) -> dict:
        """Approve; with ``wait``, answered once the resumed run has finished."""
        r = await stats.timed(
            "POST /api/threads/<id>/resume" + ("?wait" if wait else ""),
            client.post(
                f"{self.base}/api/threads/{thread_id}/resume",
                params={"wait": wait} if wait else None,
                headers=self.reviewer,
                json={"resume": {"approved": True}, "resume_interrupt_id": interrupt_id},
            ),
        )
        if r.status_code not in ((200, 202) if wait else (202,)):
            raise RuntimeError(f"resume: {r.status_code} {r.text[:200]}")
        return dict(r.json())

    async def cycle(self, client: Any, stats: Stats) -> tuple[float, float]:
        # One request a step, as the peer's client: each POST answers once the run has
        # paused or finished.
        t0 = time.perf_counter()
        started = await self.start(client, stats, wait=WAIT)
        paused = await self.wait(client, stats, started, "interrupted")
        t1 = time.perf_counter()
        thread_id = started["thread_id"]
        answered = await self.resume(
            client, stats, thread_id, paused["pending_interrupt"]["id"], wait=WAIT
        )
        done = await self.wait(client, stats, answered, "done")
        if "Refund of" not in str(done["messages"][-1].get("content", "")):
            raise RuntimeError(f"thread {thread_id} ended without the refund: {done['messages']}")
        return t1 - t0, time.perf_counter() - t1


# --- the peer -------------------------------------------------------------------------------


class Peer:
    name = "LangGraph"

    def __init__(self, workers: int) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        graph = ROOT / "bench" / "e2e_peer_graph.py"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))},
            "LANGGRAPH_RUNTIME_EDITION": "pg",
            "DATABASE_URI": PEER_DB,
            "REDIS_URI": REDIS_URL,
            "LANGSERVE_GRAPHS": json.dumps({"refunds": f"{graph}:graph"}),
            "N_JOBS_PER_WORKER": str(workers),
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LOG_LEVEL": "WARNING",
        }
        if MODEL != "scripted":
            env["BENCH_E2E_MODEL_URL"] = fake_model_url()
            env.update(model_trust())
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "langgraph_api.server:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=(LOGS / "peer.log").open("a"),
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_http(self.base + "/ok", self.proc, seconds=STARTUP_SECONDS)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        _stop([self.proc])

    async def cycle(self, client: Any, stats: Stats) -> tuple[float, float]:
        thread_id = str(uuid.uuid4())
        url = f"{self.base}/threads/{thread_id}/runs/wait"
        t0 = time.perf_counter()
        r = await stats.timed(
            "POST /threads/<id>/runs/wait (start)",
            client.post(
                url,
                json={
                    "assistant_id": "refunds",
                    "input": {"messages": [{"role": "user", "content": TEXT}]},
                    "if_not_exists": "create",
                },
            ),
        )
        if r.status_code != 200 or not r.json().get("__interrupt__"):
            raise RuntimeError(f"peer start: {r.status_code} {r.text[:300]}")
        t1 = time.perf_counter()
        r = await stats.timed(
            "POST /threads/<id>/runs/wait (resume)",
            client.post(
                url, json={"assistant_id": "refunds", "command": {"resume": {"approved": True}}}
            ),
        )
        if r.status_code != 200 or "Refund of" not in str(r.json()["messages"][-1]["content"]):
            raise RuntimeError(f"peer resume: {r.status_code} {r.text[:300]}")
        return t1 - t0, time.perf_counter() - t1


# --- the client -----------------------------------------------------------------------------


@dataclass
class Stats:
    requests: dict[str, list[float]] = field(default_factory=dict)

    async def timed(self, name: str, call: Any) -> Any:
        began = time.perf_counter()
        response = await call
        self.requests.setdefault(name, []).append(time.perf_counter() - began)
        return response


@dataclass
class Batch:
    side: str
    workers: int
    clients: int
    paused: list[float]
    done: list[float]
    seconds: float
    errors: list[str]
    stats: Stats
    db_window: tuple[Any, Any] | None = None

    @property
    def cycles_per_second(self) -> float:
        return len(self.done) / self.seconds if self.seconds else float("nan")

    def figures(self) -> list[object]:
        """The cycles, then ``CYCLE_COLUMNS``."""
        return [
            len(self.done),
            percentile(self.paused, 50) * 1000,
            percentile(self.paused, 95) * 1000,
            percentile(self.done, 50) * 1000,
            percentile(self.done, 95) * 1000,
            self.cycles_per_second,
            len(self.errors),
        ]


async def _batch(
    side: Ours | Peer, clients: int, total: int
) -> tuple[list, list, float, list, Stats]:
    import httpx

    stats = Stats()
    paused: list[float] = []
    done: list[float] = []
    errors: list[str] = []
    issued = 0
    began = time.perf_counter()
    deadline = began + BATCH_SECONDS

    async def one_client(client: httpx.AsyncClient) -> None:
        nonlocal issued
        while issued < total and time.perf_counter() < deadline and len(errors) < 5:
            issued += 1
            try:
                to_pause, to_done = await side.cycle(client, stats)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            paused.append(to_pause)
            done.append(to_done)

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await asyncio.gather(*(one_client(client) for _ in range(clients)))
    return paused, done, time.perf_counter() - began, errors, stats


def _db_now(url: str) -> Any:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]


def run_batch(side: Ours | Peer, workers: int, clients: int, total: int) -> Batch:
    db = side.checkout.db if isinstance(side, Ours) else None
    window_start = _db_now(db) if db else None
    paused, done, seconds, errors, stats = asyncio.run(_batch(side, clients, total))
    batch = Batch(side.name, workers, clients, paused, done, seconds, errors, stats)
    if db:
        batch.db_window = (window_start, _db_now(db))
    print(
        f"  {side.name:9} workers={workers} clients={clients:2}: {len(done)} cycles in "
        f"{seconds:.1f} s ({batch.cycles_per_second:.1f}/s), paused p50 "
        f"{percentile(paused, 50) * 1000:.0f} ms, done p50 {percentile(done, 50) * 1000:.0f} ms"
        + (f", {len(errors)} errors: {errors[0]}" if errors else ""),
        flush=True,
    )
    return batch


# --- ours, the web tier and the workers apart ------------------------------------------------


async def _burst(calls: list[Any], clients: int) -> tuple[float, list[str]]:
    """Run the coroutine factories ``calls`` on ``clients`` concurrent connections."""
    import httpx

    errors: list[str] = []
    queue = list(reversed(calls))
    began = time.perf_counter()

    async def one_client(client: httpx.AsyncClient) -> None:
        while queue and time.perf_counter() - began < BATCH_SECONDS:
            call = queue.pop()
            try:
                await call(client)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await asyncio.gather(*(one_client(client) for _ in range(clients)))
    return time.perf_counter() - began, errors


def _drain(sql: str, params: list[Any], target: int) -> float:
    import psycopg

    # One connection for the whole wait: a new one per check would cost PostgreSQL a
    # backend start every 20 ms, CPU the workers being timed need.
    with psycopg.connect(OURS_DB, autocommit=True) as conn:
        began = time.perf_counter()
        while time.perf_counter() - began < BATCH_SECONDS * 2:
            if int(conn.execute(sql, params).fetchone()[0]) >= target:  # type: ignore[index]
                return time.perf_counter() - began
            time.sleep(0.02)
    raise RuntimeError(f"the workers did not drain {target} runs")


def tiers_apart(ours: Ours, workers: int) -> dict[str, Any]:
    """Starts and approvals through the API with the workers stopped, then each drain by
    the workers alone (the web process idle)."""
    stats = Stats()
    ids: list[str] = []

    async def start(client: Any) -> None:
        ids.append((await ours.start(client, stats))["thread_id"])

    for proc in ours.workers:
        proc.send_signal(signal.SIGSTOP)
    try:
        start_s, start_err = asyncio.run(_burst([start] * BURST, MANY))
    finally:
        for proc in ours.workers:
            proc.send_signal(signal.SIGCONT)
    in_ids = "SELECT count(*) FROM portal_thread WHERE id = ANY(%s::uuid[]) AND status = %s"
    pause_s = _drain(in_ids, [ids, "interrupted"], len(ids))

    import psycopg

    with psycopg.connect(OURS_DB) as conn:
        pending = dict(
            conn.execute(
                "SELECT thread_id::text, id FROM portal_interrupt "
                "WHERE thread_id = ANY(%s::uuid[]) AND status = 'pending'",
                [ids],
            ).fetchall()
        )

    def approve(thread_id: str) -> Any:
        async def call(client: Any) -> None:
            await ours.resume(client, stats, thread_id, pending[thread_id])

        return call

    for proc in ours.workers:
        proc.send_signal(signal.SIGSTOP)
    try:
        approve_s, approve_err = asyncio.run(_burst([approve(t) for t in ids], MANY))
    finally:
        for proc in ours.workers:
            proc.send_signal(signal.SIGCONT)
    done_s = _drain(in_ids, [ids, "done"], len(ids))
    result = {
        "workers": workers,
        "n": len(ids),
        "starts_per_s": len(ids) / start_s,
        "approvals_per_s": len(ids) / approve_s,
        "pause_drain_per_s": len(ids) / pause_s,
        "resume_drain_per_s": len(ids) / done_s,
        "cycles_per_s": len(ids) / (pause_s + done_s),
        "errors": start_err + approve_err,
        "stats": stats,
    }
    print(
        f"  ours tiers apart, workers={workers}: {result['starts_per_s']:.0f} starts/s, "
        f"{result['approvals_per_s']:.0f} approvals/s through the web tier; workers alone "
        f"{result['cycles_per_s']:.1f} cycles/s",
        flush=True,
    )
    return result


# --- the runs' own timestamps ------------------------------------------------------------------


def run_breakdown(batch: Batch) -> list[list[object]]:
    """Per run kind: time queued (created -> claimed) and executing (claimed -> finished),
    from the run rows of one batch."""
    import psycopg

    assert batch.db_window is not None
    with psycopg.connect(OURS_DB) as conn:
        rows = conn.execute(
            "SELECT kind, extract(epoch FROM started_at - created_at), "
            "extract(epoch FROM finished_at - started_at) FROM portal_run "
            "WHERE created_at BETWEEN %s AND %s AND finished_at IS NOT NULL",
            list(batch.db_window),
        ).fetchall()
    out = []
    for kind in sorted({r[0] for r in rows}):
        queued = [float(r[1]) * 1000 for r in rows if r[0] == kind]
        running = [float(r[2]) * 1000 for r in rows if r[0] == kind]
        out.append(
            [
                batch.workers,
                batch.clients,
                kind,
                len(queued),
                percentile(queued, 50),
                percentile(queued, 95),
                percentile(running, 50),
                percentile(running, 95),
            ]
        )
    return out


# --- report ---------------------------------------------------------------------------------


def _merge(batches: list[Batch]) -> Batch:
    first = batches[0]
    stats = Stats()
    for b in batches:
        for k, v in b.stats.requests.items():
            stats.requests.setdefault(k, []).extend(v)
    return Batch(
        first.side,
        first.workers,
        first.clients,
        [x for b in batches for x in b.paused],
        [x for b in batches for x in b.done],
        sum(b.seconds for b in batches),
        [e for b in batches for e in b.errors],
        stats,
    )


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


# A batch's figures, as the tables show them after the columns that say which batch.
CYCLE_COLUMNS = [
    "start->paused p50 ms",
    "p95 ms",
    "resume->done p50 ms",
    "p95 ms",
    "cycles/s",
    "errors",
]


def write_report(
    batches: list[Batch], apart: list[dict[str, Any]], load: tuple[float, float, float]
) -> None:
    merged: dict[tuple[str, int, int], Batch] = {}
    for key in {(b.side, b.workers, b.clients) for b in batches}:
        merged[key] = _merge([b for b in batches if (b.side, b.workers, b.clients) == key])
    rows, ratio_rows = [], []
    for workers in WORKERS:
        for clients in (1, MANY):
            pair = [merged.get((side, workers, clients)) for side in ("ours", "LangGraph")]
            for b in pair:
                if b is None:
                    continue
                rows.append([b.side, workers, clients, *b.figures()])
            ours, peer = pair
            if ours and peer:
                ratio_rows.append(
                    [
                        workers,
                        clients,
                        percentile(ours.paused, 50) / percentile(peer.paused, 50),
                        percentile(ours.paused, 95) / percentile(peer.paused, 95),
                        percentile(ours.done, 50) / percentile(peer.done, 50),
                        percentile(ours.done, 95) / percentile(peer.done, 95),
                        ours.cycles_per_second / peer.cycles_per_second,
                    ]
                )
    request_rows = []
    for key in sorted(merged):
        b = merged[key]
        for name, values in sorted(b.stats.requests.items()):
            request_rows.append(
                [
                    b.side,
                    b.workers,
                    b.clients,
                    name,
                    len(values),
                    percentile(values, 50) * 1000,
                    percentile(values, 95) * 1000,
                ]
            )
        if b.side == "ours" and b.done:
            polls = len(b.stats.requests.get("GET /api/threads/<id>?wait", []))
            request_rows.append(
                [
                    b.side,
                    b.workers,
                    b.clients,
                    "waiting GETs per cycle",
                    "",
                    polls / len(b.done),
                    "",
                ]
            )
    breakdown = [row for b in batches if b.db_window is not None for row in run_breakdown(b)]
    apart_rows = [
        [
            a["workers"],
            a["n"],
            a["starts_per_s"],
            a["approvals_per_s"],
            a["pause_drain_per_s"],
            a["resume_drain_per_s"],
            a["cycles_per_s"],
            len(a["errors"]),
        ]
        for a in apart
    ]

    def ratio(workers: int, clients: int, col: int) -> float:
        for row in ratio_rows:
            if row[0] == workers and row[1] == clients:
                return float(row[col])
        return float("nan")

    def per_workers(ratios: list[float]) -> str:
        return ", ".join(
            f"{r:.2f}x with {w} worker{'s' * (w > 1)}" for r, w in zip(ratios, WORKERS, strict=True)
        )

    top = max(WORKERS)
    one_pause = [ratio(w, 1, 2) for w in WORKERS]
    one_done = [ratio(w, 1, 4) for w in WORKERS]
    many = ratio(top, MANY, 6)
    approvals = max((a["approvals_per_s"] for a in apart), default=float("nan"))
    drain = max((a["cycles_per_s"] for a in apart if a["workers"] == top), default=float("nan"))
    web_shape = (
        f"{shape.web_processes()} {shape.SERVER} web processes "
        f"(`{shape.SERVER} --workers {shape.web_processes()}`)"
    )
    targets = f"""
Targets (ratios are ours / the peer's, from this run):

- One client, start -> paused p50 at most 0.6x the peer's: {_met(max(one_pause) <= 0.6)}
  ({per_workers(one_pause)}).
- One client, resume -> done p50 at most 0.6x the peer's: {_met(max(one_done) <= 0.6)}
  ({per_workers(one_done)}).
- {MANY} clients with {top} workers, at least 2x the peer's cycles per second:
  {_met(many >= 2)} ({many:.2f}x).
- At least 150 approvals per second through the API ({web_shape}): {_met(approvals >= 150)}
  ({approvals:.0f} per second).
- Workers, at least 100 cycles per second with {top} workers: {_met(drain >= 100)}
  ({drain:.1f} per second).
"""
    body = f"""
Command: `{command("bench e2e")}`.

Machine: {machine()}; {load_note(load)}. Client, servers, PostgreSQL and Redis all share
these cores: every figure is a whole-system figure on a small machine.

**Ours**, in the production shape (docs/deployment.md): {web_shape} serving the JSON API
(`portal.asgi`), and {" or ".join(map(str, WORKERS))} `manage.py run_worker` processes,
PostgreSQL and Redis, `DEBUG` off; `agents/examples/refunds.py` with
{model_words()[0]}. A support user's token starts a
thread (`POST /api/threads?wait={WAIT:g}`), a reviewer's token approves it (`POST
/api/threads/<id>/resume?wait={WAIT:g}`): one request a step, like the peer's client, each
answered with the thread once the run has paused or finished (a waiting `GET
/api/threads/<id>?wait={WAIT:g}` follows only if that wait ran out; "waiting GETs per
cycle" below counts them). The web server logs warnings only, no access log, as the
peer's uvicorn does.
**The peer**: LangGraph's agent server (`langgraph-api` under uvicorn, one process that
serves the API and runs its queue) on its PostgreSQL + Redis runtime
(`langgraph-runtime-pg`), started offline with no license key;
`N_JOBS_PER_WORKER` = the number of workers. Its graph (`bench/e2e_peer_graph.py`) has the
same model -> tool -> model shape, `interrupt()` before the refund is paid, and
{model_words()[1]}. The client uses the server's own waiting call, `POST
/threads/<id>/runs/wait` (the first creates the thread).

A cycle: start a thread until it is paused on the approval (start -> paused), then approve
it until it is done (resume -> done). For each worker count both servers run side by side;
{ROUNDS} rounds alternate ours and the peer's batches ({CYCLES_ONE} cycles with one
client, {CYCLES_MANY} with {MANY} concurrent clients, each batch capped at
{BATCH_SECONDS:.0f} s) after a warm-up of 3 cycles each. One asyncio client process
(httpx, keep-alive connections).

{table(["server", "workers", "clients", "cycles", *CYCLE_COLUMNS], rows)}

Ratios, ours / the peer's (below 1 means ours is faster; for cycles/s above 1 means ours
does more):

{
        table(
            [
                "workers",
                "clients",
                "start->paused p50",
                "p95",
                "resume->done p50",
                "p95",
                "cycles/s",
            ],
            ratio_rows,
        )
    }
{targets}
Ours, the web tier and the workers apart: the workers are stopped (SIGSTOP) while {MANY}
clients send {BURST} starts (without `wait`) through {web_shape}, then resumed
and timed until every thread is paused; stopped again while the same clients approve all
{BURST}, then resumed and timed until every thread is done. A worker cycle is one start
run plus one resume run.

{
        table(
            [
                "workers",
                "threads",
                "starts/s (API)",
                "approvals/s (API)",
                "pauses/s (workers)",
                "completions/s (workers)",
                "cycles/s (workers)",
                "errors",
            ],
            apart_rows,
        )
    }

Ours, the runs' own timestamps (`portal_run`: created -> claimed by a worker, claimed ->
finished), per batch:

{
        table(
            [
                "workers",
                "clients",
                "run",
                "runs",
                "queued p50 ms",
                "p95 ms",
                "executing p50 ms",
                "p95 ms",
            ],
            breakdown,
        )
    }

Client-side time per HTTP request:

{table(["server", "workers", "clients", "request", "n", "p50 ms", "p95 ms"], request_rows)}
"""
    errors = [e for b in batches for e in b.errors] + [e for a in apart for e in a["errors"]]
    if errors:
        body += f"\nErrors ({len(errors)}), first: `{errors[0]}`\n"
    if MODEL == "scripted":
        section, title = (
            "e2e",
            "End to end through HTTP: the portal against LangGraph's agent server",
        )
    elif MODEL == "openai":
        section, title = "e2e-model", "End to end with a model over HTTP, against the peer"
    else:
        section, title = "e2e-model-tls", "End to end with a model over HTTPS, against the peer"
    write_section(section, title, body)
    print(body)


# --- where our time goes ----------------------------------------------------------------------

# (label, substring of a sampled stack): the first that matches names the sample.
WEB_PHASES = [
    ("starting threads (a page request gets its own; the API lends kept ones)", "Thread.start"),
    ("borrow a pooled connection (and its health check)", "DatabaseWrapper.get_new_connection"),
    ("token check", "BearerToken.authenticate"),
    ("permission checks (has_perm)", "_user_has_perm"),
    ("live updates on commit (rendering partials, Redis)", "portal/notify/broadcast.py"),
    ("POST resume: the request the answer names, read before the lock", "named_request ("),
    ("POST resume: the answer checked against the request's schema", "check_decision ("),
    ("POST resume: the locking read", "_locked_request ("),
    # The closing writes go in the decision's insert's round trip, ahead of the chains'
    # lock: sending them is the insert's; building them (before the save) is theirs. One
    # label, three calls (a label named twice counts once).
    ("POST resume: the decision's insert, the lock and the writes sent", "Decision.save (portal/"),
    ("POST resume: the closing writes built", "insert (portal/models/together.py"),
    ("POST resume: the closing writes built", "update (portal/models/together.py"),
    ("POST resume: the closing writes built", "gathered_notify (portal/models/together.py"),
    ("POST resume: the rest of decision_submit", "_resume (portal/api/threads.py"),
    ("POST start: thread_start", "_start (portal/api/threads.py"),
    ("?wait: looks while waiting", "_thread_busy (portal/api/threads.py"),
    ("?wait: the thread's checkpoint read + JSON", "_thread_data (portal/api/threads.py"),
    ("?wait: the wait itself (event loop)", "await_until (portal/models/waiting.py"),
    ("rest of Django + ninja (routing, middleware, JSON)", "ASGIHandler"),
    ("the server and asyncio (HTTP, event loop), the rest", ""),
]
WORKER_PHASES = [
    ("claim (one statement on PostgreSQL)", "Worker.claim "),
    ("finish + settle (run and thread rows)", "Worker._finish "),
    ("publish to Redis (live updates)", "portal/notify/broadcast.py"),
    ("checkpoint writes and reads", "portal/runs/checkpointer.py"),
    ("agent graph itself (CPU)", "agents/"),
    ("execute: awaiting I/O in the event loop", "run_until_complete"),
    ("execute: connection + run row", "Worker._execute "),
    ("lease heartbeat: a thread started and stopped per run", "Thread.start"),
    ("lease heartbeat: a thread started and stopped per run", "_Heartbeat"),
    ("waiting for NOTIFY", "Worker._wait "),
    ("other", ""),
]


def _phases(raw: Path, phases: list[tuple[str, str]]) -> list[tuple[str, float]]:
    """Share of py-spy's samples (collapsed stacks) per phase; idle thread-pool threads
    waiting for work are not counted."""
    counts = dict.fromkeys((label for label, _ in phases), 0)
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        if stack.rsplit(";", 1)[-1].startswith("_worker (concurrent/futures/thread.py"):
            continue
        total += int(n)
        for label, needle in phases:
            if needle in stack:
                counts[label] += int(n)
                break
    return [(label, 100 * c / total if total else float("nan")) for label, c in counts.items()]


def profile() -> None:
    """Ours alone, 4 workers and 20 clients, with py-spy sampling the web process and every
    worker; prints each one's share of samples per phase (waits on PostgreSQL included)."""
    spy = Path(sys.executable).parent / "py-spy"
    tokens = _prepare()
    ours = Ours(max(WORKERS), tokens)
    try:
        run_batch(ours, max(WORKERS), 1, 3)
        procs = {"web": ours.web, **{f"worker-{k}": p for k, p in enumerate(ours.workers)}}
        seconds = str(int(min(BATCH_SECONDS, 30)))
        # The web's pid is granian's supervisor: the requests run in the processes it
        # starts, so py-spy follows its subprocesses (without, the web had no samples).
        spies = [
            subprocess.Popen(
                [
                    *(str(spy), "record", "--pid", str(p.pid), "--duration", seconds),
                    *("--rate", "200", "--format", "raw", "--nonblocking"),
                    *(("--subprocesses",) if name == "web" else ()),
                    *("-o", str(LOGS / f"profile-{name}.txt")),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, p in procs.items()
        ]
        time.sleep(1)
        run_batch(ours, max(WORKERS), MANY, CYCLES_MANY)
        for s in spies:
            s.wait(timeout=120)
    finally:
        ours.stop()
    workers = LOGS / "profile-workers.txt"
    workers.write_text(
        "".join((LOGS / f"profile-{n}.txt").read_text() for n in procs if n != "web")
    )
    print_profile()


def print_profile() -> None:
    workers = LOGS / "profile-workers.txt"
    for title, path, phases in (
        ("web process", LOGS / "profile-web.txt", WEB_PHASES),
        ("workers", workers, WORKER_PHASES),
    ):
        print(f"{title} (share of py-spy samples):")
        for label, pct in _phases(path, phases):
            print(f"  {pct:5.1f}%  {label}")


def _prepare() -> dict[str, str]:
    """Fresh databases and Redis DB; our users and their tokens."""
    LOGS.mkdir(parents=True, exist_ok=True)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    _fresh_database(PEER_DB)
    return prepare_checkout(HERE)


def prepare_checkout(checkout: Checkout) -> dict[str, str]:
    """``checkout``'s database made anew, migrated by its own code, with our users; their
    tokens."""
    _fresh_database(checkout.db)
    out = subprocess.run(
        [sys.executable, "-m", "bench.e2e", "setup"],
        cwd=checkout.root,
        env=_ours_env(checkout),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# --- ours under daphne and under uvicorn ---------------------------------------------------


def behind(
    ours: Ours, name: str, server: str = "uvicorn", processes: int = 1, loop: str = shape.LOOP
) -> Ours:
    """Another web server serving ``portal.asgi`` beside ``ours``'s: the same database and
    workers. Its caller waits for it and stops it."""
    import copy

    other = copy.copy(ours)
    other.name, other.server, other.processes = name, server, processes
    other.port, other.web = _web(server, processes, loop)
    other.base = f"http://127.0.0.1:{other.port}"
    return other


def servers() -> None:
    """Ours alone, the same workers and database behind two web processes, daphne and
    uvicorn, batches alternating: what the ASGI server itself costs a user."""
    load = os.getloadavg()
    tokens = _prepare()
    workers = min(WORKERS)
    ours = Ours(workers, tokens, server="daphne", processes=1)
    ours.name = "daphne"
    other = behind(ours, "uvicorn")
    batches: list[Batch] = []
    apart: dict[str, list[dict[str, Any]]] = {"daphne": [], "uvicorn": []}
    try:
        _wait_http(other.base + "/healthz", other.web, seconds=STARTUP_SECONDS)
        for side in (ours, other):
            run_batch(side, workers, 1, 3)  # warm-up, not reported
        for rnd in range(ROUNDS):
            sides = [ours, other] if rnd % 2 == 0 else [other, ours]
            for clients, total in ((1, CYCLES_ONE), (MANY, CYCLES_MANY)):
                for side in sides:
                    batches.append(run_batch(side, workers, clients, total))
            for side in sides:
                apart[side.name].append(tiers_apart(side, workers))
    finally:
        _stop([other.web])
        ours.stop()
    rows = []
    for name in ("daphne", "uvicorn"):
        for clients in (1, MANY):
            b = _merge([x for x in batches if x.side == name and x.clients == clients])
            rows.append([name, clients, *b.figures()])
    apart_rows = [
        [name, r["n"], r["starts_per_s"], r["approvals_per_s"], len(r["errors"])]
        for name in ("daphne", "uvicorn")
        for r in apart[name]
    ]
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.e2e servers`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"Ours alone: the same {workers} worker{'s' if workers != 1 else ''}, database "
            "and client as above, behind "
            "two web processes serving `portal.asgi` at once, daphne (as deployed) and "
            "uvicorn (with uvloop and httptools, as the peer runs), their batches "
            f"alternating over {ROUNDS} rounds ({CYCLES_ONE} cycles with one client, "
            f"{CYCLES_MANY} with {MANY}); then for each, {BURST} starts and approvals "
            "through it with the workers stopped.",
            table(["server", "clients", "cycles", *CYCLE_COLUMNS], rows),
            table(["server", "threads", "starts/s", "approvals/s", "errors"], apart_rows),
        ]
    )
    title = "End to end: the ASGI server, daphne against uvicorn"
    print(body)
    write_section("e2e-servers", title, body)


# --- one web process's ceiling -------------------------------------------------------------

CEILING_REQUESTS = int(os.environ.get("BENCH_E2E_CEILING_REQUESTS", "1000"))


def _nothing_found(side: Ours | Peer) -> tuple[str, dict[str, str]]:
    """A request that does next to nothing: ours checks the token and reads one row that
    is not there; the peer (no auth) reads one thread that is not there. Both answer 404."""
    if isinstance(side, Ours):
        return side.base + "/api/interrupts/int_0000000000000000", side.reviewer
    return f"{side.base}/threads/{uuid.uuid4()}", {}


def _requests_per_second(side: Ours | Peer) -> tuple[float, float, list[str]]:
    """Requests per second, and the server process's CPU milliseconds per request."""
    url, headers = _nothing_found(side)
    server = side.web if isinstance(side, Ours) else side.proc

    async def call(client: Any) -> None:
        r = await client.get(url, headers=headers)
        if r.status_code != 404:
            raise RuntimeError(f"{r.status_code} {r.text[:200]}")

    cpu = shape.cpu_seconds(server.pid)
    seconds, errors = asyncio.run(_burst([call] * CEILING_REQUESTS, MANY))
    cpu_ms = 1000 * (shape.cpu_seconds(server.pid) - cpu) / CEILING_REQUESTS
    return CEILING_REQUESTS / seconds, cpu_ms, errors


def ceiling() -> None:
    """How many requests one web process serves per second when each does next to
    nothing (a 404 after at most a token check and one read), from 20 clients: ours under
    daphne and under uvicorn, and the peer's server, bursts alternating. The most that one
    process could take of anything, approvals included."""
    load = os.getloadavg()
    tokens = _prepare()
    ours = Ours(1, tokens, server="daphne", processes=1)
    ours.name = "ours, daphne"
    other = behind(ours, "ours, uvicorn")
    peer = Peer(1)
    rates: dict[str, list[float]] = {ours.name: [], other.name: [], peer.name: []}
    cpu: dict[str, list[float]] = {name: [] for name in rates}
    errors: list[str] = []
    try:
        _wait_http(other.base + "/healthz", other.web, seconds=STARTUP_SECONDS)
        sides: list[Ours | Peer] = [ours, other, peer]
        for side in sides:
            _requests_per_second(side)  # warm-up, not reported
        for rnd in range(ROUNDS * 2):
            for side in sides if rnd % 2 == 0 else sides[::-1]:
                rate, cpu_ms, failed = _requests_per_second(side)
                rates[side.name].append(rate)
                cpu[side.name].append(cpu_ms)
                errors.extend(failed)
    finally:
        _stop([other.web])
        ours.stop()
        peer.stop()
    rows = [
        [name, len(r), min(r), statistics.median(r), max(r), statistics.median(cpu[name])]
        for name, r in rates.items()
    ]
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.e2e ceiling`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"One web process, {MANY} clients, {CEILING_REQUESTS} requests a burst, "
            f"{ROUNDS * 2} bursts each after a warm-up, the three taking turns: ours "
            "answering `GET /api/interrupts/<an id that is not there>` with a reviewer's "
            "token (the token checked, one row read, 404) under daphne and under uvicorn, "
            "and the peer answering `GET /threads/<a random id>` (no token, one read, "
            "404). Server CPU is the server process's own (user + system), median over its "
            f"bursts. Errors: {len(errors)}.",
            table(
                ["server", "bursts", "requests/s min", "median", "max", "server CPU ms/request"],
                rows,
            ),
        ]
    )
    print(body)
    write_section("e2e-ceiling", "End to end: what one web process serves at most", body)


# --- one client's CPU per step, each side ------------------------------------------------

CPU_CYCLES = int(os.environ.get("BENCH_E2E_CPU_CYCLES", "100"))
CPU_ROUNDS = 4


def side_cpu(side: Ours | Peer) -> tuple[float, float, dict[int, float]]:
    """CPU seconds so far of (the server's process tree, ours' workers, each backend of the
    side's database): read before and after a batch."""
    if isinstance(side, Ours):
        workers = sum(shape.process_cpu_seconds(p.pid) or 0.0 for p in side.workers)
        database = shape.database_cpu_seconds(side.checkout.db)
        return shape.tree_cpu_seconds(side.web.pid), workers, database
    return shape.tree_cpu_seconds(side.proc.pid), 0.0, shape.database_cpu_seconds(PEER_DB)


def cpu() -> None:
    """One client, 1 worker each: the wall time of a step against the CPU the side's
    processes spent on it (its server, its workers, its database's backends), the two
    sides taking turns. Whether a step waits, or computes, is where the two part."""
    load = os.getloadavg()
    tokens = _prepare()
    ours = peer = None
    rows: list[list[object]] = []
    try:
        ours, peer = Ours(1, tokens), Peer(1)
        for side in (ours, peer):
            run_batch(side, 1, 1, 10)  # warm-up, not reported
        for rnd in range(CPU_ROUNDS):
            for side in (ours, peer) if rnd % 2 == 0 else (peer, ours):
                web, workers, db = side_cpu(side)
                began = time.perf_counter()
                batch = run_batch(side, 1, 1, CPU_CYCLES)
                wall = time.perf_counter() - began
                web2, workers2, db2 = side_cpu(side)
                ms = 1000 / (2 * len(batch.done))  # per step: a start or an answer
                server = (web2 - web) * ms
                run = (workers2 - workers) * ms
                database = shape.backends_cpu_between(db, db2) * ms
                rows.append(
                    [side.name, rnd + 1, wall * ms, server, run, database, server + run + database]
                )
    finally:
        for server_ in (ours, peer):
            if server_ is not None:
                server_.stop()
    body = "\n\n".join(
        [
            f"Command: `{command('bench.e2e')} cpu`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"Ours in the production shape with 1 worker, the peer with 1 job; one client, "
            f"{CPU_ROUNDS} rounds of {CPU_CYCLES} cycles a side, the sides taking turns. Per "
            "step (a start until paused, or an answer until done): the wall time, and the "
            "CPU its processes spent (user + system): the server's process tree (ours: "
            "the web processes; the peer: its one process), ours' worker, and the backends "
            "of the side's own database. A step whose CPU is near its wall time computes "
            "all along; one whose CPU falls short waits.",
            table(
                [
                    "server",
                    "round",
                    "wall ms/step",
                    "server CPU ms",
                    "worker CPU ms",
                    "PostgreSQL CPU ms",
                    "CPU ms in all",
                ],
                rows,
            ),
        ]
    )
    print(body)
    write_section("e2e-cpu", "End to end: one client's CPU per step, against the peer", body)


# --- one client's cycle in PostgreSQL, statement by statement --------------------------------

STATEMENT_CYCLES = int(os.environ.get("BENCH_E2E_STATEMENT_CYCLES", "50"))
# PostgreSQL's per-stage resource reports, turned on for ours' database alone.
STAGE_STATS = ("log_parser_stats", "log_planner_stats", "log_executor_stats")


def _server_log() -> Path:
    """The PostgreSQL server's log, where the stage reports go: ``BENCH_PG_LOG``, else the
    log collector's current file, else Debian's file for the cluster."""
    if os.environ.get("BENCH_PG_LOG"):
        return Path(os.environ["BENCH_PG_LOG"])
    import psycopg

    with psycopg.connect(f"{PG}/postgres") as conn:
        current, data = conn.execute(
            "SELECT pg_current_logfile(), current_setting('data_directory')"
        ).fetchone()  # type: ignore[misc]
    if current:
        return Path(data) / current
    version, cluster = Path(data).parts[-2:]
    return Path(f"/var/log/postgresql/postgresql-{version}-{cluster}.log")


def stage_cpu(text: str, database: str) -> dict[str, float]:
    """CPU seconds (user + system) that the stage reports in the server log ``text`` give
    each statement of ``database``, keyed by the statement's opening (whitespace folded).
    Needs a ``log_line_prefix`` that starts with the time (``%m``) and names the database
    (``%d``), as Debian's does: an entry's further lines are the statement's own."""
    spent: dict[str, float] = {}
    usage: float | None = None
    for entry in re.split(r"\n(?=\d{4}-\d\d-\d\d )", text):
        head, _, message = entry.partition(":  ")
        if f"@{database} " not in head:
            continue
        level = head.rsplit(" ", 1)[-1]
        if level == "DETAIL":
            found = re.search(r"([\d.]+) s user, ([\d.]+) s system", message)
            usage = float(found.group(1)) + float(found.group(2)) if found else None
        elif level == "STATEMENT" and usage is not None:
            key = " ".join(message.split())[:72]
            spent[key] = spent.get(key, 0.0) + usage
            usage = None
        else:  # a report's title, or another message
            usage = None
    return spent


def statements() -> None:
    """Ours in the production shape with 1 worker, one client: PostgreSQL's CPU per cycle
    for each statement, from the server's own per-stage reports (parse, plan, execute),
    turned on for ours' database only and reset after."""
    import psycopg

    log = _server_log()
    if not os.access(log, os.R_OK):
        raise SystemExit(f"cannot read the PostgreSQL server's log {log}; name it in BENCH_PG_LOG")
    load = os.getloadavg()
    tokens = _prepare()
    name = OURS_DB.rsplit("/", 1)[1]

    def stage_stats(value: str) -> None:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            for setting in STAGE_STATS:
                conn.execute(f'ALTER DATABASE "{name}" SET {setting} {value}')

    stage_stats("= on")  # before ours connects: each session reads it at its start
    ours = None
    try:
        ours = Ours(1, tokens)
        run_batch(ours, 1, 1, 10)  # warm-up, not reported
        start = log.stat().st_size
        batch = run_batch(ours, 1, 1, STATEMENT_CYCLES)
        time.sleep(0.5)  # the last reports reach the log
        with log.open() as f:
            f.seek(start)
            text = f.read()
    finally:
        if ours is not None:
            ours.stop()
        stage_stats("TO DEFAULT")
    spent = stage_cpu(text, name)
    if not spent:
        raise SystemExit(
            f"no stage reports for {name} in {log}; log_line_prefix must start with %m and "
            "name the database (%d)"
        )
    cycles = len(batch.done)
    total = sum(spent.values())
    ranked = sorted(spent.items(), key=lambda kv: -kv[1])

    def share(cpu: float) -> str:
        return f"{100 * cpu / total:.0f}%"

    rows: list[list[object]] = [
        [f"`{sql}`".replace("|", "\\|") if sql else "(empty)", cpu * 1000 / cycles, share(cpu)]
        for sql, cpu in ranked
    ]
    rows.append(["in all", total * 1000 / cycles, "100%"])
    body = "\n\n".join(
        [
            f"Command: `{command('bench.e2e')} statements`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"Ours in the production shape with 1 worker, one client, {cycles} cycles after "
            "10 of warm-up (a start until paused and an answer until done), with "
            "PostgreSQL's per-stage reports (`" + "`, `".join(STAGE_STATS) + "`) on for "
            "ours' database alone. Each statement's CPU (user + system) over its parse, "
            "plan and execution, per cycle; statements are named by their opening, so "
            "one bound on the client is its own row (`SELECT clock_timestamp()` is the "
            "benchmark's own). Time outside those stages (commits, the protocol, "
            "`NOTIFY`'s delivery) is not in it.",
            table(["statement", "PostgreSQL CPU ms per cycle", "share"], rows),
        ]
    )
    print(body)
    title = "End to end: one client's cycle in PostgreSQL, by statement"
    write_section("e2e-statements", title, body)


# --- entry ----------------------------------------------------------------------------------


def main() -> None:
    load = os.getloadavg()
    tokens = _prepare()
    batches: list[Batch] = []
    apart = []
    for workers in WORKERS:
        print(f"--- {workers} worker(s)", flush=True)
        ours = peer = None
        try:
            ours = Ours(workers, tokens)
            peer = Peer(workers)
            for side in (ours, peer):
                run_batch(side, workers, 1, 3)  # warm-up, not reported
            for rnd in range(ROUNDS):
                sides: list[Ours | Peer] = [ours, peer] if rnd % 2 == 0 else [peer, ours]
                for clients, total in ((1, CYCLES_ONE), (MANY, CYCLES_MANY)):
                    for side in sides:
                        batches.append(run_batch(side, workers, clients, total))
            apart.append(tiers_apart(ours, workers))
        finally:
            for server in (ours, peer):
                if server is not None:
                    server.stop()
    write_report(batches, apart, load)


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        setup_ours()
    elif sys.argv[1:] == ["profile"]:
        profile()
    elif sys.argv[1:] == ["profile-report"]:
        print_profile()
    elif sys.argv[1:] == ["servers"]:
        servers()
    elif sys.argv[1:] == ["ceiling"]:
        ceiling()
    elif sys.argv[1:] == ["cpu"]:
        cpu()
    elif sys.argv[1:] == ["statements"]:
        statements()
    else:
        main()
