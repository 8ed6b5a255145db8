"""The decision history over 1,000,000 decisions on PostgreSQL.

Two sections of docs/benchmarks.md:

- "History" (part ``pages``): the history page's server time (Django's test ``Client`` in
  process, an auditor logged in, ``BENCH_HISTORY_REQUESTS`` requests over random filters
  and keyset pages, each timed from request to rendered response), p50/p95/p99 overall
  and per kind of filter; and the metrics page's server time for a month and a year.
- "History: export memory" (part ``exports``): the peak Python memory (``tracemalloc``)
  while consuming the streamed CSV and JSON Lines exports of the whole table, beside a
  3-day export for comparison.

Data is generated in SQL (``generate_decisions``: ``generate_series`` on PostgreSQL, a
recursive CTE on SQLite, used by the tests too): threads, resolved interrupts with
tool-approval payloads, and one decision each, spread over a year, four agents, twenty
reviewers and every outcome. The generated rows are not sealed (their hashes are filler),
so ``verify_audit`` is not meaningful on this database.

Run (PostgreSQL at ``BENCH_HISTORY_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/portal_bench_history``, a database of its own that the
benchmark creates and migrates; ``DATABASE_URL`` is not used):

    .venv-bench/bin/python -m bench.history

``BENCH_HISTORY_N`` (default 1,000,000) sets the number of decisions (the tables are
regenerated only when the count differs); ``BENCH_HISTORY_PARTS=pages`` or ``exports``
runs one part.
"""

from __future__ import annotations

import os
import random
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.report import ensure_database, machine, percentile, table, write_section

DB_URL = os.environ.get(
    "BENCH_HISTORY_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_history"
)
N = int(os.environ.get("BENCH_HISTORY_N", "1000000"))
REQUESTS = int(os.environ.get("BENCH_HISTORY_REQUESTS", "400"))
REVIEWERS = 20
AGENTS = ["refunds", "transfers", "accounts", "contact"]
TOOLS = ["issue_refund", "transfer_funds", "delete_account", "send_message", "lookup_order"]
REASONS = ["tool_approval", "tool_approval", "tool_approval", "breakpoint", "input_required"]
WORDS = ["broken", "duplicate", "urgent", "vip", "chargeback", "gift", "late", "damaged"]
SPAN_SECONDS = 365 * 24 * 3600
START = datetime(2025, 11, 1, tzinfo=UTC)

# --- data ---------------------------------------------------------------------------------

# Everything derives from the row number i (0-based), so both databases produce the same
# rows: agent i % 4, reason by i % 5, tool by i % 5, reviewer i % 20 (system for
# expiries), outcome by i % 10, asked at START + i * span / n, decided 5 s to ~28 h later.
_PG = """
INSERT INTO portal_thread (id, agent, status, title, created_at, updated_at, last_seq)
SELECT lpad(to_hex(i), 32, '0')::uuid, (%(agents)s::text[])[1 + i %% 4], 'done',
       'bench thread ' || i, %(start)s::timestamptz + (i * %(step)s) * interval '1 second',
       %(start)s::timestamptz + (i * %(step)s) * interval '1 second', 3
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS i;

INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message, reason,
    response_schema, tool_call_id, status, created_at, expires_at, resolved_at,
    checkpoint_seq, claimed_by_id, claimed_at, decided)
SELECT 'bench_' || i, lpad(to_hex(i), 32, '0')::uuid, (%(agents)s::text[])[1 + i %% 4],
       'TOOL:-:0', 'TOOL',
       jsonb_build_object('tool_calls', jsonb_build_array(jsonb_build_object(
           'id', 'call_' || i, 'name', (%(tools)s::text[])[1 + i %% 5],
           'arguments', jsonb_build_object('order_id', 'A-' || i, 'amount', (i %% 997) + 0.5))),
         'parameters', jsonb_build_object()),
       'Approve ' || (%(tools)s::text[])[1 + i %% 5] || ' for order A-' || i || ', customer says '
         || (%(words)s::text[])[1 + (i / 7) %% 8] || '?',
       (%(reasons)s::text[])[1 + i %% 5],
       '{"type": "object", "properties": {"approved": {"type": "boolean"}}}'::jsonb,
       NULL, 'resolved',
       %(start)s::timestamptz + (i * %(step)s) * interval '1 second', NULL,
       %(start)s::timestamptz
         + (i * %(step)s + 5 + (i::bigint * 7919) %% 100000) * interval '1 second',
       2, NULL, NULL, true
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS i;

INSERT INTO portal_decision (interrupt_id, thread_id, reviewer_id, value, note, outcome,
    original_args, executed_args, created_at, payload_hash, prev_hash, hash)
SELECT 'bench_' || i, lpad(to_hex(i), 32, '0')::uuid,
       CASE WHEN i %% 10 = 8 THEN NULL ELSE (%(reviewers)s::bigint[])[1 + i %% 20] END,
       CASE WHEN i %% 10 = 9 THEN NULL
            ELSE jsonb_build_object('approved', i %% 10 < 5 OR i %% 10 = 7) END,
       '', (%(outcomes)s::text[])[1 + i %% 10], NULL, NULL,
       %(start)s::timestamptz
         + (i * %(step)s + 5 + (i::bigint * 7919) %% 100000) * interval '1 second',
       md5('p' || i) || md5('q' || i), md5('r' || i) || md5('s' || i),
       md5('t' || i) || md5('u' || i)
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS i;
"""

