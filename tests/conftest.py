"""Personas and shared fixtures. Data comes from factories in tests/factories.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import ROOT, database_env
from tests.testagents import AGENTS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


# --- pytest-xdist: each worker a database and a channel prefix of its own ------------------
def _xdist_worker(config: pytest.Config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "")


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist every worker talks over its own channel prefix (derived, like the
    settings' own, from its test database's name), or over Redis one worker's live servers
    would hear another's events. Set before any channel layer is built; the servers and
    workers a test starts inherit it through tests.processes.database_env()."""
    from django.conf import settings

    worker = _xdist_worker(config)
    if not worker or not settings.configured:
        return
    from portal.settings import default_channel_prefix

    given = os.environ.get("PORTAL_CHANNEL_PREFIX", "").strip()
    suffix = f"{os.environ.get('TEST_DB_SUFFIX', '')}_{worker}"
    if given:
        prefix = f"{given}{worker}."
    else:
        prefix = default_channel_prefix(settings.DATABASES["default"], test_suffix=suffix)
    settings.PORTAL_CHANNEL_PREFIX = prefix
    for layer in settings.CHANNEL_LAYERS.values():
        if "prefix" in layer.get("CONFIG", {}):
            layer["CONFIG"]["prefix"] = prefix
    # The API's request counts live in the cache: on Redis, token 1 of one worker's
    # database would spend token 1's allowance of another's.
    for cache in settings.CACHES.values():
        if "KEY_PREFIX" in cache:
            cache["KEY_PREFIX"] = f"{cache['KEY_PREFIX']}-{prefix.rstrip('.')}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, django_db_keepdb):
    """pytest-django's, and before it drops the test database: PostgreSQL refuses to drop
    one that a session still uses, and pytest-django then only warns, leaving it behind.
    A server or worker the tests stopped may still have sessions on their way out: they
    go within milliseconds of their process. What stays is idle sessions that other
    threads of this process opened (a test's threads, the async executors), which nobody
    will close: they are ended after a second rather than waited on."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql" or django_db_keepdb:  # --reuse-db keeps it
        return
    name = connection.settings_dict["NAME"]
    others = "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
    with django_db_blocker.unblock():
        connection.close()
        connection.close_pool()  # this process's own idle sessions
        with connection._nodb_cursor() as cursor:
            deadline = time.monotonic() + 1
            while True:
                cursor.execute(f"SELECT count(*) {others}", [name])
                if cursor.fetchone()[0] == 0:
                    break
                if time.monotonic() > deadline:  # the test database is this run's own
                    cursor.execute(f"SELECT pg_terminate_backend(pid) {others}", [name])
                    break
                time.sleep(0.1)


@pytest.fixture(scope="session", autouse=True)
def _empty_tables_by_delete_on_postgresql() -> Iterator[None]:
    """After each transactional test Django empties every table with one TRUNCATE, which
    on PostgreSQL gives each table and index a new file, whatever the tables hold: a
    large share of a short test's time. DELETE of the few rows a test leaves costs next to
    nothing. The decisions' triggers refuse DELETE, so the flush skips triggers
    (``session_replication_role``, for superusers only, as the test runner connects);
    without a superuser, TRUNCATE as before."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or not _is_superuser(self.connection):
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        # execute_sql_flush runs these in one transaction: SET LOCAL ends with it. The
        # lock is TRUNCATE's own, taken on every table at once: a live server's worker
        # that writes meanwhile waits for the flush rather than writing between the
        # DELETEs (a step of a thread already deleted, which no check would refuse here).
        quoted = [self.quote_name(table) for table in tables]
        return [
            "SET LOCAL session_replication_role = replica",
            f"LOCK TABLE {', '.join(quoted)} IN ACCESS EXCLUSIVE MODE",
            *(f"DELETE FROM {table}" for table in quoted),
        ]

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = truncate


@pytest.fixture
def fresh_tables(db) -> None:
    """The requests', checkpoints' and decisions' tables as a new database has them, for a
    test that reads a query plan. The planner weighs the tables' pages and statistics,
    and earlier tests leave theirs behind: rows the flush above deleted or a transaction
    rolled back, an ANALYZE. Truncated within the test's own transaction, so the
    truncation ends with it. PostgreSQL only."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE portal_interrupt, portal_checkpoint, portal_decision CASCADE")


def _is_superuser(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        return bool(cursor.fetchone()[0])


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix(request: pytest.FixtureRequest) -> None:
    """pytest-django's own, but the SQLite file keeps its extension: .test-db_gw0.sqlite3
    (PostgreSQL: test_portal_gw0). TEST_DB_SUFFIX comes before the worker's id."""
    from django.conf import settings

    worker = _xdist_worker(request.config)
    if not worker:
        return
    for db in settings.DATABASES.values():
        name = db.get("TEST", {}).get("NAME")
        if not name or name == ":memory:":
            continue
        if db["ENGINE"] == "django.db.backends.sqlite3":
            path = Path(name)
            db["TEST"]["NAME"] = str(path.with_name(f"{path.stem}_{worker}{path.suffix}"))
        else:
            db["TEST"]["NAME"] = f"{name}_{worker}"


