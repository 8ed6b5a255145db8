"""What agents ask with is untrusted: a bad request fails its run and never reaches the
queue; answers are validated without the network, without backtracking and outside the
row lock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from portal.accounts.tokens import api_token_create
from portal.errors import InputError, InvalidDecision
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews import threads
from portal.reviews.decisions import decision_submit
from portal.runs.worker import Worker
from tests.factories import make_interrupt
from tests.loopback import CountingServer

pytestmark = pytest.mark.django_db

CATASTROPHIC = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
    "required": ["code"],
}


@pytest.fixture
def schema_server() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


def ask_with(user, **spec) -> tuple[Thread, Run]:
    text = json.dumps(spec)
    return threads.thread_start(
        agent="asker", input={"messages": [{"role": "user", "content": text}]}, user=user
    )


def drain() -> int:
    return Worker(name="test-worker").run_forever(once=True)


@pytest.mark.usefixtures("test_agents")
def test_a_remote_ref_fails_the_run_with_its_reason_never_fetched_and_nothing_is_queued(
    support_agent, schema_server
):
    schema = {"type": "object", "properties": {"code": {"$ref": schema_server.url}}}
    thread, run = ask_with(support_agent, schema=schema)

    drain()

    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "cannot be sent to a person" in run.error
    assert f"$.properties.code.$ref: '{schema_server.url}' cannot be resolved" in run.error
    assert thread.status == Thread.Status.FAILED
    assert not Interrupt.objects.filter(thread=thread).exists()
    assert schema_server.hits == 0


@pytest.mark.usefixtures("test_agents")
@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"reason": "r" * 65}, "reason is 65 characters, over the limit of 64"),
        ({"schema": {"type": "string", "pattern": "(?=x)"}}, "not supported"),
        ({"schema": {"type": "strin"}}, "metaschema"),
    ],
    ids=["reason too long", "pattern RE2 cannot compile", "not a schema"],
)
def test_a_request_that_cannot_be_stored_or_answered_safely_fails_its_run_cleanly(
    support_agent, spec, says
):
    thread, run = ask_with(support_agent, **spec)

    drain()

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert says in run.error
    assert not Interrupt.objects.filter(thread=thread).exists()
    # The thread is failed, not broken: it is still readable and can be retried.
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.FAILED
    threads.thread_continue(thread=thread, user=support_agent)


def test_answering_a_stored_request_whose_schema_points_at_a_url_never_fetches_it(
    client, support_agent, reviewer, schema_server
):
    interrupt = make_interrupt(
        owner=support_agent,
        schema={"type": "object", "properties": {"approved": {"$ref": schema_server.url}}},
    )
    token = api_token_create(user=reviewer, name="t")[1]

    response = client.post(
        f"/api/threads/{interrupt.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 422
    assert "cannot be resolved" in response.json()["errors"][0]
    assert schema_server.hits == 0
    assert not Decision.objects.exists()


def test_a_catastrophic_pattern_is_refused_through_the_api_in_well_under_a_second(
    client, support_agent, reviewer
):
    interrupt = make_interrupt(owner=support_agent, schema=CATASTROPHIC)
    token = api_token_create(user=reviewer, name="t")[1]

    started = time.perf_counter()
    response = client.post(
        f"/api/threads/{interrupt.thread_id}/resume",
        {"resume": {"code": "a" * 25 + "!"}, "resume_interrupt_id": interrupt.pk},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert time.perf_counter() - started < 1.0
    assert response.status_code == 422
    assert response.json()["errors"] == [
        "$.code: 'aaaaaaaaaaaaaaaaaaaaaaaaa!' does not match '^(a+)+$'"
    ]


def test_services_refuse_what_the_http_layer_refuses_for_callers_that_skip_it(
    support_agent, reviewer
):
    interrupt = make_interrupt(owner=support_agent)
    with pytest.raises(InputError, match="contains a NUL character"):
        threads.thread_start(
            agent="refunds",
            input={"messages": [{"role": "user", "content": "a\x00b"}]},
            user=support_agent,
        )
    for value, says in [
        ({"approved": True, "note": "\ud800"}, "lone surrogate"),
        ({"approved": float("nan")}, "nan is not a JSON number"),
    ]:
        with pytest.raises(InvalidDecision) as refused:
            decision_submit(
                interrupt=interrupt,
                reviewer=reviewer,
                value=value,
                resume_interrupt_id=interrupt.pk,
            )
        assert says in refused.value.errors[0]
    assert not Decision.objects.exists()
    assert Thread.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_answer_that_breaks_the_schema_is_refused_without_waiting_for_the_row_lock(
    support_agent, reviewer
):
    interrupt = make_interrupt(owner=support_agent, schema=CATASTROPHIC)
    locked, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        try:
            with transaction.atomic():
                Interrupt.objects.select_for_update().get(pk=interrupt.pk)
                locked.set()
                release.wait(timeout=10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        started = time.perf_counter()
        with pytest.raises(InvalidDecision):
            decision_submit(
                interrupt=interrupt.pk,
                reviewer=reviewer,
                value={"code": "b"},
                resume_interrupt_id=interrupt.pk,
            )
        assert time.perf_counter() - started < 1.0
    finally:
        release.set()
        holder.join(timeout=10)
