"""Tests read only what they made: their own databases, rows and channel prefixes.

Counters kept for the whole server (PostgreSQL's statistics views and WAL positions,
Redis's INFO) move with every other database and client on it, so a test that reads one
fails when someone else is busy. A test that must see a write reach the disk, or a
connection close, asks about its own connection instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# pg_stat_activity lists sessions, not counters; a test may read its own database's rows
# there (``WHERE datname = current_database()``) to see its server's connections, and
# pg_stat_clear_snapshot() only makes its own session read them afresh.
SERVER_WIDE = re.compile(
    r"\bpg_stat_(?!activity\b|clear_snapshot\b)\w+"
    r"|\bpg_current_wal_\w+|\bpg_wal_lsn_diff\b|\bpg_stat_get_\w+"
    r"|\.info\(\s*\)|[\"']INFO[\"']|\bdbsize\(",
)


def test_no_test_reads_a_counter_kept_for_the_whole_server():
    found = [
        f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}"
        for path in sorted(ROOT.rglob("*.py"))
        if "vendor" not in path.parts and path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if SERVER_WIDE.search(line)
    ]
    assert found == [], "these read server-wide counters:\n" + "\n".join(found)


def test_the_pattern_catches_what_once_made_a_full_run_flaky():
    assert SERVER_WIDE.search('cursor.execute("SELECT wal_sync FROM pg_stat_wal")')
    assert SERVER_WIDE.search("client.info()")
    assert not SERVER_WIDE.search("conn.info.backend_pid")
    assert not SERVER_WIDE.search("FROM pg_stat_activity WHERE datname = current_database()")
    assert not SERVER_WIDE.search('cursor.execute("SELECT pg_stat_clear_snapshot()")')
    assert SERVER_WIDE.search("SELECT n_dead_tup FROM pg_stat_user_tables")
