"""The API's repeated reads are prepared on the web's pooled connections
(``portal.models.db.prepared_cursor``): PostgreSQL plans the token's read, the named
request's and the locking read once per connection. A migration that changes the type of
a column such a statement returns, under a running process, makes its plan stale: the read
is planned afresh, and an approval is recorded once, not refused."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from portal.accounts.tokens import api_token_create
from portal.models import ApiToken, Decision, Interrupt
from tests.factories import make_interrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# More requests than psycopg's threshold on each of the pool's two idle connections.
WARM = 12


def _approve(client, token, interrupt):
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    return client.post(
        f"/api/threads/{interrupt.thread.pk}/resume",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def _read(client, token):
    return client.get("/api/interrupts/int_none", HTTP_AUTHORIZATION=f"Bearer {token}")


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_an_approvals_reads_are_prepared_on_the_web_connection(client, reviewer):
    token = api_token_create(user=reviewer, name="t")[1]
    for _ in range(WARM):
        assert _approve(client, token, make_interrupt()).status_code == 202

    prepared = _prepared()

    assert any("FROM portal_apitoken t" in s for s in prepared), prepared  # the token
    assert any("WHERE i.id = $1 AND i.thread_id = $2" in s for s in prepared), prepared
    assert any("FOR UPDATE OF portal_interrupt" in s for s in prepared), prepared


def test_a_read_whose_prepared_plan_a_migration_made_stale_is_planned_afresh(
    client, reviewer, retyped
):
    token = api_token_create(user=reviewer, name="t")[1]
    for _ in range(WARM):
        assert _read(client, token).status_code == 404
    assert any("FROM portal_apitoken t" in s for s in _prepared())

    retyped(ApiToken, "name")  # a column the token's read returns

    assert [_read(client, token).status_code for _ in range(4)] == [404] * 4


def test_an_approval_whose_locking_read_a_migration_made_stale_is_recorded_once(
    client, reviewer, retyped
):
    token = api_token_create(user=reviewer, name="t")[1]
    for _ in range(WARM):
        assert _approve(client, token, make_interrupt()).status_code == 202
    answered = [make_interrupt() for _ in range(3)]

    retyped(Interrupt, "tool")  # a column the locking read returns

    responses = [_approve(client, token, interrupt) for interrupt in answered]
    assert [r.status_code for r in responses] == [202] * 3, [r.content for r in responses]
    for interrupt in answered:
        assert Decision.objects.filter(interrupt=interrupt).count() == 1