_SQLITE_SEQ = "WITH RECURSIVE seq(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM seq WHERE i < ? - 1) "

_SQLITE = [
    """INSERT INTO portal_thread (id, agent, status, title, created_at, updated_at, last_seq) """
    + _SQLITE_SEQ
    + """SELECT printf('%032x', i), json_extract(?, '$[' || (i % 4) || ']'), 'done',
       'bench thread ' || i, datetime(?, '+' || (i * ?) || ' seconds'),
       datetime(?, '+' || (i * ?) || ' seconds'), 3 FROM seq""",
    """INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message, reason,
       response_schema, tool_call_id, status, created_at, expires_at, resolved_at,
       checkpoint_seq, claimed_by_id, claimed_at, decided) """
    + _SQLITE_SEQ
    + """SELECT 'bench_' || i, printf('%032x', i), json_extract(?, '$[' || (i % 4) || ']'),
       'TOOL:-:0', 'TOOL',
       json_object('tool_calls', json_array(json_object('id', 'call_' || i,
           'name', json_extract(?, '$[' || (i % 5) || ']'),
           'arguments', json_object('order_id', 'A-' || i, 'amount', (i % 997) + 0.5))),
         'parameters', json_object()),
       'Approve ' || json_extract(?, '$[' || (i % 5) || ']') || ' for order A-' || i
         || ', customer says ' || json_extract(?, '$[' || ((i / 7) % 8) || ']') || '?',
       json_extract(?, '$[' || (i % 5) || ']'),
       '{"type": "object", "properties": {"approved": {"type": "boolean"}}}', NULL,
       'resolved', datetime(?, '+' || (i * ?) || ' seconds'), NULL,
       datetime(?, '+' || (i * ? + 5 + (i * 7919) % 100000) || ' seconds'), 2, NULL, NULL, 1
       FROM seq""",
    """INSERT INTO portal_decision (interrupt_id, thread_id, reviewer_id, value, note, outcome,
       original_args, executed_args, created_at, payload_hash, prev_hash, hash) """
    + _SQLITE_SEQ
    + """SELECT 'bench_' || i, printf('%032x', i),
       CASE WHEN i % 10 = 8 THEN NULL ELSE json_extract(?, '$[' || (i % 20) || ']') END,
       CASE WHEN i % 10 = 9 THEN NULL
            ELSE json_object('approved', json(CASE WHEN i % 10 < 5 OR i % 10 = 7
                                                   THEN 'true' ELSE 'false' END)) END,
       '', json_extract(?, '$[' || (i % 10) || ']'), NULL, NULL,
       datetime(?, '+' || (i * ? + 5 + (i * 7919) % 100000) || ' seconds'),
       printf('%064x', i), printf('%064x', i), printf('%064x', i) FROM seq""",
]

