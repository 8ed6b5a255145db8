"""The race contract after the worker has run: a second answer to a request that is no
longer pending gets 409 "already decided by X at T", even once the resumed thread has
finished, whether it comes through the API, the page or the service."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents.examples import refunds
from portal.accounts.tokens import api_token_create
from portal.errors import AlreadyDecided
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews.decisions import decision_submit_for_thread
from portal.reviews.threads import thread_start
from portal.runs.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def run_queued_work() -> int:
    return Worker(name="test-worker").run_forever(once=True)


@pytest.fixture
def finished(support_agent, reviewer):
    """A refund thread that paused, was approved by ``reviewer`` and ran to its end."""
    refunds.ISSUED.clear()
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    run_queued_work()
    interrupt = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
    decision_submit_for_thread(
        thread=thread,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )
    run_queued_work()
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE
    return interrupt


def _nothing_more_was_recorded(interrupt: Interrupt) -> None:
    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).count() == 1
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]


def test_a_late_api_answer_to_a_finished_thread_is_409_naming_who_decided_and_when(
    client, finished, second_reviewer
):
    token = api_token_create(user=second_reviewer)[1]
    response = client.post(
        f"/api/threads/{finished.thread_id}/resume",
        json.dumps({"resume": {"approved": False}, "resume_interrupt_id": finished.pk}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 409, response.content
    detail = response.json()["detail"]
    decided_at = Decision.objects.get(interrupt=finished).created_at
    assert "already decided by rita-reviewer at" in detail
    assert decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") in detail
    _nothing_more_was_recorded(finished)


def test_a_late_answer_from_the_page_to_a_finished_thread_is_409_naming_who_decided(
    client, finished, second_reviewer
):
    client.force_login(second_reviewer)
    response = client.post(
        reverse("interrupt_decide", args=[finished.pk]),
        {"resume_interrupt_id": finished.pk, "action": "reject", "note": ""},
    )
    assert response.status_code == 409
    decided_at = Decision.objects.get(interrupt=finished).created_at
    page = response.content.decode()
    assert "already decided by rita-reviewer at" in page
    assert decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") in page
    _nothing_more_was_recorded(finished)


def test_a_late_service_call_to_a_finished_thread_raises_already_decided(finished, second_reviewer):
    with pytest.raises(AlreadyDecided, match="already decided by rita-reviewer at"):
        decision_submit_for_thread(
            thread=finished.thread,
            reviewer=second_reviewer,
            value={"approved": True},
            resume_interrupt_id=finished.pk,
        )
    _nothing_more_was_recorded(finished)


def test_a_thread_that_never_paused_is_still_404_for_an_unknown_request_id(support_agent, reviewer):
    from portal.errors import ThreadNotPaused

    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Hello"}]},
        user=support_agent,
    )
    run_queued_work()
    with pytest.raises(ThreadNotPaused):
        decision_submit_for_thread(
            thread=thread, reviewer=reviewer, value={"approved": True}, resume_interrupt_id="x"
        )
