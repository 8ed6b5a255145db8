"""Retrying a failed thread and cancelling a thread: the services every entry point uses
(the thread page, the API, the admin's bulk actions)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from agents.checkpoint import CheckpointWrite, ThreadStatus
from portal.errors import (
    AlreadyDecided,
    ThreadActionForbidden,
    ThreadNotCancellable,
    ThreadNotRetryable,
)
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews import threads
from portal.runs.checkpointer import DjangoCheckpointer, ThreadCancelled
from tests.factories import make_decision, make_interrupt, make_thread, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_agents")]


def _failed(owner) -> Thread:
    thread = make_thread(agent="echo", owner=owner)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    thread.refresh_from_db()
    return thread


def _grant(user, codename: str):
    user.user_permissions.add(Permission.objects.get(codename=codename))
    return type(user).objects.get(pk=user.pk)  # a fresh object: permissions are cached


# --- retry ------------------------------------------------------------------------------


def test_the_owner_retries_a_failed_thread_from_its_last_checkpoint(support_agent):
    thread = _failed(support_agent)

    run = threads.thread_retry(thread=thread, user=support_agent)

    assert (run.kind, run.status, run.input) == ("continue", "queued", {"messages": []})


def test_someone_else_may_not_retry_a_thread_without_the_permission(
    support_agent, other_support_agent, reviewer, auditor
):
    thread = _failed(support_agent)
    for user in (other_support_agent, reviewer, auditor):
        with pytest.raises(ThreadActionForbidden) as refused:
            threads.thread_retry(thread=thread, user=user)
        assert "portal.retry_thread" in str(refused.value)
    assert not Run.objects.filter(thread=thread).exists()


def test_the_retry_permission_or_a_superuser_retries_anyones_thread(
    support_agent, reviewer, admin_user
):
    thread = _failed(support_agent)
    operator = _grant(reviewer, "retry_thread")

    threads.thread_retry(thread=thread, user=operator)
    Run.objects.filter(thread=thread).update(status=Run.Status.FAILED)
    threads.thread_retry(thread=thread, user=admin_user)

    assert Run.objects.filter(thread=thread, kind=Run.Kind.CONTINUE).count() == 2


def test_a_thread_that_has_not_failed_is_not_retried(support_agent):
    thread = make_thread(agent="echo", owner=support_agent)

    with pytest.raises(ThreadNotRetryable) as refused:
        threads.thread_retry(thread=thread, user=support_agent)

    assert "only a failed thread can be retried" in str(refused.value)


# --- cancel -----------------------------------------------------------------------------


def test_cancelling_a_paused_thread_records_who_and_takes_its_request_out_of_the_queue(
    support_agent, reviewer
):
    request = make_interrupt(owner=support_agent)
    thread = request.thread

    threads.thread_cancel(thread=thread, user=support_agent)

    thread.refresh_from_db()
    request.refresh_from_db()
    assert thread.status == Thread.Status.CANCELLED
    assert thread.cancelled_by == support_agent and thread.cancelled_at is not None
    assert request.status == Interrupt.Status.CANCELLED
    decision = Decision.objects.get(interrupt=request)
    assert (decision.outcome, decision.reviewer, decision.value) == (
        "cancelled",
        support_agent,
        None,
    )
    assert "cancelled by sam-support" in decision.note
    # Fail closed: the thread is not resumed (a withdrawal would resume it with None).
    assert not Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).exists()
    with pytest.raises(AlreadyDecided):
        make_decision(interrupt=request, reviewer=reviewer)


def test_cancelling_a_thread_cancels_its_queued_and_running_runs(support_agent):
    thread, queued = threads.thread_start(
        agent="echo", input={"messages": [{"role": "user", "content": "hi"}]}, user=support_agent
    )
    running = Run.objects.create(thread=thread, kind=Run.Kind.CONTINUE, status=Run.Status.RUNNING)

    threads.thread_cancel(thread=thread, user=support_agent)

    for run in (queued, running):
        run.refresh_from_db()
        assert run.status == Run.Status.CANCELLED
        assert run.error.startswith("cancelled by sam-support at ")
        assert run.finished_at is not None


def test_a_cancelled_thread_takes_no_retry_no_follow_up_and_no_second_cancel(support_agent):
    thread = _failed(support_agent)
    threads.thread_cancel(thread=thread, user=support_agent)

    with pytest.raises(ThreadNotRetryable):
        threads.thread_retry(thread=thread, user=support_agent)
    with pytest.raises(ThreadNotRetryable):
        threads.thread_message(thread=thread, text="hello?", user=support_agent)
    with pytest.raises(ThreadNotCancellable) as refused:
        threads.thread_cancel(thread=thread, user=support_agent)
    assert "already cancelled by sam-support at" in str(refused.value)


def test_a_finished_thread_with_nothing_queued_has_nothing_to_cancel(support_agent):
    thread = make_thread(agent="echo", owner=support_agent)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.DONE)

    with pytest.raises(ThreadNotCancellable) as refused:
        threads.thread_cancel(thread=thread, user=support_agent)

    assert "nothing to cancel" in str(refused.value)


def test_only_the_owner_or_the_cancel_permission_may_cancel(
    support_agent, other_support_agent, reviewer
):
    thread = make_interrupt(owner=support_agent).thread
    for user in (other_support_agent, reviewer):
        with pytest.raises(ThreadActionForbidden) as refused:
            threads.thread_cancel(thread=thread, user=user)
        assert "portal.cancel_thread" in str(refused.value)

    threads.thread_cancel(thread=thread, user=_grant(reviewer, "cancel_thread"))

    thread.refresh_from_db()
    assert thread.cancelled_by == reviewer


def test_the_checkpointer_records_no_step_of_a_cancelled_thread(support_agent):
    # A worker that still holds one of its runs writes the step before each tool call;
    # that write is refused, so the call never runs.
    thread = make_thread(agent="echo", owner=support_agent)
    threads.thread_cancel(thread=thread, user=support_agent)
    thread.refresh_from_db()

    with pytest.raises(ThreadCancelled) as refused:
        DjangoCheckpointer().put_sync(
            str(thread.pk),
            CheckpointWrite(status=ThreadStatus.RUNNING, next_node="TOOL"),
            parent_seq=thread.last_seq,
        )

    assert "was cancelled" in str(refused.value)
    assert Thread.objects.get(pk=thread.pk).last_seq == thread.last_seq


def test_a_cancelled_thread_with_no_checkpoint_yet_records_no_first_step():
    owner = make_user("first-step", role="support")
    thread, _ = threads.thread_start(
        agent="echo", input={"messages": [{"role": "user", "content": "hi"}]}, user=owner
    )
    threads.thread_cancel(thread=thread, user=owner)

    with pytest.raises(ThreadCancelled):
        DjangoCheckpointer().put_sync(
            str(thread.pk),
            CheckpointWrite(status=ThreadStatus.RUNNING, next_node="MAIN"),
            parent_seq=None,
        )


def test_retries_and_cancellations_are_in_the_audit_trail(support_agent):
    from portal.models import AuditEvent

    failed = _failed(support_agent)
    run = threads.thread_retry(thread=failed, user=support_agent)
    request = make_interrupt(owner=support_agent)
    threads.thread_cancel(thread=request.thread, user=support_agent)

    events = list(AuditEvent.objects.order_by("id").values("action", "actor_name", "target_id"))
    assert {
        "action": "thread.retry",
        "actor_name": "sam-support",
        "target_id": str(failed.pk),
    } in events
    cancel = AuditEvent.objects.get(action="thread.cancel")
    assert cancel.target_id == str(request.thread_id)
    assert cancel.detail["requests"] == [request.pk]
    assert run.pk  # the retry's run is named in its event
    assert AuditEvent.objects.get(action="thread.retry").detail == {"run": str(run.pk)}


def test_cancelling_answers_whoever_waits_for_the_threads_work(support_agent, monkeypatch):
    from portal.models import waiting

    told: list[str] = []
    monkeypatch.setattr(waiting, "changed", told.append)
    thread, _ = threads.thread_start(
        agent="echo", input={"messages": [{"role": "user", "content": "hi"}]}, user=support_agent
    )

    threads.thread_cancel(thread=thread, user=support_agent)

    assert waiting.thread_key(thread.pk) in told


def test_a_run_left_queued_on_a_cancelled_thread_does_nothing_and_keeps_it_cancelled(
    support_agent, effects
):
    # Belt and braces: no service queues one, but a worker that finds one runs nothing
    # and does not mark the thread running again.
    from portal.runs.worker import Worker

    thread = make_thread(agent="marker", owner=support_agent)
    threads.thread_cancel(thread=thread, user=support_agent)
    stray = Run.objects.create(
        thread=thread, kind=Run.Kind.START, input={"messages": [{"role": "user", "content": "x"}]}
    )

    Worker(name="test-worker").run_forever(once=True)

    thread.refresh_from_db()
    stray.refresh_from_db()
    assert thread.status == Thread.Status.CANCELLED
    assert (stray.status, stray.error) == (Run.Status.CANCELLED, "its thread was cancelled")
    assert not (effects / "marker.log").exists()