# Outcome by i % 10: five approvals... of which 7 is "edited"; 8 expired (no reviewer),
# 9 cancelled (value NULL).
OUTCOMES = [
    "approved",
    "approved",
    "approved",
    "approved",
    "approved",
    "rejected",
    "rejected",
    "edited",
    "expired",
    "cancelled",
]


def generate_decisions(
    n: int,
    *,
    reviewer_ids: list[int],
    first: int = 0,
    start: datetime = START,
    span: int = SPAN_SECONDS,
) -> None:
    """Insert ``n`` threads, interrupts and decisions (rows ``first`` .. ``first + n - 1``)
    in a handful of SQL statements on the default connection. ``reviewer_ids`` must hold
    20 user ids."""
    import json

    from django.db import connection

    if len(reviewer_ids) != REVIEWERS:
        raise ValueError(f"need {REVIEWERS} reviewer ids, got {len(reviewer_ids)}")
    step = span / max(n, 1)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            params = {
                "n": n,
                "first": first,
                "step": step,
                "start": start,
                "agents": AGENTS,
                "tools": TOOLS,
                "words": WORDS,
                "reasons": REASONS,
                "outcomes": OUTCOMES,
                "reviewers": reviewer_ids,
            }
            for statement in _PG.split(";\n\n"):
                cursor.execute(statement, params)
            return
        stamp = start.strftime("%Y-%m-%d %H:%M:%S")
        agents, tools, words = json.dumps(AGENTS), json.dumps(TOOLS), json.dumps(WORDS)
        reasons, outcomes = json.dumps(REASONS), json.dumps(OUTCOMES)
        rows = [first, first + n]
        cursor.execute(_SQLITE[0], [*rows, agents, stamp, step, stamp, step])
        cursor.execute(
            _SQLITE[1], [*rows, agents, tools, tools, words, reasons, stamp, step, stamp, step]
        )
        cursor.execute(_SQLITE[2], [*rows, json.dumps(reviewer_ids), outcomes, stamp, step])


# --- measuring ------------------------------------------------------------------------------


def export_peak(client: Any, url: str) -> tuple[int, int, int, float]:
    """(peak traced bytes, rows, bytes streamed, seconds) while consuming a streamed export."""
    import gc

    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    began = time.perf_counter()
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    assert response.streaming
    rows = size = 0
    for chunk in response.streaming_content:
        size += len(chunk)
        rows += 1
    elapsed = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # The test client closed the response when the stream ended (closing it again here
    # would fire request_finished and close the database connection).
    return peak, rows, size, elapsed


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


def _ensure_data() -> tuple[Any, float | None]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from portal.accounts.groups import ensure_roles
    from portal.models import Decision

    groups = {g.name: g for g in ensure_roles()}
    user_model = get_user_model()
    reviewers = []
    for k in range(REVIEWERS):
        user, _ = user_model.objects.get_or_create(username=f"bench-reviewer-{k:02d}")
        user.groups.add(groups["reviewer"])
        reviewers.append(user.pk)
    auditor, _ = user_model.objects.get_or_create(username="bench-auditor")
    auditor.groups.add(groups["auditor"])
    seconds = None
    if Decision.objects.count() != N:
        print(f"generating {N:,} decisions ...", flush=True)
        began = time.perf_counter()
        with connection.cursor() as cursor:
            # TRUNCATE is not refused by the append-only trigger (it guards UPDATE/DELETE).
            cursor.execute(
                "TRUNCATE portal_decision, portal_run, portal_checkpoint, portal_interrupt, "
                "portal_thread CASCADE"
            )
        generate_decisions(N, reviewer_ids=reviewers)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE portal_thread")
            cursor.execute("VACUUM ANALYZE portal_interrupt")
            cursor.execute("VACUUM ANALYZE portal_decision")
        seconds = time.perf_counter() - began
        print(f"generated in {seconds:.1f}s", flush=True)
    else:
        # Kept data, perhaps from before a migration added statistics or indexes: as
        # autovacuum would in a database in use, bring the planner's statistics up to date.
        with connection.cursor() as cursor:
            for table in ("portal_thread", "portal_interrupt", "portal_decision"):
                cursor.execute(f"ANALYZE {table}")
    return auditor, seconds


