"""Thread services: starting, resuming, cancelling and retrying threads, and what they
refuse (unknown agents, malformed or oversized input, requests no longer pending)."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.errors import InputError, InterruptNotPending, ThreadNotRetryable
from portal.models import Decision, Interrupt, Run, Thread
from portal.notify import broadcast
from portal.reviews import resolve, threads
from portal.runs import queue as runs
from portal.runs.registry import UnknownAgentError
from tests.factories import make_interrupt, make_thread

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_agents")]


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def test_starting_a_thread_creates_it_with_a_queued_run_and_wakes_workers_on_commit(
    support_agent, django_capture_on_commit_callbacks
):
    runs.wake.clear()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        thread, run = threads.thread_start(
            agent="echo", input=say("Where is my parcel?"), user=support_agent
        )
        assert not runs.wake.is_set()  # nothing is announced before the commit

    assert (thread.agent, thread.owner, thread.status) == ("echo", support_agent, "idle")
    assert thread.title == "Where is my parcel?"
    assert (run.kind, run.status, run.attempts) == ("start", "queued", 0)
    assert run.input == say("Where is my parcel?")
    for callback in callbacks:
        callback()
    assert runs.wake.is_set()


def test_a_long_first_message_makes_a_truncated_one_line_title(support_agent):
    text = "My order\n" + "word " * 100
    thread, _ = threads.thread_start(agent="echo", input=say(text), user=support_agent)
    assert len(thread.title) <= 80
    assert thread.title.startswith("My order word")
    assert thread.title.endswith("…")


def test_an_unknown_agent_is_refused_naming_the_registered_ones(support_agent):
    with pytest.raises(UnknownAgentError) as refused:
        threads.thread_start(agent="nope", input=say("hi"), user=support_agent)
    assert "unknown agent 'nope'" in str(refused.value)
    assert "refunds" in str(refused.value)
    assert not Thread.objects.exists()


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("hello", "input must be an object"),
        ({}, "input has no messages"),
        ({"messages": []}, "input has no messages"),
        ({"messages": "hi"}, "input has no messages"),
        ({"messages": ["hi"]}, "message 1 must be an object"),
        ({"messages": [{"role": "user"}]}, "message 1 has no content"),
        ({"messages": [{"role": "user", "content": "  "}]}, "message 1 has no content"),
        ({"messages": [{"role": "system", "content": "x"}]}, "message 1 has role 'system'"),
        ({"messages": [{"content": "x"}]}, "message 1 has role None"),
        ({"messages": [{"role": "user", "content": 42}]}, "content must be a string, got int"),
        ({"messages": [{"role": "user", "content": "x"}], "state": {}}, "unexpected keys"),
    ],
)
def test_malformed_input_is_refused_saying_what_is_wrong(support_agent, given, problem):
    with pytest.raises(InputError) as refused:
        threads.thread_start(agent="echo", input=given, user=support_agent)
    assert problem in str(refused.value)
    assert not Run.objects.exists()


def test_input_over_the_size_limit_is_refused_naming_the_limit(support_agent, settings):
    settings.PORTAL_MAX_INPUT_BYTES = 1024
    with pytest.raises(InputError) as refused:
        threads.thread_start(agent="echo", input=say("x" * 2000), user=support_agent)
    assert "over the limit of 1024 bytes" in str(refused.value)
    assert not Thread.objects.exists()


def test_a_resume_is_queued_with_the_interrupt_it_answers(support_agent):
    thread = make_thread(agent="echo", owner=support_agent)
    run = resolve.thread_resume(thread=thread, value={"approved": True}, interrupt_id="int_1")
    assert (run.kind, run.status) == ("resume", "queued")
    assert run.input == {"resume": {"approved": True}, "resume_interrupt_id": "int_1"}


@pytest.mark.postgres
def test_on_postgresql_workers_hear_of_a_queued_run_at_commit_and_not_before(
    transactional_db, support_agent
):
    import psycopg
    from django.db import transaction

    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"], autocommit=True
    ) as listener:
        listener.execute(f"LISTEN {runs.NOTIFY_CHANNEL}")
        with transaction.atomic():
            threads.thread_start(agent="echo", input=say("hi"), user=support_agent)
            early = list(listener.notifies(timeout=0.1, stop_after=1))
        late = list(listener.notifies(timeout=2, stop_after=1))
    assert early == []
    assert [n.channel for n in late] == [runs.NOTIFY_CHANNEL]


def test_cancelling_a_request_records_a_decision_and_resumes_with_none(
    support_agent, reviewer, django_capture_on_commit_callbacks, monkeypatch
):
    request = make_interrupt(owner=support_agent)
    published = []
    monkeypatch.setattr(broadcast, "publish_queue_change", lambda **kw: published.append(kw))

    with django_capture_on_commit_callbacks(execute=True):
        run = threads.interrupt_withdraw(interrupt=request, user=reviewer)
    broadcast.announced()  # from the announcer's thread

    request.refresh_from_db()
    assert request.status == Interrupt.Status.CANCELLED
    assert request.resolved_at is not None
    assert request.decided
    decision = Decision.objects.get(interrupt=request)
    assert (decision.outcome, decision.value, decision.reviewer) == ("cancelled", None, reviewer)
    assert run.input == {"resume": None, "resume_interrupt_id": request.pk}
    assert [p["status"] for p in published] == ["cancelled"]


def test_cancelling_a_request_that_is_no_longer_pending_is_refused(support_agent, reviewer):
    request = make_interrupt(owner=support_agent)
    threads.interrupt_withdraw(interrupt=request, user=reviewer)

    with pytest.raises(InterruptNotPending) as refused:
        threads.interrupt_withdraw(interrupt=request, user=reviewer)
    assert "already cancelled" in str(refused.value)
    assert Decision.objects.count() == 1
    assert Run.objects.filter(kind="resume").count() == 1


def test_only_a_failed_thread_can_be_continued(support_agent):
    thread = make_thread(agent="echo", owner=support_agent)
    with pytest.raises(ThreadNotRetryable) as refused:
        threads.thread_continue(thread=thread, user=support_agent)
    assert "only a failed thread can be retried" in str(refused.value)


def test_continuing_a_failed_thread_queues_one_run_from_its_last_checkpoint(support_agent):
    thread = make_thread(agent="echo", owner=support_agent)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)

    run = threads.thread_continue(thread=thread, user=support_agent)

    assert (run.kind, run.input) == ("continue", {"messages": []})
    with pytest.raises(ThreadNotRetryable) as refused:
        threads.thread_continue(thread=thread, user=support_agent)
    assert "already has a run queued" in str(refused.value)


def test_a_thread_that_failed_before_its_first_checkpoint_retries_its_first_turn(
    support_agent,
):
    thread, _ = threads.thread_start(agent="echo", input=say("hello"), user=support_agent)
    Run.objects.update(status=Run.Status.FAILED)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)

    run = threads.thread_continue(thread=thread, user=support_agent)

    assert run.input == say("hello")


def test_a_later_turn_that_failed_before_any_of_its_steps_was_written_is_sent_again(
    support_agent,
):
    """A follow-up whose run kept failing before its first step reached the database (its
    input is written with the first step): the retry sends that turn, not an empty one."""
    from agents.checkpoint import CheckpointWrite, ThreadStatus
    from portal.runs.checkpointer import DjangoCheckpointer

    thread, first = threads.thread_start(agent="echo", input=say("hello"), user=support_agent)
    Run.objects.filter(pk=first.pk).update(status=Run.Status.SUCCEEDED)
    DjangoCheckpointer(run=first).put_sync(
        str(thread.pk), CheckpointWrite(ThreadStatus.DONE, None), parent_seq=None
    )
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.DONE)
    follow_up = threads.thread_message(thread=thread, text="and my refund?", user=support_agent)
    Run.objects.filter(pk=follow_up.pk).update(status=Run.Status.FAILED)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)

    run = threads.thread_continue(thread=thread, user=support_agent)

    assert run.input == follow_up.input == say("and my refund?")
