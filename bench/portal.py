"""The live portal on PostgreSQL and Redis.

Three parts, each writing its own section of docs/benchmarks.md:

- ``queue``: the review queue page with 100,000 pending and 1,000,000 decided interrupts.
  Server time (Django's test ``Client`` in process, a reviewer logged in, request to
  rendered response) over first pages, filters, both sort orders and deep keyset pages;
  p50/p95/p99 per kind, and the number of SQL queries of every request. The decided rows
  (with their decisions) come from ``bench.history.generate_decisions``; the pending rows
  from one more ``generate_series`` insert.
- ``fanout``: 200 websocket clients on ``/ws/queue/`` of a real server (``manage.py
  runserver``, i.e. daphne) in a subprocess, with a Redis channel layer. Each round
  records one decision in this process and takes the time from its commit (an
  ``on_commit`` callback registered before the decision's own) until each client has the
  update. The clients run in processes of their own (``BENCH_FANOUT_CLIENT_PROCS``, 4), so
  they share a GIL neither with the publisher nor with 199 other clients; times are
  wall-clock times of one machine. ``BENCH_FANOUT_SERVERS=N`` starts N servers and spreads
  the client processes over them (a deployment option; not part of the written section).
- ``tokens``: a fake OpenAI-compatible server (``agents.testing.fake_openai``) streams
  answers to a ``manage.py run_worker`` process running the refunds agent on an OpenAI
  client; a websocket client follows each thread. Latency per token: from the fake server
  flushing the chunk (``FakeOpenAI.sent_at``) to the client receiving its delta.

Run: ``.venv-bench/bin/python -m bench.portal [queue] [fanout] [tokens]`` (all three when none is
named). PostgreSQL at ``BENCH_LIVE_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/portal_bench_live``, created and migrated if needed)
and Redis at ``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/3``). Each part runs in
a subprocess of its own so each configures Django once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.report import ensure_database, load_note, machine, percentile, table, write_section

ROOT = Path(__file__).resolve().parent.parent
FANOUT_RESULTS = ROOT / "artifacts" / "bench"
LAYER_NAMES = {"core": "RedisChannelLayer", "pubsub": "RedisPubSubChannelLayer"}
DB_URL = os.environ.get(
    "BENCH_LIVE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_live"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/3")
PENDING = int(os.environ.get("BENCH_QUEUE_PENDING", "100000"))
DECIDED = int(os.environ.get("BENCH_QUEUE_DECIDED", "1000000"))
REQUESTS = int(os.environ.get("BENCH_QUEUE_REQUESTS", "300"))
CLIENTS = int(os.environ.get("BENCH_FANOUT_CLIENTS", "200"))
CLIENT_PROCS = int(os.environ.get("BENCH_FANOUT_CLIENT_PROCS", "4"))
ROUNDS = int(os.environ.get("BENCH_FANOUT_ROUNDS", "40"))
TOKEN_THREADS = int(os.environ.get("BENCH_TOKEN_THREADS", "5"))
TOKENS_PER_ANSWER = int(os.environ.get("BENCH_TOKENS_PER_ANSWER", "200"))
PARTS = ["queue", "fanout", "tokens"]
# The portal's layer first; RedisChannelLayer (its layer before pub/sub) for comparison.
FANOUT_RUNS = [("pubsub", CLIENTS), ("core", CLIENTS), ("pubsub", 1), ("core", 1)]
SERVERS = int(os.environ.get("BENCH_FANOUT_SERVERS", "1"))
PENDING_FIRST = 5_000_000  # row numbers of pending rows, clear of the decided ones


# --- setup ----------------------------------------------------------------------------------


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SQLITE_PATH",)}
    env.update(
        {
            "DATABASE_URL": DB_URL,
            "REDIS_URL": REDIS_URL,
            "DJANGO_SETTINGS_MODULE": "bench.live_settings",
            "PORTAL_EMBEDDED_WORKER": "0",
            "PORTAL_NO_WORKER": "1",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _setup() -> None:
    ensure_database(DB_URL)
    os.environ.update(_env())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


_PENDING_SQL = """
INSERT INTO portal_thread (id, agent, status, title, created_at, updated_at, last_seq)
SELECT lpad(to_hex(i), 32, '0')::uuid, (%(agents)s::text[])[1 + i %% 4], 'interrupted',
       'pending thread ' || i, now() - (%(n)s - (i - %(first)s)) * interval '5 seconds',
       now() - (%(n)s - (i - %(first)s)) * interval '5 seconds', 3
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS i;

INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message, reason,
    response_schema, tool_call_id, status, created_at, expires_at, resolved_at,
    checkpoint_seq, claimed_by_id, claimed_at)
SELECT 'pend_' || i, lpad(to_hex(i), 32, '0')::uuid, (%(agents)s::text[])[1 + i %% 4],
       'TOOL:-:0', 'TOOL', jsonb_build_object('order_id', 'A-' || i, 'amount', (i %% 997) + 0.5),
       'Approve a $' || ((i %% 997) + 0.5) || ' refund for order A-' || i || '?',
       (%(reasons)s::text[])[1 + i %% 5],
       '{"type": "object", "properties": {"approved": {"type": "boolean"},
         "note": {"type": "string"}}, "required": ["approved"]}'::jsonb,
       NULL, 'pending', now() - (%(n)s - (i - %(first)s)) * interval '5 seconds', NULL, NULL, 3,
       CASE WHEN i %% 10 = 0 THEN (%(reviewers)s::int[])[1 + (i / 10) %% 20] END,
       CASE WHEN i %% 10 = 0 THEN now() END
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS i
"""


def _reviewers() -> tuple[Any, list[int]]:
    from django.contrib.auth import get_user_model

    from portal.accounts.groups import ensure_roles

    groups = {g.name: g for g in ensure_roles()}
    ids = []
    for k in range(20):
        user, _ = get_user_model().objects.get_or_create(username=f"bench-reviewer-{k:02d}")
        user.groups.add(groups["reviewer"])
        ids.append(user.pk)
    owner, _ = get_user_model().objects.get_or_create(username="bench-live-reviewer")
    owner.groups.add(groups["reviewer"])
    return owner, ids


def _ensure_data() -> tuple[Any, float | None]:
    """The reviewer who looks, and the seconds spent generating (None if reused)."""
    from django.db import connection

    from bench.history import AGENTS, REASONS, generate_decisions
    from portal.models import Interrupt

    reviewer, reviewer_ids = _reviewers()
    pending = Interrupt.objects.filter(status="pending").count()
    decided = Interrupt.objects.exclude(status="pending").count()
    if pending == PENDING and decided >= DECIDED:
        return reviewer, None
    print(f"generating {DECIDED:,} decided and {PENDING:,} pending interrupts ...", flush=True)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE portal_decision, portal_run, portal_checkpoint, portal_interrupt, "
            "portal_thread CASCADE"
        )
    generate_decisions(DECIDED, reviewer_ids=reviewer_ids)
    params = {
        "n": PENDING,
        "first": PENDING_FIRST,
        "agents": AGENTS,
        "reasons": REASONS,
        "reviewers": reviewer_ids,
    }
    with connection.cursor() as cursor:
        for statement in _PENDING_SQL.split(";\n\n"):
            cursor.execute(statement, params)
        for name in ("portal_thread", "portal_interrupt", "portal_decision"):
            cursor.execute(f"VACUUM ANALYZE {name}")
    seconds = time.perf_counter() - began
    print(f"generated in {seconds:.1f}s", flush=True)
    return reviewer, seconds


# --- part 1: the queue page -------------------------------------------------------------------


def _queue_requests(rng: random.Random) -> list[tuple[str, dict[str, str]]]:
    from portal.models import Interrupt
    from portal.web.queue import encode_cursor

    # Cursors at random depths: real rows, so a page really starts deep in the queue.
    sample = list(
        Interrupt.objects.filter(status="pending").order_by("?").only("id", "created_at")[:60]
    )
    cursors = [encode_cursor(item) for item in sample]
    kinds: list[tuple[str, Any]] = [
        ("first page, oldest first", lambda: {}),
        ("first page, newest first", lambda: {"sort": "newest"}),
        ("agent filter", lambda: {"agent": rng.choice(["refunds", "transfers", "accounts"])}),
        ("reason filter", lambda: {"reason": rng.choice(["tool_approval", "breakpoint"])}),
        (
            "agent + reason",
            lambda: {"agent": rng.choice(["refunds", "contact"]), "reason": "tool_approval"},
        ),
        ("deep page (keyset), oldest", lambda: {"after": rng.choice(cursors)}),
        ("deep page (keyset), newest", lambda: {"after": rng.choice(cursors), "sort": "newest"}),
        ("page back (keyset)", lambda: {"before": rng.choice(cursors)}),
    ]
    return [(name, make()) for name, make in (rng.choice(kinds) for _ in range(REQUESTS))]


def bench_queue() -> None:
    _setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from portal.web.queue import pending_queryset

    reviewer, generated = _ensure_data()
    client = Client()
    client.force_login(reviewer)
    rng = random.Random(6)
    for _ in range(20):  # warm-up: connections, templates, caches
        client.get("/queue/")
    by_kind: dict[str, list[float]] = {}
    queries: dict[str, set[int]] = {}
    offsets = 0
    everything: list[float] = []
    for kind, params in _queue_requests(rng):
        with CaptureQueriesContext(connection) as ctx:
            began = time.perf_counter()
            response = client.get("/queue/", params)
            elapsed = time.perf_counter() - began
        assert response.status_code == 200, response.status_code
        by_kind.setdefault(kind, []).append(elapsed * 1000)
        everything.append(elapsed * 1000)
        queries.setdefault(kind, set()).add(len(ctx.captured_queries))
        offsets += sum("OFFSET" in q["sql"].upper() for q in ctx.captured_queries)
    with connection.cursor() as cursor:
        sql, params = pending_queryset().order_by("created_at", "id")[:26].query.sql_with_params()
        cursor.execute("EXPLAIN ANALYZE " + sql, params)
        plan = [row[0] for row in cursor.fetchall()]
    rows = [
        [
            kind,
            len(ms),
            percentile(ms, 50),
            percentile(ms, 95),
            percentile(ms, 99),
            "/".join(str(n) for n in sorted(queries[kind])),
        ]
        for kind, ms in sorted(by_kind.items())
    ]
    all_counts = sorted(set().union(*queries.values()))
    p95 = percentile(everything, 95)
    body = f"""
