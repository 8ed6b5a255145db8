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