def _random_filters(rng: random.Random) -> tuple[str, dict[str, str]]:
    day = START.date() + timedelta(days=rng.randrange(0, 330))
    options: list[tuple[str, dict[str, str]]] = [
        ("none", {}),
        ("agent", {"agent": rng.choice(AGENTS)}),
        ("reviewer", {"reviewer": f"bench-reviewer-{rng.randrange(REVIEWERS):02d}"}),
        ("outcome", {"outcome": rng.choice(sorted(set(OUTCOMES)))}),
        ("reason", {"reason": rng.choice(REASONS)}),
        ("tool", {"tool": rng.choice(TOOLS)}),
        ("search", {"q": rng.choice(WORDS)}),
        (
            "date range",
            {"date_from": day.isoformat(), "date_to": (day + timedelta(days=7)).isoformat()},
        ),
        (
            "combined",
            {
                "agent": rng.choice(AGENTS),
                "outcome": rng.choice(["approved", "rejected"]),
                "q": rng.choice(WORDS),
                "date_from": day.isoformat(),
                "date_to": (day + timedelta(days=30)).isoformat(),
            },
        ),
    ]
    return rng.choice(options)


def _page_times(client: Any) -> dict[str, list[float]]:
    from urllib.parse import urlencode

    from portal.models.paging import Cursor

    rng = random.Random(7)
    times: dict[str, list[float]] = {}
    for _ in range(5):  # warm-up
        client.get("/history/")
    for _ in range(REQUESTS):
        kind, params = _random_filters(rng)
        depth = rng.choice(["first", "first", "next", "deep"])
        if depth == "deep":
            # A page far down the list: the cursor of a random moment in the year.
            moment = START + timedelta(seconds=rng.randrange(SPAN_SECONDS))
            params = {**params, "after": Cursor(moment, 10**9).encode()}
        began = time.perf_counter()
        response = client.get("/history/?" + urlencode(params))
        if depth == "next" and response.context["page"].next_cursor:
            cursor = response.context["page"].next_cursor.encode()
            began = time.perf_counter()
            response = client.get("/history/?" + urlencode({**params, "after": cursor}))
        elapsed = time.perf_counter() - began
        assert response.status_code == 200, response.status_code
        times.setdefault(kind, []).append(elapsed)
        times.setdefault(f"page: {depth}", []).append(elapsed)
        times.setdefault("all", []).append(elapsed)
    return times


PARTS = os.environ.get("BENCH_HISTORY_PARTS", "pages,exports").split(",")
ORDER = [
    "all",
    "page: first",
    "page: next",
    "page: deep",
    "none",
    "agent",
    "reviewer",
    "outcome",
    "reason",
    "tool",
    "search",
    "date range",
    "combined",
]


def _about(pg_version: str, generated: float | None) -> str:
    return (
        "Command: `.venv-bench/bin/python -m bench.history` (its own database, "
        f"`{DB_URL.rsplit('/', 1)[1]}` on 127.0.0.1, created and migrated by the benchmark; "
        "`BENCH_HISTORY_PARTS=pages` or `=exports` runs one of the two sections).\n\n"
        f"Machine: {machine()}; PostgreSQL {pg_version} on the same machine, default "
        f"configuration. Data: {N:,} decisions generated in SQL (`generate_decisions`), each "
        "with its thread and its resolved interrupt (a tool-approval payload), spread over "
        f"one year, {len(AGENTS)} agents, {REVIEWERS} reviewers and every outcome"
        + (f"; generating took {generated:,.0f} s" if generated else "")
        + "."
    )