Command: `.venv-bench/bin/python -m bench.portal queue`.

Machine: {machine()}.
Load average {_load()} at the end (other jobs shared the cores).
PostgreSQL, {PENDING:,} pending and {DECIDED:,} decided interrupts
(each decided one with its decision; 10% of the pending ones claimed).
{REQUESTS} requests by a logged-in reviewer, random kinds, after 20 warm-up requests;
server time = Django's test client, request to rendered response, in process (no network).
{"Data generated in " + format(generated, ".0f") + " s." if generated else "Data reused."}

{table(["request", "n", "p50 ms", "p95 ms", "p99 ms", "SQL queries"], rows)}

- Overall: p50 {percentile(everything, 50):.1f} ms, p95 {p95:.1f} ms. Target p95 < 100 ms:
  **{"met" if p95 < 100 else "missed"}**.
- SQL queries per request: {", ".join(map(str, all_counts))} for every kind of request, first
  page or deep in the queue (session, user, permissions, the page's rows with one LIMIT
  query from the cursor, and a count capped at 1,001 rows). `tests/web/test_queue_views.py`
  checks that the count is the same with 1 and 29 rows. Queries using OFFSET: {offsets}.
- Plan of the first page (oldest first):

```
{chr(10).join(plan[:6])}
```
"""
    write_section("portal-queue", "Live portal: the review queue at scale", body)
    print(body)


# --- websocket clients ----------------------------------------------------------------------


_QUEUE_ROW_SWAP = re.compile(r'<tr id="q-([^"]+)"[^>]*hx-swap-oob="(true|delete)"')


def _parse(raw: str) -> dict[str, Any]:
    """A frame as the benchmarks read it: streamed tokens are JSON; the rest is HTML, of
    which a queue frame that swaps a row says which request entered ("true": pending) or
    left ("delete")."""
    if raw.startswith("{"):
        return json.loads(raw)
    swap = _QUEUE_ROW_SWAP.search(raw)
    if swap is None:
        return {"type": "html"}
    status = "pending" if swap.group(2) == "true" else "gone"
    return {"type": "queue", "interrupt_id": swap.group(1), "status": status}


async def _collect(urls: list[str], headers: dict[str, str], ready: Any, stop: Any) -> list:
    """Connect one client per url; record (client, parsed message, wall time) until
    ``stop`` is set."""
    from websockets.asyncio.client import connect

    received: list[tuple[int, dict[str, Any], float]] = []

    gate = asyncio.Semaphore(20)  # a burst of 200 handshakes at once is not the point

    async def open_one(url: str) -> Any:
        for attempt in range(5):
            try:
                async with gate:
                    return await connect(url, additional_headers=headers, open_timeout=30)
            except Exception:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.5)
        return None

    async def client(n: int, ws: Any) -> None:
        # A plain read loop: a timeout per read (to notice ``stop``) cost a task and a
        # timer per message, a third of this process's time with 200 clients.
        try:
            async for raw in ws:
                received.append((n, _parse(raw), time.time()))
        except Exception as exc:  # counted as lost messages, reported
            print(f"client {n}: {exc!r}", file=sys.stderr, flush=True)

    sockets = await asyncio.gather(*(open_one(url) for url in urls))
    readers = [asyncio.create_task(client(n, ws)) for n, ws in enumerate(sockets)]
    ready()
    await stop.wait()
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    await asyncio.gather(*readers)
    return received


def clients_process() -> None:
    """``python -m bench.portal clients URL COUNT COOKIE ORIGIN``: COUNT websocket clients
    on URL; prints "ready" once all are open, and when stdin closes dumps what arrived."""
    url, count, cookie, origin = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    stop = asyncio.Event()

    async def main() -> list:
        loop = asyncio.get_running_loop()
        loop.add_reader(sys.stdin.fileno(), lambda: (sys.stdin.readline(), stop.set()))
        return await _collect(
            [url] * count,
            {"Cookie": cookie, "Origin": origin},
            lambda: print("ready", flush=True),
            stop,
        )

    received = asyncio.run(main())
    print(json.dumps([[n, m.get("interrupt_id"), m.get("status"), t] for n, m, t in received]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """``manage.py runserver`` (daphne) on the bench database and Redis."""

    def __init__(self, **extra_env: str) -> None:
        FANOUT_RESULTS.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=ROOT,
            env={**_env(), **extra_env},
            stdout=(FANOUT_RESULTS / "server.log").open("a"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _flush_redis() -> None:
    """Empty the bench's Redis database: a server stopped at the end of an earlier run
    leaves its websockets in the queue group, and ``RedisChannelLayer`` would go on
    copying every message to them for a day (its ``group_expiry``)."""
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def _session_cookie(user: Any) -> str:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


# --- part 2: fan-out ---------------------------------------------------------------------------


def bench_fanout() -> None:
    _setup()
    from django.db import transaction

    from portal.reviews.decisions import decision_submit
    from tests.factories import make_interrupt

    reviewer, _ = _ensure_data()
    _flush_redis()
    servers = [_Server() for _ in range(SERVERS)]
    # The clients are spread over a few processes: one process reading 200 sockets
    # timestamps the last of them only after parsing the 199 before it.
    shares = [CLIENTS // CLIENT_PROCS + (k < CLIENTS % CLIENT_PROCS) for k in range(CLIENT_PROCS)]
    groups = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.portal",
                "clients",
                servers[k % SERVERS].base.replace("http", "ws") + "/ws/queue/",
                str(share),
                _session_cookie(reviewer),
                servers[k % SERVERS].base,
            ],
            cwd=ROOT,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k, share in enumerate(shares)
        if share
    ]
    try:
        for clients in groups:
            assert clients.stdout is not None
            if clients.stdout.readline().strip() != "ready":
                raise RuntimeError("the websocket clients did not connect")
        appeared: dict[str, float] = {}
        committed: dict[str, float] = {}
        targets = []
        for _ in range(ROUNDS + 5):
            # A new request enters the queue (its row is rendered once, by the publisher)...
            with transaction.atomic():
                marks: list[float] = []
                transaction.on_commit(lambda m=marks: m.append(time.time()))
                interrupt = make_interrupt(agent="refunds")
            appeared[interrupt.pk] = marks[0]
            targets.append(interrupt)
            time.sleep(0.15)
            # ... and a decision takes it out again.
            with transaction.atomic():
                # Registered before the decision's own callbacks, so it runs first at commit.
                transaction.on_commit(lambda i=interrupt.pk: committed.__setitem__(i, time.time()))
                decision_submit(
                    interrupt=interrupt,
                    reviewer=reviewer,
                    value={"approved": False, "note": "bench"},
                    resume_interrupt_id=interrupt.pk,
                )
            time.sleep(0.15)
        time.sleep(1)
        received = []
        for k, clients in enumerate(groups):
            out, _ = clients.communicate("stop\n", timeout=60)
            received += [
                [f"{k}-{n}", *rest] for n, *rest in json.loads(out.strip().splitlines()[-1])
            ]
    finally:
        for clients in groups:
            if clients.poll() is None:
                clients.kill()
        for server in servers:
            server.stop()
    warmup = {i.pk for i in targets[:5]}

    def latencies(marks: dict[str, float], entering: bool) -> tuple[list, list, int]:
        per_client, until_all, missing = [], [], 0
        for interrupt_id, t0 in marks.items():
            if interrupt_id in warmup:
                continue
            arrivals = {
                n: t
                for n, iid, status, t in received
                if iid == interrupt_id and (status == "pending") == entering
            }
            missing += CLIENTS - len(arrivals)
            lat = [(t - t0) * 1000 for t in arrivals.values()]
            per_client += lat
            if lat:
                until_all.append(max(lat))
        return per_client, until_all, missing

    def first_arrivals(marks: dict[str, float], entering: bool) -> list[float]:
        out = []
        for interrupt_id, t0 in marks.items():
            times = [
                t
                for n, iid, status, t in received
                if iid == interrupt_id and (status == "pending") == entering
            ]
            if interrupt_id not in warmup and times:
                out.append((min(times) - t0) * 1000)
        return out

    per_client, until_all, missing = latencies(committed, entering=False)
    new_client, new_all, new_missing = latencies(appeared, entering=True)
    missing += new_missing
    layer = os.environ.get("BENCH_CHANNEL_LAYER", "pubsub")
    FANOUT_RESULTS.mkdir(parents=True, exist_ok=True)
    (FANOUT_RESULTS / f"fanout-{layer}-{CLIENTS}.json").write_text(
        json.dumps(
            {
                "decision": per_client,
                "decision_all": until_all,
                "new": new_client,
                "new_all": new_all,
                "decision_first": first_arrivals(committed, entering=False),
                "new_first": first_arrivals(appeared, entering=True),
                "missing": missing,
            }
        )
    )
    print(f"fan-out with the {layer} layer: {len(until_all)} rounds, {missing} lost", flush=True)


def write_fanout_section(load_at_start: tuple[float, float, float]) -> None:
    results = {
        (layer, clients): json.loads(path.read_text())
        for layer, clients in FANOUT_RUNS
        if (path := FANOUT_RESULTS / f"fanout-{layer}-{clients}.json").exists()
    }
    rows = []
    for (layer, clients), r in results.items():
        for key, label in (
            ("decision", "decision: commit -> one client has it"),
            ("decision_first", "decision: commit -> the first client has it"),
            ("decision_all", "decision: commit -> every client has it"),
            ("new", "new request: commit -> one client has the row"),
            ("new_first", "new request: commit -> the first client has the row"),
            ("new_all", "new request: commit -> every client has the row"),
        ):
            if clients == 1 and key not in ("decision", "new"):
                continue  # with one client, first and every are the same figures
            ms = r.get(key, [])
            rows.append(
                [
                    LAYER_NAMES[layer],
                    clients,
                    label,
                    len(ms),
                    percentile(ms, 50),
                    percentile(ms, 95),
                    percentile(ms, 99),
                    max(ms) if ms else float("nan"),
                ]
            )
    ours = results.get(("pubsub", CLIENTS), {})
    p99 = percentile(ours.get("decision", []), 99)
    lost = sum(r["missing"] for r in results.values())
    rounds = len(ours.get("decision_all", []))
    body = f"""
