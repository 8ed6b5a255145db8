"""Each event the portal announces is written in the transaction of its cause: a new
request, a decision, an expiry, a withdrawal and a failed run."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.checkpoint import CheckpointConflict, CheckpointWrite, ThreadStatus
from agents.testing.fake_openai import FakeOpenAI
from portal.models import Interrupt, Notification, Subscription, Thread
from portal.notify import outbox
from portal.notify.notifier import Notifier, outbox_dispatch
from portal.reviews import threads
from portal.reviews.expiry import interrupts_expire
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.worker import Worker
from tests.factories import make_decision, make_interrupt, make_thread
from tests.loopback import WebhookReceiver

SECRET = "whsec-test-0123456789"


def kinds() -> list[str]:
    return list(Notification.objects.order_by("created_at").values_list("kind", flat=True))


@pytest.mark.django_db
def test_a_new_request_writes_its_event_with_the_pause():
    interrupt = make_interrupt(agent="refunds", reason="tool_approval")

    note = Notification.objects.get()
    assert (note.kind, note.interrupt_id, note.thread_id) == (
        "request.created",
        interrupt.pk,
        interrupt.thread_id,
    )
    assert (note.agent, note.reason) == ("refunds", "tool_approval")

    outbox_dispatch()
    note.refresh_from_db()
    assert note.payload["request"]["message"] == "Approve a $42.50 refund for order A-1001?"
    assert note.payload["request"]["id"] == interrupt.pk


@pytest.mark.django_db
def test_a_pause_the_compare_and_swap_refuses_announces_nothing():
    thread = make_thread()
    pending = {"id": "int_lost", "key": "k", "node": "MAIN", "reason": "input_required"}
    stale = CheckpointWrite(
        status=ThreadStatus.INTERRUPTED, next_node="MAIN", interrupt=pending, node="MAIN"
    )

    with pytest.raises(CheckpointConflict):
        DjangoCheckpointer().put_sync(str(thread.pk), stale, parent_seq=None)

    assert not Interrupt.objects.filter(pk="int_lost").exists()
    assert kinds() == []


@pytest.mark.django_db
def test_a_decision_is_announced_with_its_outcome_and_reviewer(reviewer):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=reviewer, value={"approved": False})

    note = Notification.objects.get(kind="request.decided")
    assert note.interrupt_id == interrupt.pk
    assert note.payload["decision"]["outcome"] == "rejected"
    assert note.payload["decision"]["reviewer"] == "rita-reviewer"


@pytest.mark.django_db
def test_an_expiry_is_announced():
    interrupt = make_interrupt()
    Interrupt.objects.filter(pk=interrupt.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert len(interrupts_expire()) == 1

    assert kinds() == ["request.created", "request.expired"]
    assert Notification.objects.get(kind="request.expired").payload["decision"]["outcome"] == (
        "expired"
    )


@pytest.mark.django_db
def test_the_owner_withdrawing_a_request_is_announced_as_a_withdrawal(support_agent):
    interrupt = make_interrupt(owner=support_agent)

    threads.interrupt_withdraw(interrupt=interrupt, user=support_agent)

    assert kinds() == ["request.created", "request.withdrawn"]


@pytest.fixture
def failing_model(settings, monkeypatch, test_agents):
    with FakeOpenAI() as server:
        settings.PORTAL_MODEL = "gpt-test"  # the real OpenAI client, against the fake
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        server.queue_error(500, times=2, message="upstream exploded")
        yield server


@pytest.mark.django_db
def test_a_failed_run_is_announced_with_its_error(failing_model, support_agent):
    thread, run = threads.thread_start(
        agent="echo", input={"messages": [{"role": "user", "content": "hi"}]}, user=support_agent
    )

    Worker(name="w").run_forever(once=True)

    note = Notification.objects.get(kind="run.failed")
    assert note.thread_id == thread.pk
    assert note.agent == "echo"
    assert note.payload["run"]["id"] == str(run.pk)
    assert "upstream exploded" in note.payload["run"]["error"]


@pytest.mark.django_db(transaction=True)
def test_a_paused_agent_reaches_a_signed_webhook_through_the_notifier(support_agent, settings):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receiver listens on loopback
    with WebhookReceiver(SECRET) as receiver:
        outbox.subscription_save(
            subscription=Subscription(
                name="ops",
                channel="webhook",
                target=receiver.url,
                secret=SECRET,
                events=["request.created"],
            ),
            user=None,
        )
        thread, _ = threads.thread_start(
            agent="refunds",
            input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
            user=support_agent,
        )
        Worker(name="w").run_forever(once=True)
        assert Thread.objects.get(pk=thread.pk).status == Thread.Status.INTERRUPTED
        Notifier(name="n").run_forever(once=True)

    [body] = receiver.handled.values()
    event = json.loads(body)
    interrupt = Interrupt.objects.get(thread=thread)
    assert event["type"] == "request.created"
    assert event["data"]["request"]["id"] == interrupt.pk
    assert event["data"]["request"]["agent"] == "refunds"
    assert receiver.refused == []