def _pages_part(client: Any, about: str) -> None:
    load_before = os.getloadavg()[0]
    times = _page_times(client)
    load_after = os.getloadavg()[0]
    metric_times = []
    for _ in range(10):
        began = time.perf_counter()
        assert client.get("/metrics/?date_from=2026-09-01&date_to=2026-09-30").status_code == 200
        metric_times.append(time.perf_counter() - began)
    year = []
    for _ in range(5):
        began = time.perf_counter()
        assert client.get("/metrics/?date_from=2025-11-01&date_to=2026-10-31").status_code == 200
        year.append(time.perf_counter() - began)
    page_rows = []
    for key in ORDER:
        if key not in times:
            continue
        ms = [t * 1000 for t in times[key]]
        page_rows.append([key, len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99)])
    metric_ms = [t * 1000 for t in metric_times]
    year_ms = [t * 1000 for t in year]
    body = "\n".join(
        [
            about,
            "",
            "The machine is shared with other work: its 1-minute load average was "
            f"{load_before:.1f} when the page timings began and {load_after:.1f} when they "
            "ended (2 cores), so the times include waiting for a core.",
            "",
            f"History page (`/history/`), server time: Django's test client in process, an "
            f"auditor logged in, {REQUESTS} requests with random filters; about half of them "
            "first pages, a quarter the page after (following the page's own cursor), a "
            "quarter a page deep inside the year (a cursor at a random moment). Each time "
            "covers the whole request: middleware, session, queries and template.",
            "",
            table(["requests", "n", "p50 ms", "p95 ms", "p99 ms"], page_rows),
            "",
            "Metrics page (`/metrics/`, four charts): one month (about 83,000 decisions) "
            f"p50 {percentile(metric_ms, 50):,.0f} ms, p95 {percentile(metric_ms, 95):,.0f} ms "
            f"(10 requests); the whole year (all {N:,}) p50 {percentile(year_ms, 50):,.0f} ms, "
            f"max {max(year_ms):,.0f} ms (5 requests).",
        ]
    )
    write_section("history", "History", body)
    print(body)


def _exports_part(client: Any, about: str) -> None:
    small = "?date_from=2026-03-01&date_to=2026-03-04"
    exports = [
        ("CSV, 3 days", f"/history/export.csv{small}"),
        ("CSV, everything", "/history/export.csv"),
        ("JSON Lines, everything", "/history/export.jsonl"),
    ]
    export_rows = []
    # One unmeasured export first, so one-time costs (imports, URL and template caches)
    # are not counted against the first measured one.
    export_peak(client, f"/history/export.jsonl{small}")
    for label, url in exports:
        peak, chunks, size, seconds = export_peak(client, url)
        rows = chunks - 1 if "CSV" in label else chunks
        export_rows.append(
            [
                label,
                f"{rows:,}",
                f"{size / 1e6:,.1f}",
                f"{peak / 1e6:,.2f}",
                f"{seconds:,.1f}",
                f"{rows / seconds:,.0f}",
            ]
        )
        print(label, rows, peak, seconds, flush=True)
    body = "\n".join(
        [
            about,
            "",
            "Exports (`/history/export.csv`, `/history/export.jsonl`), streamed and consumed "
            "in full by Django's test client; peak memory is `tracemalloc`'s peak of Python "
            "allocations during the request. The times include tracing overhead and a "
            "machine shared with other work, so they understate the throughput.",
            "",
            table(["export", "rows", "MB streamed", "peak MB", "seconds", "rows/s"], export_rows),
        ]
    )
    write_section("history-exports", "History: export memory", body)
    print(body)


def main() -> None:
    _setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    # Lets the client capture response.context. DEBUG off, as in production: with it on,
    # Django would also keep every SQL statement in connection.queries.
    setup_test_environment(debug=False)
    auditor, generated = _ensure_data()
    client = Client()
    client.force_login(auditor)
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = cursor.fetchone()[0]
    about = _about(pg_version, generated)
    if "pages" in PARTS:
        _pages_part(client, about)
    if "exports" in PARTS:
        _exports_part(client, about)


if __name__ == "__main__":
    main()