Command: `.venv-bench/bin/python -m bench.portal fanout`.

Machine: {machine()}; {load_note(load_at_start)}.
One server process (`manage.py runserver`, daphne) with a Redis channel layer;
{CLIENTS} websocket clients on `/ws/queue/`, each logged in as a reviewer, spread over
{CLIENT_PROCS} client processes (one process reading 200 sockets would itself be late to
note the last of them). The bench's Redis database is emptied before each run (a server
stopped at the end of an earlier run leaves its sockets in the group). {rounds} rounds after
5 warm-up rounds, 150 ms apart: this process writes a new paused thread (checkpoint and
queue row in one transaction), then records a decision on it (`decision_submit`,
PostgreSQL), noting each commit's time; each client notes when the "new row" and the "left
the queue" messages arrive (after parsing them). Wall-clock times on one machine. Run with
the portal's `RedisPubSubChannelLayer` and, for comparison, `RedisChannelLayer` as the
portal configured it before (`bench/live_settings.py`), each with {CLIENTS} clients and with
one.

{
        table(
            ["channel layer", "clients", "measure", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            rows,
        )
    }

- Messages lost: {lost}. Target p99 < 100 ms (per client, decisions) on loopback with
  Redis, with the portal's configured layer (`RedisPubSubChannelLayer`):
  **{"met" if p99 < 100 else "missed"}** (p99 {p99:.0f} ms).
- A decision's message carries no HTML (the row just leaves); a new or claimed row is
  rendered once by the publisher, and each consumer forwards the same JSON.
- Before issue 6's fan-out work (commit 525153a, its own benchmark: one client process),
  this machine gave, for decisions, p50 105 / p99 241 ms with `RedisChannelLayer` and 200
  clients, 102 / 270 ms with `RedisPubSubChannelLayer`, and 9.1 / 16.7 ms with one client.
  What changed, each seen in this benchmark:
  - Publishing from sync code (the on-commit callbacks) went through `async_to_sync`: a new
    thread, event loop and Redis connection per message, about 7 ms before anything was
    sent. `portal/notify/broadcast.py` now keeps one loop (and connection) for all of them.
  - Channels closes stale database connections, in its one sync thread, before every
    handler: 200 thread hops in a row per broadcast. The forwarding consumers skip it (they
    never touch the database); the first of 200 clients then had a decision at 17 ms
    instead of 61 ms (p50, under the same load).
  - A full garbage collection in the server walked every object of Django's start-up
    (96-138 ms, several per run: the slowest rounds). `portal/asgi.py` freezes them;
    full collections then took 17-35 ms.
  - `RedisChannelLayer` reads the group's members back on every send (a `group_send` took
    3.5 ms with 200 members, 12 ms with 1,000 left by stopped servers) and re-arms two
    tasks per socket per message; `RedisPubSubChannelLayer` publishes once and each server
    process fans out in memory, hence the switch (`portal/settings.py`).
