"""The production shape: which ASGI server, and what N web processes take.

``servers``: daphne, uvicorn and granian each serve ``portal.asgi`` in one process on the
same database, bursts taking turns: a token-checked ``GET /api/interrupts/<none>`` (404)
and an API approval (``POST /api/threads/<id>/resume``, no wait; the workers stopped, so
the approval's request alone is timed). Requests per second, and the server's CPU (its
process tree's user + system) per request. ``-m bench.shape servers`` runs it.

``loops``: the same bursts on granian with uvloop (the production shape's loop) and with
asyncio's own loop. ``approvals``: bursts of approvals through the production shape, and
how many of the database's backends wait for the chains' lock meanwhile. ``profile``:
py-spy on one approval burst.

The end-to-end benchmark (``bench.e2e``) runs ours in the shape chosen here
(``bench.servers``), as docs/deployment.md runs it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import e2e
from bench.report import load_note, machine, table, write_section
from bench.servers import (
    LOOP,
    backends_cpu_between,
    database_cpu_seconds,
    machine_idle_seconds,
    tree_cpu_seconds,
)

REQUESTS = int(os.environ.get("BENCH_SHAPE_REQUESTS", "600"))
BURSTS = int(os.environ.get("BENCH_SHAPE_BURSTS", "3"))
CLIENTS = int(os.environ.get("BENCH_SHAPE_CLIENTS", "20"))


def servers() -> None:
    load = os.getloadavg()
    rows = _taking_turns({name: (name, LOOP) for name in ("daphne", "uvicorn", "granian")})
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.shape servers`.",
            f"Machine: {machine()}; {load_note(load)}.",
            "One web process per server, each serving `portal.asgi` on the same database "
            f"(DEBUG off, 2 `run_worker`s, stopped while approvals are timed); {CLIENTS} "
            f"clients, {REQUESTS} requests a burst, {BURSTS} bursts per server and request "
            "after a warm-up, the servers taking turns (order reversed every other round). "
            "uvicorn and granian run on uvloop, daphne on Twisted's reactor. " + _MEASURES,
            table(["server", "request", "bursts", "requests/s", "server CPU ms/request"], rows),
        ]
    )
    print(body)
    write_section("e2e-shape-servers", "Production shape: daphne, uvicorn or granian", body)


def loops() -> None:
    """granian on uvloop, the production shape's loop, against granian on asyncio's own."""
    load = os.getloadavg()
    rows = _taking_turns({f"granian, {loop}": ("granian", loop) for loop in (LOOP, "asyncio")})
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.shape loops`.",
            f"Machine: {machine()}; {load_note(load)}.",
            "Two granian web processes of one process each, on the same database, one on "
            "uvloop (`--loop uvloop`, as docs/deployment.md runs it) and one on asyncio's own "
            f"loop (`--loop asyncio`); 2 `run_worker`s, stopped while approvals are timed; "
            f"{CLIENTS} clients, {REQUESTS} requests a burst, {BURSTS} bursts per loop and "
            "request after a warm-up, the two taking turns (order reversed every other "
            "round). " + _MEASURES,
            table(
                ["server, loop", "request", "bursts", "requests/s", "server CPU ms/request"], rows
            ),
        ]
    )
    print(body)
    write_section("e2e-shape-loops", "The event loop: uvloop or asyncio's own", body)


_MEASURES = (
    "A 404 is `GET /api/interrupts/<an id that is not there>` with a reviewer's "
    "token; an approval is `POST /api/threads/<id>/resume` on a paused thread "
    "(answered 202 once the decision and the resume run are committed). Server CPU "
    "= the server's process tree's user + system time over the burst / requests; "
    "medians over the bursts."
)


def _taking_turns(named: dict[str, tuple[str, str]]) -> list[list[object]]:
    """Bursts of 404s and of approvals on one web process per entry of ``named`` (its
    (server, loop)), taking turns: a row (name, request, bursts, requests/s, CPU ms) per
    entry and request. A daphne process, timed only if ``named`` has daphne, makes the
    paused threads."""
    tokens = e2e._prepare()
    ours = e2e.Ours(2, tokens, server="daphne", processes=1)
    sides = {}
    try:
        for name, (server, loop) in named.items():
            if server == "daphne":  # the process that makes the paused threads
                sides[name] = ours
            else:
                sides[name] = e2e.behind(ours, name, server, loop=loop)
                e2e._wait_http(
                    sides[name].base + "/healthz", sides[name].web, seconds=e2e.STARTUP_SECONDS
                )
        names = list(sides)
        per = REQUESTS
        # Paused threads to approve: one per approval of every burst, made up front.
        paused = _paused_threads(ours, per * BURSTS * len(names) + per)
        rates: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for side in sides.values():  # warm-up, not reported
            _burst_404(side)
            _burst_approve(side, [paused.pop() for _ in range(per // len(names))])
        for rnd in range(BURSTS):
            order = names if rnd % 2 == 0 else names[::-1]
            for name in order:
                rates.setdefault((name, "404"), []).append(_burst_404(sides[name]))
            for name in order:
                batch = [paused.pop() for _ in range(per)]
                rates.setdefault((name, "approval"), []).append(_burst_approve(sides[name], batch))
            print(f"  round {rnd + 1}: load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        e2e._stop([s.web for s in sides.values() if s is not ours])
        ours.stop()
    rows = []
    for (name, kind), values in rates.items():
        rps, cpu = [v[0] for v in values], [v[1] for v in values]
        rows.append([name, kind, len(values), statistics.median(rps), statistics.median(cpu)])
    rows.sort(key=lambda r: (r[1], r[0]))
    return rows


def _paused_threads(ours: Any, n: int) -> list[tuple[str, str]]:
    """``n`` threads started and paused by the worker: (thread id, interrupt id)."""
    import psycopg

    stats = e2e.Stats()
    ids: list[str] = []

    async def start(client: Any) -> None:
        ids.append((await ours.start(client, stats))["thread_id"])

    in_ids = "SELECT count(*) FROM portal_thread WHERE id = ANY(%s::uuid[]) AND status = %s"
    while len(ids) < n:  # in chunks: a burst, and a drain, are bounded in time
        asyncio.run(e2e._burst([start] * min(200, n - len(ids)), CLIENTS))
        e2e._drain(in_ids, [ids, "interrupted"], len(ids))
    with psycopg.connect(e2e.OURS_DB) as conn:
        rows = conn.execute(
            "SELECT thread_id::text, id FROM portal_interrupt "
            "WHERE thread_id = ANY(%s::uuid[]) AND status = 'pending'",
            [ids],
        ).fetchall()
    return [(str(t), str(i)) for t, i in rows]


def _burst_404(side: Any) -> tuple[float, float]:
    url = side.base + "/api/interrupts/int_0000000000000000"

    async def call(client: Any) -> None:
        r = await client.get(url, headers=side.reviewer)
        if r.status_code != 404:
            raise RuntimeError(f"{r.status_code} {r.text[:200]}")

    return _timed(side, [call] * REQUESTS)


def _burst_approve(side: Any, threads: list[tuple[str, str]]) -> tuple[float, float]:
    stats = e2e.Stats()

    def approve(thread_id: str, interrupt_id: str) -> Any:
        async def call(client: Any) -> None:
            await side.resume(client, stats, thread_id, interrupt_id)

        return call

    for proc in side.workers:
        proc.send_signal(signal.SIGSTOP)
    try:
        return _timed(side, [approve(t, i) for t, i in threads])
    finally:
        for proc in side.workers:
            proc.send_signal(signal.SIGCONT)


def _timed(side: Any, calls: list[Any]) -> tuple[float, float]:
    """Requests per second and server CPU ms per request over one burst of ``calls``."""
    cpu = tree_cpu_seconds(side.web.pid)
    seconds, errors = asyncio.run(e2e._burst(calls, CLIENTS))
    if errors:
        raise RuntimeError(f"{len(errors)} errors, first: {errors[0]}")
    return len(calls) / seconds, 1000 * (tree_cpu_seconds(side.web.pid) - cpu) / len(calls)


# --- approvals through the production shape, and who waits for the chains' lock -------


def approvals() -> None:
    """Bursts of API approvals through the production shape (``bench.servers``: N web
    processes, 4 workers stopped), while a sampler counts, every 10 ms, the database's
    backends by what they wait for: how many wait for the chains' lock (an advisory lock)
    says how much of the rate that lock sets."""
    load = os.getloadavg()
    tokens = e2e._prepare()
    ours = e2e.Ours(4, tokens)
    try:
        paused = _paused_threads(ours, REQUESTS * (BURSTS + 1))
        _burst_approve(ours, [paused.pop() for _ in range(REQUESTS)])  # warm-up
        rows: list[list[object]] = []
        for rnd in range(BURSTS):
            backends, client, (idle, total) = (
                database_cpu_seconds(ours.checkout.db),
                time.process_time(),
                machine_idle_seconds(),
            )
            sampler: list[int] = []
            with _waits_sampled(sampler) as waits:
                rate, cpu = _burst_approve(ours, [paused.pop() for _ in range(REQUESTS)])
            after = database_cpu_seconds(ours.checkout.db)
            for pid in sampler:  # the sampler's own backend is not the approvals'
                after.pop(pid, None)
            database = backends_cpu_between(backends, after)
            client = time.process_time() - client
            idle_after, total_after = machine_idle_seconds()
            rows.append(
                [
                    rnd + 1,
                    rate,
                    cpu,
                    1000 * database / REQUESTS,
                    1000 * client / REQUESTS,
                    100 * (idle_after - idle) / (total_after - total),
                    waits.get("Lock:advisory", 0.0),
                    waits.get("Client:ClientRead", 0.0),
                ]
            )
            print(f"  burst {rnd + 1}: {rate:.1f} approvals/s, load {os.getloadavg()[0]:.1f}")
    finally:
        ours.stop()
    rows.append(["median", *(statistics.median(float(r[k]) for r in rows) for k in range(1, 8))])
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.shape approvals`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"{ours.processes} {ours.server} web processes (the production shape), 4 "
            f"`run_worker`s stopped while approvals are timed; {CLIENTS} clients, "
            f"{REQUESTS} API approvals a burst (`POST /api/threads/<id>/resume`, no wait, "
            f"each on a paused thread of its own), {BURSTS} bursts after a warm-up. Server "
            "CPU = the web processes' tree's user + system time / approvals; PostgreSQL's, "
            "its backends' on the bench's database; the client's, this benchmark's process "
            "(its asyncio httpx client, and the sampler below); idle, the share of both "
            "cores' time that nothing ran. Together they are where the machine's two cores "
            "went. Waiting: the "
            "mean number of the database's client backends seen waiting on each thing, "
            "sampled every 10 ms through the burst (`pg_stat_activity`): for the chains' "
            "lock (`Lock:advisory`), or idle for their client's next statement "
            "(`Client:ClientRead`: a connection between requests, or a transaction whose "
            "Python is building its next statement).",
            table(
                [
                    "burst",
                    "approvals/s",
                    "server CPU ms/approval",
                    "PostgreSQL CPU ms/approval",
                    "client CPU ms/approval",
                    "machine idle %",
                    "waiting for the chains' lock",
                    "waiting for their client",
                ],
                rows,
            ),
        ]
    )
    print(body)
    write_section("e2e-shape-approvals", "Approvals through the production shape", body)


@contextmanager
def _waits_sampled(backend: list[int] | None = None) -> Iterator[dict[str, float]]:
    """Yield a dict that, once the block ends, holds the mean number of the bench
    database's client backends waiting on each wait event (type:event), sampled every
    10 ms in a thread of its own (whose backend's pid goes into ``backend``)."""
    import psycopg

    found: dict[str, float] = {}
    counts: dict[str, int] = {}
    samples = 0
    stop = threading.Event()
    query = (
        "SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend' AND wait_event IS NOT NULL"
    )

    def sample() -> None:
        nonlocal samples
        with psycopg.connect(e2e.OURS_DB, autocommit=True) as conn:
            if backend is not None:
                backend.append(conn.info.backend_pid)
            while not stop.is_set():
                for (event,) in conn.execute(query).fetchall():
                    counts[event] = counts.get(event, 0) + 1
                samples += 1
                time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield found
    finally:
        stop.set()
        sampler.join()
        found.update({event: n / max(samples, 1) for event, n in counts.items()})


# --- one approval under py-spy ------------------------------------------------------------


def profile_approval() -> None:
    """py-spy (400 Hz, the thread holding the GIL) on one web process of the production
    shape's server while it takes a burst of API approvals, the workers stopped: the
    shares of its samples by phase, and the functions most often on top of the stack."""
    spy = Path(sys.executable).parent / "py-spy"
    load = os.getloadavg()
    tokens = e2e._prepare()
    ours = e2e.Ours(2, tokens, processes=1)
    raw = e2e.LOGS / "profile-approval.txt"
    try:
        paused = _paused_threads(ours, REQUESTS + 20)
        _burst_approve(ours, paused[:20])  # warm-up
        pid = ours.web.pid if ours.server == "daphne" else _only_child(ours.web.pid)
        record = [str(spy), "record", "--pid", str(pid), "--rate", "400", "--format", "raw"]
        record += ["--gil"]  # the thread holding the GIL: where the process's CPU goes
        with subprocess.Popen(
            [*record, "--nonblocking", "-o", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ) as spying:
            time.sleep(1)
            rate, cpu = _burst_approve(ours, paused[20:])
            spying.send_signal(signal.SIGINT)
            spying.wait(timeout=60)
    finally:
        ours.stop()
    phases = e2e._phases(raw, e2e.WEB_PHASES)
    tops = _top_frames(raw)
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.shape profile`.",
            f"Machine: {machine()}; {load_note(load)}.",
            f"One {ours.server} web process (the production shape's server, one process so "
            f"that one profile holds every request), 2 workers stopped; {REQUESTS} API "
            f"approvals (`POST /api/threads/<id>/resume`, no wait) from {CLIENTS} clients: "
            f"{rate:.1f} approvals/s, {cpu:.2f} ms of server CPU each. py-spy at 400 Hz with "
            "`--gil`: only the thread holding the GIL is sampled, so the shares are of the "
            "process's Python CPU, and waits on PostgreSQL and Redis are left out.",
            table(["phase (first match in the stack)", "% of samples"], phases),
            table(["function on top of the stack", "% of samples"], tops),
        ]
    )
    print(body)
    write_section("e2e-profile-approval", "Where one API approval goes (py-spy)", body)


def _only_child(pid: int) -> int:
    """The one worker process a server's supervisor started."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                return int(entry.name)
    return pid


def _top_frames(raw: Path, n: int = 12) -> list[list[object]]:
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, k = line.rpartition(" ")
        if not stack or not k.isdigit():
            continue
        if stack.rsplit(";", 1)[-1].startswith("_worker (concurrent/futures/thread.py"):
            continue
        total += int(k)
        leaf = stack.rsplit(";", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + int(k)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [[f"`{name}`", 100 * c / total] for name, c in ranked]


if __name__ == "__main__":
    if sys.argv[1:] == ["servers"]:
        servers()
    elif sys.argv[1:] == ["loops"]:
        loops()
    elif sys.argv[1:] == ["approvals"]:
        approvals()
    elif sys.argv[1:] == ["profile"]:
        profile_approval()
    else:
        sys.exit("usage: python -m bench.shape servers|loops|approvals|profile")
