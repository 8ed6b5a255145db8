"""Simulating a rule version over 1,000,000 decisions on PostgreSQL (section "Rules:
simulation" of docs/benchmarks.md).

The decisions are generated in SQL by ``bench.history.generate_decisions`` (unsealed: its
hashes are filler), spread over the last four weeks, in a database of its own that the
benchmark creates and migrates (``BENCH_RULES_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/portal_bench_rules``; ``DATABASE_URL`` is not used).
Then ``rule_simulate`` runs ``BENCH_RULES_RUNS`` times (default 5) for two versions: one
that names no agent, reason or tool, so every decision goes through the matcher (the worst
case), and one that names the refunds agent and its tool (pre-filtered in SQL).

    .venv-bench/bin/python -m bench.rules_simulation

``BENCH_RULES_N`` (default 1,000,000) sets the number of decisions.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from bench.report import ensure_database, load_note, machine, percentile, table, write_section

DB_URL = os.environ.get(
    "BENCH_RULES_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_rules"
)
N = int(os.environ.get("BENCH_RULES_N", "1000000"))
RUNS = int(os.environ.get("BENCH_RULES_RUNS", "5"))
SPAN = timedelta(days=28)
DAYS = 30
UNDER_TEN = {"properties": {"arguments": {"properties": {"amount": {"exclusiveMaximum": 10}}}}}


def _setup() -> None:
    ensure_database(DB_URL)
    os.environ.update(
        {
            "DATABASE_URL": DB_URL,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PORTAL_EMBEDDED_WORKER": "0",
            "PORTAL_NO_WORKER": "1",
        }
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def _ensure_data() -> tuple[list[Any], float | None]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connection
    from django.db.models import Max
    from django.utils import timezone

    from bench.history import REVIEWERS, generate_decisions
    from portal.models import Decision

    users = get_user_model().objects
    reviewers = [users.get_or_create(username=f"bench-reviewer-{k:02d}")[0].pk for k in range(20)]
    managers = []
    for name in ("bench-rule-writer", "bench-rule-checker"):
        user = users.get_or_create(username=name)[0]
        user.user_permissions.add(Permission.objects.get(codename="manage_rules"))
        managers.append(users.get(pk=user.pk))
    assert len(reviewers) == REVIEWERS
    newest = Decision.objects.aggregate(at=Max("created_at"))["at"]
    fresh = newest is not None and timezone.now() - newest < timedelta(days=1)
    if Decision.objects.count() == N and fresh:
        return managers, None
    print(f"generating {N:,} decisions ...", flush=True)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        # TRUNCATE is not refused by the append-only trigger (it guards UPDATE/DELETE).
        cursor.execute(
            "TRUNCATE portal_rulesimulation, portal_rulehit, portal_decision, portal_run, "
            "portal_checkpoint, portal_interrupt, portal_thread CASCADE"
        )
    start = timezone.now() - SPAN - timedelta(hours=1)
    generate_decisions(N, reviewer_ids=reviewers, start=start, span=int(SPAN.total_seconds()))
    with connection.cursor() as cursor:
        for name in ("portal_thread", "portal_interrupt", "portal_decision"):
            cursor.execute(f"VACUUM ANALYZE {name}")
    seconds = time.perf_counter() - began
    print(f"generated in {seconds:.1f}s", flush=True)
    return managers, seconds


def _version(writer: Any, name: str, **fields: Any) -> Any:
    from portal.models import Rule
    from portal.reviews.rules import rule_write

    rule = Rule.objects.filter(name=name).first()
    return rule_write(by=writer, rule=rule, name=name, **fields)


def main() -> None:
    _setup()
    from django.db import connection

    from portal.reviews.rule_simulation import rule_simulate

    load_start = os.getloadavg()
    (writer, checker), generated = _ensure_data()
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = cursor.fetchone()[0]
    cases = [
        (
            "no agent, reason or tool named: every decision matched in Python",
            _version(writer, "bench: any amount under 10", conditions=UNDER_TEN, action="approve"),
        ),
        (
            "agent refunds, tool issue_refund: pre-filtered in SQL",
            _version(
                writer,
                "bench: refunds under 10",
                agent="refunds",
                tool="issue_refund",
                conditions=UNDER_TEN,
                action="approve",
            ),
        ),
    ]
    rows = []
    for label, version in cases:
        seconds, result = [], {}
        for _ in range(RUNS):
            simulation = rule_simulate(version, by=checker, days=DAYS)
            seconds.append(simulation.seconds)
            result = simulation.result
            print(f"{label}: {simulation.seconds:.2f}s", flush=True)
        rows.append(
            [
                label,
                f"{result['decisions']:,}",
                f"{result['matched']:,}",
                RUNS,
                percentile(seconds, 50),
                percentile(seconds, 95),
            ]
        )
    body = "\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.rules_simulation` (its own database, "
            f"`{DB_URL.rsplit('/', 1)[1]}` on 127.0.0.1, created and migrated by the benchmark).",
            "",
            f"Machine: {machine()}; PostgreSQL {pg_version} on the same machine, default "
            f"configuration; {load_note(load_start)}. Data: {N:,} decisions generated in SQL "
            "(`bench.history.generate_decisions`) over the last four weeks, four agents, five "
            "tools, every outcome; each request a tool approval with its call's arguments"
            + (f"; generating took {generated:,.0f} s" if generated else "")
            + f". Each run is one `rule_simulate(version, days={DAYS})`, timed by the "
            "simulation itself (`RuleSimulation.seconds`: the query, streaming the rows, "
            "matching, counting, and writing the simulation).",
            "",
            table(["version", "decisions", "matched", "runs", "p50 s", "p95 s"], rows),
            "",
            "Target: at most 60 s over 1M decisions.",
        ]
    )
    write_section("rules-simulation", "Rules: simulation", body)
    print(body)


if __name__ == "__main__":
    main()