@pytest.fixture(autouse=True)
def _stop_listening():
    """A test that waited leaves no LISTEN connection behind: it would keep the test
    database from being dropped."""
    yield
    from django.conf import settings

    if settings.configured:
        from portal.models import waiting

        waiting.stop()


@pytest.fixture
def roles(db):
    from portal.accounts.groups import ensure_roles

    return {g.name: g for g in ensure_roles()}


def _user(username, group=None, **extra):
    from tests.factories import make_user

    user = make_user(username, **extra)
    if group is not None:
        user.groups.add(group)
    return user


@pytest.fixture
def support_agent(roles):
    return _user("sam-support", roles["support"])


@pytest.fixture
def other_support_agent(roles):
    return _user("olga-support", roles["support"])


@pytest.fixture
def reviewer(roles):
    return _user("rita-reviewer", roles["reviewer"])


@pytest.fixture
def second_reviewer(roles):
    return _user("rob-reviewer", roles["reviewer"])


@pytest.fixture
def auditor(roles):
    return _user("abe-auditor", roles["auditor"])


@pytest.fixture
def outsider(roles):
    return _user("otto-outsider")


@pytest.fixture
def admin_user(roles):
    return _user("ada-admin", is_staff=True, is_superuser=True)


# --- browser tests: Debian's Chromium through Playwright ---------------------------------
@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


def pytest_collection_modifyitems(config, items):
    # PostgreSQL-only tests run in CI's second pass; on SQLite they are skipped, saying why.
    from django.conf import settings

    if not settings.configured:  # run with -p no:django, as tests/agents can be
        return
    if not settings.USING_POSTGRES:
        skip = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://...")
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip)


# --- the portal's rooms: test agents, side-effect files, processes on the test database ---
@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    # The personas are created with passwords; PBKDF2 costs ~0.3 s a user on this
    # machine, which dominated these tests. Tests never need a strong hash.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where test agents record their side effects (also for in-process runs)."""
    path = tmp_path / "effects"
    path.mkdir()
    monkeypatch.setenv("PORTAL_TEST_EFFECTS", str(path))
    return path


@pytest.fixture
def test_agents(settings) -> dict[str, str]:
    settings.PORTAL_AGENTS = {**settings.PORTAL_AGENTS, **AGENTS}
    settings.PORTAL_MODEL = "scripted"
    return AGENTS


@pytest.fixture
def worker_env(effects: Path, transactional_db) -> dict[str, str]:
    """The environment of a worker process on the test database."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SQLITE_PATH")}
    env.update(database_env())
    env.update(
        {
            "PORTAL_AGENTS_EXTRA": json.dumps(AGENTS),
            "PORTAL_TEST_EFFECTS": str(effects),
            "PORTAL_MODEL": "scripted",
            # The tests' webhook receivers listen on loopback.
            "PORTAL_ALLOW_PRIVATE_TARGETS": "1",
            "PORTAL_NO_WORKER": "1",
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


@pytest.fixture
def spawn(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``manage.py <args>`` in a new process; every one is stopped after the test."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, **env: str) -> subprocess.Popen:
        log = (tmp_path / f"proc-{len(procs)}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**worker_env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def application():
    """The portal's ASGI application, for websocket tests. The embedded worker must not
    start inside the test process (importing portal.asgi would start it); the variable is
    put back so later tests' subprocesses don't see it."""
    saved = os.environ.get("PORTAL_NO_WORKER")
    os.environ["PORTAL_NO_WORKER"] = "1"
    try:
        from portal.asgi import application

        yield application
    finally:
        if saved is None:
            os.environ.pop("PORTAL_NO_WORKER", None)
        else:
            os.environ["PORTAL_NO_WORKER"] = saved


@pytest.fixture
def retyped() -> Iterator[Callable[[Any, str], None]]:
    """``retype(model, field)`` widens the field's column by one character, as a migration
    would under running processes (a prepared statement that returns it no longer fits);
    put back after, with a new pool (the old one's connections hold plans of the widened
    column)."""
    import psycopg
    from django.db import connection

    from portal.models.db import connect_kwargs

    done: list[tuple[str, str, int]] = []

    def alter(table: str, column: str, width: int) -> None:
        # On a connection of its own, as a migration runs: psycopg forgets the statements
        # it prepared on a connection that runs an ALTER itself.
        with psycopg.connect(**connect_kwargs(), autocommit=True) as other:
            other.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE varchar({width})')

    def retype(model: Any, name: str) -> None:
        field = model._meta.get_field(name)
        table, column, width = model._meta.db_table, field.column, field.max_length
        alter(table, column, width + 1)
        done.append((table, column, width))

    yield retype
    for table, column, width in done:
        alter(table, column, width)
    connection.close()
    connection.close_pool()