"""
    write_section("portal-fanout", "Live portal: websocket fan-out to 200 queues", body)
    print(body)


# --- part 3: token latency --------------------------------------------------------------------


def bench_tokens() -> None:
    _setup()
    from agents.testing.fake_openai import FakeOpenAI
    from portal.models import Run, Thread
    from portal.reviews.threads import thread_start

    reviewer, _ = _ensure_data()
    owner = reviewer
    # Runs the fan-out part queued (its decisions resume threads) would take the fake
    # model's answers first; this part measures its own threads only.
    Run.objects.filter(status__in=["queued", "running"]).update(
        status="failed", error="dropped by bench.portal tokens"
    )
    fake = FakeOpenAI(chunk_delay=0.005)
    answers = [
        " ".join(f"r{k}w{j:04d}" for j in range(TOKENS_PER_ANSWER)) for k in range(TOKEN_THREADS)
    ]
    for text in answers:
        fake.queue_text(text)
    fake.start()
    server = _Server()
    threads = [
        thread_start(
            agent="refunds",
            input={"messages": [{"role": "user", "content": f"Tell me a story {k}"}]},
            user=owner,
        )[0]
        for k in range(TOKEN_THREADS)
    ]
    stop = asyncio.Event()
    received: list = []
    opened = threading.Event()
    worker = None

    headers = {"Cookie": _session_cookie(owner), "Origin": server.base}

    follow_loop: list[asyncio.AbstractEventLoop] = []

    async def follow() -> None:
        nonlocal received
        follow_loop.append(asyncio.get_running_loop())
        urls = [server.base.replace("http", "ws") + f"/ws/threads/{t.pk}/" for t in threads]
        received = await _collect(urls, headers, opened.set, stop)

    loop_thread = threading.Thread(target=lambda: asyncio.run(follow()), daemon=True)
    try:
        loop_thread.start()
        if not opened.wait(30):
            raise RuntimeError("the websocket clients did not connect")
        # The worker starts only now, so no token is published before the clients listen.
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "run_worker"],
            cwd=ROOT,
            env={
                **_env(),
                "OPENAI_BASE_URL": fake.base_url,
                "OPENAI_API_KEY": "bench",
                "PORTAL_MODEL": "gpt-bench",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = Thread.objects.filter(
                pk__in=[t.pk for t in threads], status__in=["done", "failed"]
            ).count()
            if done == len(threads):
                break
            time.sleep(0.2)
        time.sleep(0.5)
        follow_loop[0].call_soon_threadsafe(stop.set)  # stop belongs to that loop's thread
        loop_thread.join(10)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=20)
        server.stop()
        fake.stop()
    failed = Thread.objects.filter(pk__in=[t.pk for t in threads], status="failed").count()
    tokens = [tok for text in answers for tok in fake_tokens(text)]
    sent = dict(zip(tokens, fake.sent_at, strict=False))
    latencies = []
    for _, message, arrived in received:
        if message.get("type") != "chunk":
            continue
        delta = (message["chunk"].get("data") or {}).get("delta")
        if delta and delta in sent:
            latencies.append((arrived - sent[delta]) * 1000)
    p50, p95, p99 = (percentile(latencies, p) for p in (50, 95, 99))
    body = f"""
