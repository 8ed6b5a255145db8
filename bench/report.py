"""Shared helpers: percentiles, machine facts, and rewriting one section of
docs/benchmarks.md without touching the others."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Every table here was written by a benchmark in `bench/` from a real run; each section\n"
    "names the command that produced it. Rerun one and its section is replaced.\n"
)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(seconds: list[float]) -> tuple[float, float, float]:
    """(p50, p95, p99) in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return percentile(ms, 50), percentile(ms, 95), percentile(ms, 99)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        match = re.search(r"Model name:\s*(.+)", out)
        cpu = match.group(1).strip() if match else cpu
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"
    )


def load_note(start: tuple[float, float, float]) -> str:
    """The 1-minute load average at the start and the end: other jobs shared the machine."""
    return (
        f"1-min load average {start[0]:.1f} at the start and {os.getloadavg()[0]:.1f} at the "
        f"end on {os.cpu_count()} cores (a higher load than the core count means the machine "
        "was shared with other jobs, and every figure here is slower and noisier for it)"
    )


def ensure_database(url: str) -> str:
    """Create the PostgreSQL database ``url`` names unless it exists; return its name."""
    import psycopg

    dbname = url.rsplit("/", 1)[1].split("?")[0]
    admin = url.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{dbname}"')
    return dbname


def table(headers: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name: str, title: str, body: str) -> None:
    """Replace (or append) the section `name` of docs/benchmarks.md."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n## {title}\n\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    DOC.write_text(text)
