"""Two checkouts of the portal side by side in one run, for the change between them.

``python -m bench.ab BEFORE [AFTER]``: each side is a git revision (checked out into a
work tree of its own for the run) or a directory holding a checkout; AFTER defaults to
this work tree. Both sides run at once as ``bench.e2e`` runs ours (the production shape,
4 ``run_worker`` processes, the scripted model or, with ``BENCH_E2E_MODEL=openai``, a
model over HTTP), each on a PostgreSQL database of its own (they share Redis and its
channel prefix, where their threads' groups are named apart by the threads' ids). Short
batches take turns, in the order A B B A, so that a machine whose speed drifts within
minutes (these small machines do) slows both sides alike; halfway, both are stopped and
started again in the other order, since the side started second was seen to run cheaper.

Each round: one client's cycles (start -> paused, resume -> done: ``bench.e2e``'s
cycle), then 20 clients' cycles, timed for cycles per second and for the CPU they cost:
the web processes, the workers, and the side's own PostgreSQL backends (its database's,
read from ``pg_stat_activity``; a backend that closes during a batch takes its CPU with
it). Errors (a cycle that failed) are counted, not hidden. Logs go to
``artifacts/bench/e2e/ab/A`` and ``.../B``. The section "A/B of two checkouts" of
docs/benchmarks.md is replaced by the last run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import e2e
from bench.report import load_note, machine, percentile, table, write_section
from bench.servers import backends_cpu_between

WORKERS = 4
ROUNDS = int(os.environ.get("BENCH_AB_ROUNDS", "12"))  # both halves together
ONE = int(os.environ.get("BENCH_AB_CYCLES_ONE", "15"))
MANY = int(os.environ.get("BENCH_AB_CYCLES_MANY", "100"))


@dataclass
class Side:
    label: str
    checkout: e2e.Checkout
    revision: str
    paused: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    cycles: int = 0
    errors: int = 0
    cpu: dict[str, float] = field(
        default_factory=lambda: {"web": 0.0, "workers": 0.0, "PostgreSQL": 0.0}
    )


@contextlib.contextmanager
def _checked_out(spec: str) -> Iterator[Path]:
    """``spec``'s work tree: the directory itself, or the revision checked out for now."""
    if Path(spec).is_dir():
        yield Path(spec).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(e2e.ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), spec], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def _revision(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return out.stdout.strip() + (" (and uncommitted changes)" if dirty else "")


def _round(sides: list[Side], servers: dict[str, e2e.Ours], order: list[Side]) -> None:
    for side in order:
        batch = e2e.run_batch(servers[side.label], WORKERS, 1, ONE)
        side.paused += batch.paused
        side.done += batch.done
        side.errors += len(batch.errors)
    for side in order:
        ours = servers[side.label]
        web, workers, pg = e2e.side_cpu(ours)
        batch = e2e.run_batch(ours, WORKERS, e2e.MANY, MANY)
        web2, workers2, pg2 = e2e.side_cpu(ours)
        side.rates.append(batch.cycles_per_second)
        side.cycles += len(batch.done)
        side.errors += len(batch.errors)
        side.cpu["web"] += web2 - web
        side.cpu["workers"] += workers2 - workers
        side.cpu["PostgreSQL"] += backends_cpu_between(pg, pg2)


def _half(sides: list[Side], tokens: dict[str, dict[str, str]], rounds: int) -> None:
    servers: dict[str, e2e.Ours] = {}
    try:
        for side in sides:
            ours = e2e.Ours(WORKERS, tokens[side.label], checkout=side.checkout)
            ours.name = f"ours {side.label}"
            servers[side.label] = ours
        for side in sides:  # warm-up, not counted
            e2e.run_batch(servers[side.label], WORKERS, 1, 3)
            e2e.run_batch(servers[side.label], WORKERS, e2e.MANY, 40)
        for rnd in range(rounds):
            _round(sides, servers, sides if rnd % 2 == 0 else sides[::-1])
    finally:
        for ours in servers.values():
            ours.stop()


def _side(label: str, tree: Path) -> Side:
    db = f"{e2e.PG}/bench_ab_{label.lower()}{e2e.DB_SUFFIX}"
    logs = e2e.LOGS / "ab" / label  # the side's work tree may be a temporary one
    return Side(label, e2e.Checkout(tree, db, logs), _revision(tree))


def _figures(side: Side) -> list[object]:
    ms = 1000
    per_cycle = {k: v / side.cycles * ms for k, v in side.cpu.items()} if side.cycles else {}
    return [
        f"{side.label}: `{side.revision}`",
        percentile(side.paused, 50) * ms,
        percentile(side.paused, 95) * ms,
        percentile(side.done, 50) * ms,
        percentile(side.done, 95) * ms,
        statistics.median(side.rates) if side.rates else float("nan"),
        per_cycle.get("web", float("nan")),
        per_cycle.get("workers", float("nan")),
        per_cycle.get("PostgreSQL", float("nan")),
        sum(per_cycle.values()) if per_cycle else float("nan"),
        side.errors,
    ]


def main() -> None:
    if not 1 <= len(sys.argv[1:]) <= 2:
        sys.exit("usage: python -m bench.ab BEFORE [AFTER] (git revisions or directories)")
    if ROUNDS < 2 or ROUNDS % 2:
        sys.exit("BENCH_AB_ROUNDS must be even: the two halves take as many rounds each")
    before, after = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(e2e.ROOT)
    load = os.getloadavg()
    with _checked_out(before) as tree_a, _checked_out(after) as tree_b:
        sides = [_side("A", tree_a), _side("B", tree_b)]
        tokens = {side.label: e2e.prepare_checkout(side.checkout) for side in sides}
        _half(sides, tokens, ROUNDS // 2)
        _half(sides[::-1], tokens, ROUNDS // 2)
    a, b = (_figures(side) for side in sides)
    ratio = [
        "B / A",
        *(
            y / x if isinstance(x, float) and x else float("nan")
            for x, y in zip(a[1:-1], b[1:-1], strict=True)
        ),
        "",  # errors: counted, not compared
    ]
    headers = [
        "side",
        "one client start->paused p50 ms",
        "p95 ms",
        "resume->done p50 ms",
        "p95 ms",
        f"{e2e.MANY} clients cycles/s (median of batches)",
        "CPU ms/cycle: web",
        "workers",
        "PostgreSQL",
        "sum",
        "errors",
    ]
    body = "\n\n".join(
        [
            f"Command: `{e2e.command('bench.ab')} {before}"
            + (f" {sys.argv[2]}`." if len(sys.argv) > 2 else "` (B: the work tree)."),
            f"Machine: {machine()}; {load_note(load)}.",
            f"Both checkouts served at once in the production shape, {WORKERS} workers each, "
            f"on databases of their own; {ROUNDS} rounds in two halves (restarted in the other "
            f"order halfway), each round {ONE} one-client cycles per side, then {MANY} "
            f"cycles from {e2e.MANY} clients per side, the sides taking turns A B B A. "
            f"{len(sides[0].paused)} one-client cycles and {sides[0].cycles} "
            f"{e2e.MANY}-client cycles per side. The agent's model: {e2e.model_words()[0]}. "
            "CPU: the web processes' tree, the workers, and the backends of the side's own "
            "database, over the 20-client batches.",
            table(headers, [a, b, ratio]),
        ]
    )
    print(body)
    write_section("ab", "A/B of two checkouts, side by side in one run", body)


if __name__ == "__main__":
    main()
