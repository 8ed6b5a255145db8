"""The decision service: one transaction that validates, records once and queues the resume."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.checkpoint import CheckpointWrite, ThreadStatus
from portal.errors import (
    AlreadyDecided,
    DecisionForbidden,
    InvalidDecision,
    StaleDecision,
    ThreadNotPaused,
)
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews.decisions import decision_submit, decision_submit_for_thread
from tests import factories
from tests.factories import (
    make_interrupt,
    make_thread,
    make_tool_approval,
    pause_again,
)

pytestmark = pytest.mark.django_db


def submit(interrupt, reviewer, value, **kwargs):
    kwargs.setdefault("resume_interrupt_id", interrupt.pk)
    return decision_submit(interrupt=interrupt, reviewer=reviewer, value=value, **kwargs)


def resume_runs(thread):
    return list(Run.objects.filter(thread=thread, kind=Run.Kind.RESUME))


def test_an_approval_is_recorded_the_interrupt_resolved_and_one_resume_queued(reviewer):
    interrupt = make_interrupt()

    decision = submit(interrupt, reviewer, {"approved": True, "note": "photo received"})

    assert decision.outcome == Decision.Outcome.APPROVED
    assert decision.reviewer == reviewer
    assert decision.note == "photo received"
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.RESOLVED
    assert interrupt.resolved_at is not None
    assert interrupt.decided  # the history lists and searches it
    [run] = resume_runs(interrupt.thread)
    assert run.status == Run.Status.QUEUED
    assert run.input == {
        "resume": {"approved": True, "note": "photo received"},
        "resume_interrupt_id": interrupt.pk,
    }


def test_a_second_decision_on_the_same_interrupt_is_refused_naming_who_and_when(
    reviewer, second_reviewer
):
    interrupt = make_interrupt()
    first = submit(interrupt, reviewer, {"approved": True})

    with pytest.raises(AlreadyDecided) as refused:
        submit(interrupt, second_reviewer, {"approved": False})

    assert refused.value.status_code == 409
    assert "already decided by rita-reviewer at" in str(refused.value)
    assert first.created_at.strftime("%Y-%m-%d %H:%M:%S") in str(refused.value)
    assert Decision.objects.count() == 1
    assert len(resume_runs(interrupt.thread)) == 1


def test_an_answer_naming_another_interrupt_id_is_refused_as_stale(reviewer):
    interrupt = make_interrupt()

    with pytest.raises(StaleDecision) as refused:
        submit(interrupt, reviewer, {"approved": True}, resume_interrupt_id="int_other")

    assert refused.value.status_code == 409
    assert Decision.objects.count() == 0
    assert resume_runs(interrupt.thread) == []


def test_a_form_for_an_interrupt_the_thread_moved_past_is_refused_as_stale(reviewer):
    old = make_interrupt()
    new = pause_again(old.thread)

    with pytest.raises(StaleDecision) as refused:
        submit(old, reviewer, {"approved": True})

    assert refused.value.status_code == 409
    assert "no longer pending" in str(refused.value)
    new.refresh_from_db()
    assert new.status == Interrupt.Status.PENDING
    assert Decision.objects.count() == 0


def test_a_pending_row_the_checkpoint_does_not_name_is_refused(reviewer):
    # Should the queue ever disagree with the checkpoint, the checkpoint wins.
    old = make_interrupt()
    new = pause_again(old.thread)
    Interrupt.objects.filter(pk=old.pk).update(status=Interrupt.Status.PENDING)

    with pytest.raises(StaleDecision) as refused:
        submit(old, reviewer, {"approved": True})

    assert new.pk in str(refused.value)
    assert Decision.objects.count() == 0


def test_resuming_a_thread_that_is_not_paused_is_refused_with_404(reviewer):
    thread = make_thread()

    with pytest.raises(ThreadNotPaused) as refused:
        decision_submit_for_thread(
            thread=thread, reviewer=reviewer, value={"approved": True}, resume_interrupt_id="x"
        )

    assert refused.value.status_code == 404


def test_resuming_by_thread_without_naming_the_interrupt_is_refused(reviewer):
    interrupt = make_interrupt()

    with pytest.raises(StaleDecision) as refused:
        decision_submit_for_thread(
            thread=interrupt.thread,
            reviewer=reviewer,
            value={"approved": True},
            resume_interrupt_id=None,
        )

    assert interrupt.pk in str(refused.value)
    assert Decision.objects.count() == 0


@pytest.mark.parametrize("persona", ["auditor", "support_agent", "outsider"])
def test_users_without_the_reviewer_permission_cannot_decide(persona, request):
    user = request.getfixturevalue(persona)
    interrupt = make_interrupt()

    with pytest.raises(DecisionForbidden) as refused:
        submit(interrupt, user, {"approved": True})

    assert refused.value.status_code == 403
    assert Decision.objects.count() == 0
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_an_admin_without_the_reviewer_group_can_decide(admin_user):
    interrupt = make_interrupt()

    assert submit(interrupt, admin_user, {"approved": True}).reviewer == admin_user


def test_a_value_that_breaks_the_schema_is_refused_with_the_runtime_error_lines(reviewer):
    interrupt = make_interrupt()

    with pytest.raises(InvalidDecision) as refused:
        submit(interrupt, reviewer, {"approved": "yes"})

    assert refused.value.status_code == 422
    assert refused.value.errors == ["$.approved: expected boolean, got str"]
    assert Decision.objects.count() == 0
    assert resume_runs(interrupt.thread) == []
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_a_note_over_the_limit_is_refused(reviewer, settings):
    settings.PORTAL_MAX_NOTE_CHARS = 10
    interrupt = make_interrupt()

    with pytest.raises(InvalidDecision) as refused:
        submit(interrupt, reviewer, {"approved": False}, note="x" * 11)

    assert refused.value.errors == ["note: 11 characters, over the limit of 10"]
    assert Decision.objects.count() == 0


def test_a_note_inside_the_value_over_the_limit_is_refused(reviewer, settings):
    settings.PORTAL_MAX_NOTE_CHARS = 10
    interrupt = make_interrupt()

    with pytest.raises(InvalidDecision) as refused:
        submit(interrupt, reviewer, {"approved": False, "note": "y" * 11})

    assert refused.value.errors == ["$.note: 11 characters, over the limit of 10"]


def test_the_note_goes_into_the_value_when_the_schema_asks_for_one(reviewer):
    interrupt = make_interrupt()

    decision = submit(interrupt, reviewer, {"approved": False}, note="outside return window")

    assert decision.outcome == Decision.Outcome.REJECTED
    assert decision.value == {"approved": False, "note": "outside return window"}
    assert resume_runs(interrupt.thread)[0].input["resume"]["note"] == "outside return window"


def test_the_note_stays_out_of_a_value_whose_schema_has_no_note(reviewer):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    }
    interrupt = make_interrupt(schema=schema, reason="input_required")

    decision = submit(interrupt, reviewer, {"name": "Ada"}, note="checked the ID")

    assert decision.value == {"name": "Ada"}
    assert decision.note == "checked the ID"
    assert decision.outcome == Decision.Outcome.APPROVED


def test_a_none_answer_is_recorded_as_cancelled(reviewer):
    interrupt = make_interrupt()

    decision = submit(interrupt, reviewer, None)

    assert decision.outcome == Decision.Outcome.CANCELLED
    assert resume_runs(interrupt.thread)[0].input["resume"] is None


def test_a_high_risk_approval_records_original_and_executed_arguments(reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    decision = submit(interrupt, reviewer, {"approved": True})

    assert decision.outcome == Decision.Outcome.APPROVED
    assert decision.original_args == {call_id: {"amount": 5000.0, "recipient": "Alice"}}
    assert decision.executed_args == decision.original_args


def test_approving_a_tools_own_request_records_that_calls_arguments(reviewer):
    interrupt = make_interrupt()  # issue_refund asked from inside the tool

    decision = submit(interrupt, reviewer, {"approved": True})

    expected = {interrupt.tool_call_id: {"order_id": "A-1001", "amount": 42.5}}
    assert decision.original_args == expected
    assert decision.executed_args == expected


@pytest.mark.parametrize("steps_between", [0, 1, 2, 3, 5])
def test_a_tools_call_several_steps_before_its_request_is_still_found(reviewer, steps_between):
    # The steps nearest the pause come with the row lock; older ones are read after it.
    thread = make_thread()
    args = {"order_id": "A-1001", "amount": 42.5}
    assistant = factories._tool_call_message("issue_refund", args)
    factories._put(
        thread,
        CheckpointWrite(status=ThreadStatus.RUNNING, next_node="TOOL", new_messages=[assistant]),
    )
    for _ in range(steps_between):
        factories._put(thread, CheckpointWrite(status=ThreadStatus.RUNNING, next_node="TOOL"))
    call_id = assistant["tools_calls"][0]["id"]
    interrupt = factories._pause(
        thread,
        schema=factories.APPROVAL_SCHEMA,
        value=args,
        message="Approve?",
        reason="tool_approval",
        node="TOOL",
        tool_call_id=call_id,
        new_messages=[],
    )

    decision = submit(interrupt, reviewer, {"approved": True})

    assert decision.original_args == {call_id: args}


def test_a_question_that_is_not_about_a_tool_call_records_no_arguments(reviewer):
    interrupt = pause_again(make_interrupt().thread)

    decision = submit(interrupt, reviewer, {"approved": True})

    assert decision.original_args is None and decision.executed_args is None


def test_edited_arguments_are_executed_and_both_versions_recorded(reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    edited = {"amount": 500.0, "recipient": "Alice"}

    decision = submit(interrupt, reviewer, {"type": "edit", "args": {call_id: edited}})

    assert decision.outcome == Decision.Outcome.EDITED
    assert decision.original_args == {call_id: {"amount": 5000.0, "recipient": "Alice"}}
    assert decision.executed_args == {call_id: edited}
    assert resume_runs(interrupt.thread)[0].input["resume"]["args"] == {call_id: edited}


def test_edited_arguments_that_break_the_tool_schema_are_refused(reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    with pytest.raises(InvalidDecision) as refused:
        submit(
            interrupt,
            reviewer,
            {"type": "edit", "args": {call_id: {"amount": "lots", "to": "Mallory"}}},
        )

    assert f"$.args.{call_id}.amount: expected number, got str" in refused.value.errors
    assert f"$.args.{call_id}.recipient: required" in refused.value.errors
    assert f"$.args.{call_id}: unexpected field 'to'" in refused.value.errors
    assert Decision.objects.count() == 0


@pytest.mark.parametrize(
    ("answer", "outcome", "ran"),
    [
        ({"type": "accept"}, Decision.Outcome.APPROVED, True),
        ({"type": "response", "args": "Ask for the invoice."}, Decision.Outcome.RESPONDED, False),
        ({"type": "ignore", "note": "not ours"}, Decision.Outcome.IGNORED, False),
    ],
)
def test_each_typed_answer_to_a_high_risk_call_is_recorded_as_its_outcome(
    reviewer, answer, outcome, ran
):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    asked = {call_id: {"amount": 5000.0, "recipient": "Alice"}}

    decision = submit(interrupt, reviewer, answer)

    assert decision.outcome == outcome
    assert decision.original_args == asked
    assert decision.executed_args == (asked if ran else None)
    assert resume_runs(interrupt.thread)[0].input["resume"] == decision.value == answer


def test_a_yes_no_approval_of_a_high_risk_call_is_recorded_as_its_typed_answer(reviewer):
    interrupt = make_tool_approval()

    decision = submit(interrupt, reviewer, {"approved": True, "note": "fine"})

    assert decision.value == {"type": "accept", "note": "fine"}
    assert decision.outcome == Decision.Outcome.APPROVED
    assert resume_runs(interrupt.thread)[0].input["resume"] == {"type": "accept", "note": "fine"}


def test_a_rejected_high_risk_call_records_no_executed_arguments(reviewer):
    interrupt = make_tool_approval()

    decision = submit(interrupt, reviewer, {"approved": False, "note": "too much"})

    # A yes/no "no" stays a rejection, though the agent receives it as an ignore.
    assert decision.outcome == Decision.Outcome.REJECTED
    assert decision.value == {"type": "ignore", "note": "too much"}
    assert resume_runs(interrupt.thread)[0].input["resume"] == decision.value
    assert decision.executed_args is None
    assert decision.original_args is not None


def test_an_interrupt_without_schema_accepts_any_answer(reviewer):
    interrupt = make_interrupt(schema=None, reason="input_required")

    decision = submit(interrupt, reviewer, {"approved": True, "note": "fine"})

    assert decision.outcome == Decision.Outcome.APPROVED


def test_nothing_is_written_when_queueing_the_resume_fails(reviewer, monkeypatch):
    interrupt = make_interrupt()

    def broken(**kwargs):
        raise RuntimeError("queue down")

    monkeypatch.setattr("portal.reviews.resolve.thread_resume", broken)
    with pytest.raises(RuntimeError):
        submit(interrupt, reviewer, {"approved": True})

    assert Decision.objects.count() == 0
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert Thread.objects.get(pk=interrupt.thread_id).status == Thread.Status.INTERRUPTED


@pytest.mark.django_db
def test_an_answer_after_the_deadline_is_refused_and_the_request_expires(reviewer):
    request = make_interrupt()
    deadline = timezone.now() - timedelta(seconds=1)
    Interrupt.objects.filter(pk=request.pk).update(expires_at=deadline)
    request.refresh_from_db()
    with pytest.raises(StaleDecision, match="deadline passed") as refused:
        decision_submit(
            interrupt=request,
            reviewer=reviewer,
            value={"approved": True},
            resume_interrupt_id=request.pk,
        )
    assert "Nothing was recorded" in str(refused.value)
    request.refresh_from_db()
    assert request.status == Interrupt.Status.EXPIRED
    assert request.decision.outcome == Decision.Outcome.EXPIRED
