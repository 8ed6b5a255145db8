"""The audit trail of actions: an append-only hash chain beside the decisions'."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from portal.models import AuditEvent, ImmutableRecordError, audit_record, chain
from tests.factories import make_interrupt, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_events(reviewer):
    interrupt = make_interrupt()
    return [
        audit_record(action="interrupt.claim", actor=reviewer, target=interrupt),
        audit_record(action="interrupt.release", actor=reviewer, target=interrupt),
        audit_record(action="login.failed", target=("user", 7), detail={"ip": "192.0.2.1"}),
    ]


@contextmanager
def tampering():
    """Change rows behind the ORM's back; on PostgreSQL with the append-only trigger off
    for this (rolled back) transaction only."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(
                "ALTER TABLE portal_auditevent DISABLE TRIGGER portal_auditevent_append_only"
            )
        yield cursor
        if connection.vendor == "postgresql":
            cursor.execute(
                "ALTER TABLE portal_auditevent ENABLE TRIGGER portal_auditevent_append_only"
            )


def verify_fails() -> str:
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")
    assert failure.value.returncode != 0
    return str(failure.value)


def test_each_event_is_linked_to_the_one_before(three_events):
    first, second, third = three_events
    assert first.prev_hash == chain.GENESIS
    assert second.prev_hash == first.hash
    assert third.prev_hash == second.hash
    stored = AuditEvent.objects.get(pk=second.pk)
    fields = {name: getattr(stored, name) for name in chain.EVENT_FIELDS}
    assert chain.event_hash(fields, prev_hash=stored.prev_hash) == stored.hash


def test_an_event_names_its_actor_and_target(three_events, reviewer):
    claim = AuditEvent.objects.get(pk=three_events[0].pk)
    assert (claim.actor_id, claim.actor_name) == (reviewer.pk, reviewer.username)
    assert claim.target_type == "interrupt"
    failed = AuditEvent.objects.get(pk=three_events[2].pk)
    assert (failed.actor_id, failed.actor_name) == (None, "")
    assert (failed.target_type, failed.target_id, failed.detail) == (
        "user",
        "7",
        {"ip": "192.0.2.1"},
    )


def test_an_action_that_rolls_back_leaves_no_event(reviewer):
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(action="interrupt.claim", actor=reviewer, target=("interrupt", "x"))
        raise RuntimeError("the action failed after recording")
    assert not AuditEvent.objects.exists()


def test_a_large_detail_is_refused():
    with pytest.raises(ValueError, match="identifiers, not contents"):
        audit_record(action="login", detail={"blob": "x" * 5000})
    assert not AuditEvent.objects.exists()


def test_the_event_outlives_its_actors_account(reviewer):
    event = audit_record(action="login", actor=reviewer)
    reviewer.delete()
    kept = AuditEvent.objects.get(pk=event.pk)
    assert kept.actor_name == "rita-reviewer"
    call_command("verify_audit")


def test_events_cannot_be_changed_or_deleted_through_the_orm(three_events):
    event = three_events[0]
    event.detail = {"changed": True}
    with pytest.raises(ImmutableRecordError):
        event.save()
    with pytest.raises(ImmutableRecordError):
        event.delete()
    with pytest.raises(ImmutableRecordError):
        AuditEvent.objects.filter(pk=event.pk).update(action="login")
    with pytest.raises(ImmutableRecordError):
        AuditEvent.objects.filter(pk=event.pk).delete()
    call_command("verify_audit")


def test_verify_audit_counts_the_events_and_prints_their_head(three_events, capsys):
    call_command("verify_audit", "--batch-size", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ok: 0 decisions verified")
    assert lines[1] == f"ok: 3 audit events verified (head {three_events[-1].hash})"


def test_an_edited_event_is_reported(three_events):
    edited = three_events[1]
    with tampering() as cursor:
        cursor.execute(
            "UPDATE portal_auditevent SET actor_name = %s WHERE id = %s", ["mallory", edited.pk]
        )
    message = verify_fails()
    assert f"first broken link in the audit trail: event {edited.pk}: edited row" in message
    assert "1 events before it verified" in message


def test_a_deleted_event_is_reported_at_the_event_after_it(three_events):
    first, deleted, after = three_events
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_auditevent WHERE id = %s", [deleted.pk])
    message = verify_fails()
    assert f"event {after.pk}: deleted row" in message
    assert f"hash of event {first.pk}" in message


def test_losing_the_newest_events_shows_against_a_recorded_head(three_events):
    head = three_events[-1].hash
    call_command("verify_audit", "--expect-event-head", head)
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_auditevent WHERE id = %s", [three_events[-1].pk])
    call_command("verify_audit")  # consistent with itself...
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit", "--expect-event-head", head)
    message = str(failure.value)
    assert f"the head recorded earlier ({head}) is in the chain no more" in message


def test_verify_audit_refuses_an_event_head_that_is_not_a_hash():
    with pytest.raises(CommandError, match="--expect-event-head must be a head hash"):
        call_command("verify_audit", "--expect-event-head", "nope")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE portal_auditevent SET action = 'x' WHERE id = %s",
        "DELETE FROM portal_auditevent WHERE id = %s",
    ],
)
def test_the_postgres_trigger_refuses_update_and_delete_of_an_event(three_events, statement):
    event = three_events[0]
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statement, [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).action == event.action


@pytest.mark.postgres
def test_the_postgres_trigger_refuses_truncating_the_events_even_by_their_owner(three_events):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("CREATE ROLE portal_test_event_owner NOLOGIN")
        cursor.execute("ALTER TABLE portal_auditevent OWNER TO portal_test_event_owner")
        cursor.execute("SET ROLE portal_test_event_owner")
        try:
            with pytest.raises(DatabaseError, match="append-only: TRUNCATE"):
                with transaction.atomic():
                    cursor.execute("TRUNCATE portal_auditevent")
        finally:
            cursor.execute("RESET ROLE")
    assert AuditEvent.objects.count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_events_appended_at_once_from_many_connections_form_one_chain():
    """Real concurrency: without the chain lock two appends read the same head."""
    import threading

    users = [make_user(f"racer-{n}") for n in range(6)]
    barrier = threading.Barrier(len(users))
    errors: list[BaseException] = []

    def append(user):
        try:
            barrier.wait()
            audit_record(action="login", actor=user)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=append, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    prevs = list(AuditEvent.objects.order_by("id").values_list("prev_hash", flat=True))
    assert len(set(prevs)) == len(users)
    call_command("verify_audit")
