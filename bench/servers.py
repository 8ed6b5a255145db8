"""The ASGI servers ours can run under, and the production shape: ``SERVER`` with
``web_processes()`` processes (chosen by ``bench.shape servers``; docs/benchmarks.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The server the production shape runs (docs/deployment.md).
SERVER = os.environ.get("BENCH_SERVER", "granian")
# Its event loop, named on the command line as docs/deployment.md names it.
LOOP = "uvloop"


def web_processes() -> int:
    """Web processes for this machine: one per core (``BENCH_WEB_PROCESSES`` overrides)."""
    return int(os.environ.get("BENCH_WEB_PROCESSES") or os.cpu_count() or 1)


def command(server: str, port: int, processes: int = 1, loop: str = LOOP) -> list[str]:
    """The command line serving ``portal.asgi`` under ``server`` with ``processes``
    processes on the event loop ``loop`` (uvloop or asyncio; daphne's is Twisted's, on
    asyncio's own); warnings only, no access log (as the peer's uvicorn runs)."""
    binary = str(Path(sys.executable).parent / server)
    app = "portal.asgi:application"
    if server == "daphne":
        if processes != 1:
            raise ValueError("daphne serves one process; run several behind a proxy")
        return [binary, "-v", "0", "-b", "127.0.0.1", "-p", str(port), app]
    if server == "uvicorn":
        return [
            *(binary, "--host", "127.0.0.1", "--port", str(port), "--workers", str(processes)),
            *("--loop", loop, "--no-access-log", "--log-level", "warning"),
            *("--lifespan", "off", app),
        ]
    if server == "granian":
        # asginl: ASGI without lifespan events (the portal's router has none). The loop is
        # named, as docs/deployment.md names it: granian's default takes uvloop only where
        # it happens to be installed, and asyncio's own loop otherwise.
        return [
            *(binary, "--interface", "asginl", "--loop", loop),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(processes)),
            *("--log-level", "warning", "--no-access-log", app),
        ]
    raise ValueError(f"unknown server {server!r}")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` alone; OSError if it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every live descendant."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += int(stats[p][11]) + int(stats[p][12])
        todo.extend(children.get(p, []))
    return total / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """``cpu_seconds(pid)``, or None when it is gone (or not a process of this machine's)."""
    try:
        return cpu_seconds(pid)
    except OSError:
        return None


def database_cpu_seconds(db: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend connected to database ``db`` (a URL), by
    pid; RuntimeError when the backends are not processes of this machine."""
    import psycopg

    base, name = db.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        ).fetchall()
    backends = {int(r[0]): process_cpu_seconds(int(r[0])) for r in rows}
    read = {pid: cpu for pid, cpu in backends.items() if cpu is not None}
    if backends and not read:
        raise RuntimeError(
            "PostgreSQL's backends are not processes of this machine (a container, or "
            "another host): their CPU cannot be read"
        )
    return read


def backends_cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the backends spent between two ``database_cpu_seconds`` readings: a
    backend opened in between counts whole; one closed in between is lost."""
    return sum(now - before.get(pid, 0.0) for pid, now in after.items())


def machine_idle_seconds() -> tuple[float, float]:
    """The machine's idle and total CPU seconds since boot, all cores (``/proc/stat``)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    tick = os.sysconf("SC_CLK_TCK")
    return fields[3] / tick, sum(fields) / tick
