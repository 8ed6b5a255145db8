"""Model invariants the database enforces: decisions are written once and never changed,
one decision per interrupt, one checkpoint per (thread, seq)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from portal.models import Checkpoint, Decision, ImmutableRecordError, Thread
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db


def record(interrupt, **fields) -> Decision:
    return Decision.objects.create(
        interrupt=interrupt, thread=interrupt.thread, outcome="approved", **fields
    )


def test_a_recorded_decision_cannot_be_saved_again():
    decision = record(make_interrupt())
    decision.note = "changed my mind"
    with pytest.raises(ImmutableRecordError, match="never updated or deleted"):
        decision.save()
    assert Decision.objects.get(pk=decision.pk).note == ""


def test_a_recorded_decision_cannot_be_deleted_one_by_one_or_in_bulk():
    decision = record(make_interrupt())
    with pytest.raises(ImmutableRecordError, match="cannot be deleted"):
        decision.delete()
    with pytest.raises(ImmutableRecordError, match=r"delete\(\) refused"):
        Decision.objects.all().delete()
    assert Decision.objects.filter(pk=decision.pk).exists()


def test_decisions_cannot_be_updated_in_bulk():
    decision = record(make_interrupt())
    with pytest.raises(ImmutableRecordError, match=r"update\(\) refused"):
        Decision.objects.filter(pk=decision.pk).update(outcome="rejected")
    with pytest.raises(ImmutableRecordError), transaction.atomic():
        Decision.objects.bulk_update([decision], ["outcome"])
    assert Decision.objects.get(pk=decision.pk).outcome == "approved"


def test_the_database_allows_only_one_decision_per_interrupt():
    interrupt = make_interrupt()
    record(interrupt)
    with pytest.raises(IntegrityError), transaction.atomic():
        record(interrupt, value={"approved": False})
    assert Decision.objects.filter(interrupt=interrupt).count() == 1


def test_a_thread_with_decisions_cannot_be_deleted():
    from django.db.models import ProtectedError

    interrupt = make_interrupt()
    record(interrupt)
    with pytest.raises(ProtectedError):
        interrupt.thread.delete()


def test_the_database_allows_one_checkpoint_per_thread_and_seq():
    thread = Thread.objects.create(agent="echo")
    Checkpoint.objects.create(thread=thread, seq=1, status="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.create(thread=thread, seq=1, status="done")


def test_a_title_is_the_first_line_of_text_shortened_to_eighty_characters():
    assert Thread.title_from("  Refund\n please  ") == "Refund please"
    long = Thread.title_from("x" * 200)
    assert len(long) == 80 and long.endswith("…")


def test_the_migrations_match_the_models():
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_deleting_a_reviewer_releases_their_claims(reviewer):
    """Their requests go back to the queue unclaimed (the claimant's index, which holds
    claimed requests only, is how the deletion finds them)."""
    from portal.models import Interrupt

    claimed, unclaimed = make_interrupt(), make_interrupt()
    Interrupt.objects.filter(pk=claimed.pk).update(claimed_by=reviewer)
    reviewer.delete()
    claimed.refresh_from_db()
    unclaimed.refresh_from_db()
    assert (claimed.claimed_by_id, unclaimed.claimed_by_id) == (None, None)
    assert claimed.status == Interrupt.Status.PENDING


# --- what a checkpoint and a request hold, read once -----------------------------------


def test_a_conversation_is_the_checkpoints_messages_in_step_order():
    from portal.models import conversation

    assert conversation([[{"n": 1}], None, [], [{"n": 2}, {"n": 3}]]) == [
        {"n": 1},
        {"n": 2},
        {"n": 3},
    ]


def test_the_checkpoint_queryset_rebuilds_the_conversation_both_ways():
    interrupt = make_interrupt(text="Refund order A-1001")
    steps = Checkpoint.objects.filter(thread=interrupt.thread)
    messages = steps.conversation()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "Refund order A-1001"
    assert list(steps.messages_newest_first()) == messages[::-1]


def test_a_tool_approval_lists_its_calls_and_other_payloads_list_none():
    from portal.models import ToolCall, tool_calls_in
    from tests.factories import make_tool_approval

    approval = make_tool_approval(name="transfer_funds", args={"amount": 5.0})
    [call] = approval.tool_calls
    assert (call.name, call.args) == ("transfer_funds", {"amount": 5.0})
    assert call.id.startswith("call")
    assert make_interrupt().tool_calls == []  # an interrupt() inside a tool names no calls
    payload = {"tool_calls": [{"id": 1, "name": "a", "arguments": {}}, "junk", {"name": None}]}
    assert tool_calls_in(payload) == [ToolCall("1", "a", {}), ToolCall("None", "", None)]
    for other in (None, "text", [], {"tool_calls": "no"}):
        assert tool_calls_in(other) == []
