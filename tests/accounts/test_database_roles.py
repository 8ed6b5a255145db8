"""The app connects as a role that can run the portal but cannot remove, change or
unprotect decisions; migrations run as the tables' owner (see ``grant_app_role``)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from portal.models import Decision, Interrupt, Thread
from tests.runs.test_worker_processes import DECIDE_IN_A_NEW_PROCESS, finish
from tests.testagents import read_effects

START_IN_A_NEW_PROCESS = """
from django.contrib.auth import get_user_model
from portal.reviews import threads
user = get_user_model().objects.get(username="sam-support")
thread, run = threads.thread_start(
    agent="approve", input={"messages": [{"role": "user", "content": "pay 42"}]}, user=user
)
print("STARTED", thread.pk)
"""
FORBIDDEN = [
    "TRUNCATE portal_decision",
    "ALTER TABLE portal_decision DISABLE TRIGGER portal_decision_append_only",
    "ALTER TABLE portal_decision DISABLE TRIGGER ALL",
    "DELETE FROM portal_decision",
    "UPDATE portal_decision SET note = 'rewritten'",
    "DROP TRIGGER portal_decision_no_truncate ON portal_decision",
    "TRUNCATE portal_auditevent",
    "ALTER TABLE portal_auditevent DISABLE TRIGGER portal_auditevent_append_only",
    "DELETE FROM portal_auditevent",
    "UPDATE portal_auditevent SET actor_name = 'nobody'",
]
RECORD_AN_EVENT = """
from portal.models import audit_record
print("RECORDED", audit_record(action="login", target=("user", 1)).pk)
"""


def _drop_role(cursor, role: str) -> None:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    if cursor.fetchone():
        cursor.execute(f"DROP OWNED BY {role}")  # its grants in this (test) database
        cursor.execute(f"DROP ROLE {role}")


@pytest.fixture
def app_url(transactional_db) -> Iterator[str]:
    """A login role for the app, first given everything on every table (a common
    ``GRANT ALL``), then put right by grant_app_role run as the owner."""
    db = connection.settings_dict
    role = f"portal_app_{db['NAME']}"[:63]
    with connection.cursor() as cursor:
        _drop_role(cursor, role)  # left over from an interrupted run
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'app-role-pw'")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
    call_command("grant_app_role", role)
    host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    try:
        yield f"postgres://{role}:app-role-pw@{host}/{db['NAME']}"
    finally:
        with connection.cursor() as cursor:
            _drop_role(cursor, role)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.usefixtures("test_agents")
def test_the_app_role_runs_the_decision_flow_yet_cannot_remove_or_unprotect_decisions(
    app_url, spawn, support_agent, reviewer, effects
):
    as_app = {"DATABASE_URL": app_url}

    # Start, pause, decide, resume, verify: every process logs in as the app role.
    started = finish(spawn("shell", "-c", START_IN_A_NEW_PROCESS, **as_app))
    thread = Thread.objects.get(pk=started.split("STARTED ")[1].split()[0])
    finish(spawn("run_worker", "--once", "--id", "first", **as_app))
    request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
    assert f"DECIDED {request.pk}" in finish(
        spawn("shell", "-c", DECIDE_IN_A_NEW_PROCESS, **as_app)
    )
    finish(spawn("run_worker", "--once", "--id", "second", **as_app))
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert read_effects(effects, "pay") == [f"{thread.pk} 42.0"]
    decision = Decision.objects.get(interrupt=request)
    assert "RECORDED" in finish(spawn("shell", "-c", RECORD_AN_EVENT, **as_app))
    verified = finish(spawn("verify_audit", **as_app))
    assert "ok: 1 decisions verified" in verified
    assert "ok: 1 audit events verified" in verified
    checked = finish(spawn("check", "--deploy", "--database", "default", **as_app))
    assert "portal.W001" not in checked

    refused = []
    with psycopg.connect(app_url, autocommit=True) as app:
        for statement in FORBIDDEN:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as denied:
                app.execute(statement)
            refused.append((statement, str(denied.value).split("\n")[0]))
    assert [reason for _, reason in refused] == [
        "permission denied for table portal_decision",
        "must be owner of table portal_decision",
        "must be owner of table portal_decision",
        "permission denied for table portal_decision",
        "permission denied for table portal_decision",
        "must be owner of relation portal_decision",
        "permission denied for table portal_auditevent",
        "must be owner of table portal_auditevent",
        "permission denied for table portal_auditevent",
        "permission denied for table portal_auditevent",
    ]
    assert Decision.objects.get(pk=decision.pk).note == decision.note


@pytest.mark.postgres
def test_grant_app_role_refuses_a_superuser_or_the_tables_owner(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]  # the test runner's role: a superuser that owns all
    with pytest.raises(CommandError, match="is a superuser"):
        call_command("grant_app_role", owner)
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE portal_test_owner_member NOLOGIN")  # (rolled back)
        cursor.execute("CREATE ROLE portal_test_owner NOLOGIN")
        cursor.execute("ALTER TABLE portal_decision OWNER TO portal_test_owner")
        cursor.execute("GRANT portal_test_owner TO portal_test_owner_member")
    for role in ("portal_test_owner", "portal_test_owner_member"):
        with pytest.raises(CommandError, match="owns portal_decision"):
            call_command("grant_app_role", role)
    with pytest.raises(CommandError, match="no role 'nobody_here'"):
        call_command("grant_app_role", "nobody_here")


@pytest.mark.postgres
def test_grant_app_role_prints_its_statements_for_a_dba(db, capsys):
    call_command("grant_app_role", "portal_app", "--sql")
    out = capsys.readouterr().out
    assert 'GRANT SELECT, INSERT ON TABLE "portal_decision" TO "portal_app";' in out
    assert 'GRANT SELECT, INSERT ON TABLE "portal_auditevent" TO "portal_app";' in out
    assert 'REVOKE ALL ON TABLE "portal_decision" FROM "portal_app";' in out
    assert 'GRANT SELECT ON TABLE "django_migrations" TO "portal_app";' in out
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "portal_interrupt"' in out
    assert "TRUNCATE" not in out


def test_grant_app_role_says_sqlite_has_no_roles(db):
    if connection.vendor == "postgresql":
        pytest.skip("about SQLite")
    with pytest.raises(CommandError, match="SQLite has no roles"):
        call_command("grant_app_role", "portal_app")


@pytest.mark.postgres
def test_the_deploy_check_warns_when_the_portal_connects_as_a_superuser_or_the_owner(db):
    # The test runner connects as a superuser that owns every table.
    with pytest.raises(SystemCheckError, match=r"portal\.W001.*as a superuser"):
        call_command("check", "--deploy", "--database", "default", "--fail-level", "WARNING")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("CREATE ROLE portal_test_owner NOLOGIN")  # (rolled back)
        cursor.execute("ALTER TABLE portal_decision OWNER TO portal_test_owner")
        cursor.execute("SET ROLE portal_test_owner")
    try:
        with pytest.raises(SystemCheckError, match=r"as the owner of portal_decision"):
            call_command("check", "--deploy", "--database", "default", "--fail-level", "WARNING")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