Command: `.venv-bench/bin/python -m bench.portal tokens`.

Machine: {machine()}.
Load average {_load()} at the end (other jobs shared the cores).
A fake OpenAI-compatible server (`agents.testing.fake_openai`, in this
process) streams {TOKEN_THREADS} answers of {TOKENS_PER_ANSWER} word tokens, 5 ms apart, to
one `manage.py run_worker` process running the refunds agent on the OpenAI client
(PostgreSQL checkpoints). A websocket client per thread follows `/ws/threads/<id>/` on a
`manage.py runserver` (daphne) process; Redis channel layer. Latency per token = the client
receiving the delta minus the fake server flushing its chunk (wall clock, one machine).

{
        table(
            ["measure", "tokens", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            [
                [
                    "model token -> websocket client",
                    len(latencies),
                    p50,
                    p95,
                    p99,
                    max(latencies) if latencies else float("nan"),
                ]
            ],
        )
    }

- Tokens sent: {len(fake.sent_at)}, received by the clients: {len(latencies)}; failed
  threads: {failed}.
- The path: fake server -> `openai` stream in the worker -> runtime `on_delta` ->
  `broadcast.apublish_chunk` (Redis `group_send`) -> daphne's `ThreadConsumer` -> browser.
"""
    write_section("portal-tokens", "Live portal: token latency, model to browser", body)
    print(body)


def fake_tokens(text: str) -> list[str]:
    from agents.testing.fake_openai import _TOKEN

    return _TOKEN.findall(text)


# --- entry ------------------------------------------------------------------------------------


def main() -> None:
    """Every part, each in its own process (Django is configured once per process)."""
    for part in PARTS:
        print(f"--- bench.portal {part}", flush=True)
        subprocess.run([sys.executable, "-m", "bench.portal", part], cwd=ROOT, check=True)


def fanout_all_layers() -> None:
    load_at_start = os.getloadavg()
    for layer, clients in FANOUT_RUNS:
        env = {**os.environ, "BENCH_CHANNEL_LAYER": layer, "BENCH_FANOUT_CLIENTS": str(clients)}
        subprocess.run(
            [sys.executable, "-m", "bench.portal", "fanout-one"], cwd=ROOT, env=env, check=True
        )
    write_fanout_section(load_at_start)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "clients":
        clients_process()
    elif not args:
        main()
    else:
        for name in args:
            {
                "queue": bench_queue,
                "fanout": fanout_all_layers,
                "fanout-one": bench_fanout,
                "tokens": bench_tokens,
            }[name]()
