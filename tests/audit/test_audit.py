"""Tamper evidence: the decision hash chain, verify_audit, and the append-only table."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from portal.audit.chains import verify_chain
from portal.models import Decision, ImmutableRecordError, Interrupt, chain
from portal.reviews.threads import interrupt_withdraw
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_decisions(reviewer, support_agent):
    """One decision down each path that records decisions: a reviewer's answer, an owner's
    cancellation and an expiry."""
    from portal.reviews.expiry import interrupts_expire

    make_decision(interrupt=make_tool_approval(), reviewer=reviewer)
    cancelled = make_interrupt(owner=support_agent)
    interrupt_withdraw(interrupt=cancelled, user=support_agent)
    expiring = make_interrupt()
    Interrupt.objects.filter(pk=expiring.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    interrupts_expire()
    return list(Decision.objects.order_by("id"))


@contextmanager
def tampering():
    """Let the test change rows behind the ORM's back. On PostgreSQL the append-only
    trigger is switched off for this transaction only (ALTER TABLE is transactional, and
    the test's transaction is rolled back)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Django's foreign keys are deferred; ALTER TABLE needs their checks done first.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(
                "ALTER TABLE portal_decision DISABLE TRIGGER portal_decision_append_only"
            )
        yield cursor
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE portal_decision ENABLE TRIGGER portal_decision_append_only")


def verify_fails() -> str:
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")
    return str(failure.value)


def test_every_path_that_records_a_decision_links_it_to_the_previous_one(three_decisions):
    first, second, third = three_decisions
    assert [d.outcome for d in three_decisions] == ["approved", "cancelled", "expired"]
    assert first.prev_hash == chain.GENESIS
    assert second.prev_hash == first.hash
    assert third.prev_hash == second.hash
    assert len({d.hash for d in three_decisions}) == 3
    assert all(len(d.hash) == len(d.payload_hash) == 64 for d in three_decisions)


def test_the_hash_covers_the_previous_hash_the_fields_and_the_payload(three_decisions):
    decision = three_decisions[1]
    interrupt = decision.interrupt
    payload = chain.payload_hash({f: getattr(interrupt, f) for f in chain.PAYLOAD_FIELDS})
    assert decision.payload_hash == payload
    fields = {f: getattr(decision, f) for f in chain.DECISION_FIELDS}
    assert decision.hash == chain.decision_hash(
        fields, prev_hash=decision.prev_hash, payload=payload
    )
    changed = {**fields, "note": fields["note"] + "!"}
    assert decision.hash != chain.decision_hash(
        changed, prev_hash=decision.prev_hash, payload=payload
    )


def test_canonical_json_is_the_same_before_and_after_a_database_round_trip():
    assert (
        chain.canonical({"b": 1.0, "a": [1e16, 0.5, "é"]})
        == '{"a":[10000000000000000,0.5,"é"],"b":1}'
    )
    assert chain.canonical({"b": 1, "a": [10000000000000000, 0.5, "é"]}) == chain.canonical(
        {"a": [1e16, 0.5, "é"], "b": 1.0}
    )


@pytest.mark.parametrize("number", [1e16, 1e23, 2.0**70, -1.5e300])
def test_a_large_integral_float_hashes_as_the_integer_a_database_gives_back(number):
    # jsonb keeps the number's text exactly and returns 1e23 as 10**23, not int(1e23).
    from decimal import Decimal

    assert chain.canonical({"n": number}) == chain.canonical({"n": int(Decimal(repr(number)))})


@pytest.mark.postgres
@pytest.mark.parametrize("amount", [1e23, 2.0**70])
def test_the_chain_verifies_after_an_answer_with_a_large_number(reviewer, amount):
    from portal.reviews.decisions import decision_submit

    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    interrupt = make_interrupt(schema=schema, value={"question": "how much?"})
    decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"amount": amount},
        resume_interrupt_id=interrupt.pk,
    )
    later = make_interrupt(schema=schema)
    decision_submit(
        interrupt=later, reviewer=reviewer, value={"amount": 5}, resume_interrupt_id=later.pk
    )

    report = verify_chain(Decision.objects.all())
    assert report.ok, report.broken


def test_verify_audit_says_ok_with_the_number_of_decisions(three_decisions, capsys):
    call_command("verify_audit", "--batch-size", "2")
    out = capsys.readouterr().out
    assert out.startswith("ok: 3 decisions verified")
    assert three_decisions[-1].hash in out


def test_verify_audit_on_an_empty_table_is_ok(capsys):
    call_command("verify_audit")
    assert capsys.readouterr().out.startswith("ok: 0 decisions verified")


def test_an_edited_row_is_reported_as_the_first_broken_link(three_decisions):
    edited = three_decisions[1]
    with tampering() as cursor:
        cursor.execute("UPDATE portal_decision SET note = %s WHERE id = %s", ["fine", edited.pk])
    message = verify_fails()
    assert message.startswith(f"first broken link: decision {edited.pk}: edited row")
    assert "1 decisions before it verified" in message


def test_an_edited_outcome_is_detected_even_with_its_hash_recomputed_in_place(three_decisions):
    first, second, _ = three_decisions
    # A careful forger rewrites the outcome and the row's own hash; the next row still
    # points at the old hash.
    fields = {f: getattr(first, f) for f in chain.DECISION_FIELDS} | {"outcome": "rejected"}
    forged = chain.decision_hash(fields, prev_hash=first.prev_hash, payload=first.payload_hash)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE portal_decision SET outcome = 'rejected', hash = %s WHERE id = %s",
            [forged, first.pk],
        )
    message = verify_fails()
    assert message.startswith(f"first broken link: decision {second.pk}: deleted row")
    assert f"hash of decision {first.pk}" in message


def test_a_deleted_row_is_reported_at_the_row_after_it(three_decisions):
    first, deleted, after = three_decisions
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_decision WHERE id = %s", [deleted.pk])
    message = verify_fails()
    assert message.startswith(f"first broken link: decision {after.pk}: deleted row")
    assert f"does not match the hash of decision {first.pk}" in message


def test_deleting_the_first_row_is_detected(three_decisions):
    first, second, _ = three_decisions
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_decision WHERE id = %s", [first.pk])
    message = verify_fails()
    assert message.startswith(f"first broken link: decision {second.pk}: deleted row")
    assert "genesis" in message


def test_a_changed_interrupt_payload_is_detected(three_decisions):
    decision = three_decisions[0]
    Interrupt.objects.filter(pk=decision.interrupt_id).update(message="Approve a $5 transfer?")
    message = verify_fails()
    assert message.startswith(f"first broken link: decision {decision.pk}: payload changed")


def test_verify_audit_run_as_a_command_exits_non_zero(three_decisions):
    with tampering() as cursor:
        cursor.execute(
            "UPDATE portal_decision SET note = 'x' WHERE id = %s", [three_decisions[2].pk]
        )
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")
    assert failure.value.returncode != 0


def test_decisions_cannot_be_changed_or_deleted_through_the_orm(three_decisions):
    decision = three_decisions[0]
    decision.note = "changed"
    with pytest.raises(ImmutableRecordError):
        decision.save()
    with pytest.raises(ImmutableRecordError):
        decision.delete()
    with pytest.raises(ImmutableRecordError):
        Decision.objects.filter(pk=decision.pk).update(note="changed")
    with pytest.raises(ImmutableRecordError):
        Decision.objects.filter(pk=decision.pk).delete()
    # bulk_update opens an atomic block without a savepoint; ours keeps the test usable.
    with pytest.raises(ImmutableRecordError), transaction.atomic():
        Decision.objects.bulk_update([decision], ["note"])
    call_command("verify_audit")  # nothing changed


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE portal_decision SET note = 'x' WHERE id = %s",
        "DELETE FROM portal_decision WHERE id = %s",
    ],
)
def test_the_postgres_trigger_refuses_update_and_delete(three_decisions, statement):
    decision = three_decisions[0]
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statement, [decision.pk])
    assert Decision.objects.get(pk=decision.pk).note == decision.note


def test_verify_audit_given_the_last_head_detects_that_the_newest_decisions_were_deleted(
    three_decisions, capsys
):
    first, _, last = three_decisions
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_decision WHERE id > %s", [first.pk])
    call_command("verify_audit")  # what is left is a consistent chain of one
    assert capsys.readouterr().out.startswith("ok: 1 decisions verified")

    with pytest.raises(CommandError) as failure:
        call_command("verify_audit", "--expect-head", last.hash)

    message = str(failure.value)
    assert message.startswith(f"first broken link: decision {first.pk}: deleted rows")
    assert last.hash in message


def test_verify_audit_given_an_older_head_accepts_the_decisions_recorded_since(
    three_decisions, capsys
):
    call_command("verify_audit", "--expect-head", three_decisions[0].hash.upper())
    assert capsys.readouterr().out.startswith("ok: 3 decisions verified")


def test_verify_audit_given_the_genesis_head_of_an_empty_chain_accepts_any_chain(
    three_decisions, capsys
):
    call_command("verify_audit", "--expect-head", chain.GENESIS)
    assert capsys.readouterr().out.startswith("ok: 3 decisions verified")


def test_verify_audit_detects_that_every_decision_was_deleted_given_the_last_head(
    three_decisions,
):
    with tampering() as cursor:
        cursor.execute("DELETE FROM portal_decision")
    with pytest.raises(CommandError, match=r"^first broken link: the start: deleted rows"):
        call_command("verify_audit", "--expect-head", three_decisions[-1].hash)


def test_verify_audit_refuses_an_expected_head_that_is_not_a_hash():
    with pytest.raises(CommandError, match="64 hex digits"):
        call_command("verify_audit", "--expect-head", "abc123")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    ["TRUNCATE portal_decision", "TRUNCATE portal_interrupt, portal_thread CASCADE"],
)
def test_the_postgres_trigger_refuses_truncate_even_by_the_tables_owner(three_decisions, statement):
    """The owner of the table, as long as it is not a superuser (who could drop the
    trigger anyway). The role and the change of owner go with the test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("CREATE ROLE portal_test_decision_owner NOLOGIN")
        for table in connection.introspection.django_table_names(only_existing=True):
            cursor.execute(f"ALTER TABLE {table} OWNER TO portal_test_decision_owner")
        cursor.execute("SET ROLE portal_test_decision_owner")
        try:
            with pytest.raises(DatabaseError, match="append-only: TRUNCATE"):
                with transaction.atomic():
                    cursor.execute(statement)
        finally:
            cursor.execute("RESET ROLE")
    assert Decision.objects.count() == 3


def test_a_decision_with_any_text_hashes_as_its_row_is_verified_on_either_backend(reviewer):
    # On PostgreSQL the insert takes the hash in SQL from text bound on the client; it must
    # be the hash the verifier takes in Python of the row read back, whatever the text.
    awkward = "Überweisung 100% ok? «nein» — 'quoted' \"double\" back\\slash\ttab\nline 💶"
    make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    decision = make_decision(
        interrupt=make_interrupt(), reviewer=reviewer, value={"approved": False}, note=awkward
    )

    stored = Decision.objects.get(pk=decision.pk)
    fields = {name: getattr(stored, name) for name in chain.DECISIONS.columns}
    expected = chain.decision_hash(fields, prev_hash=stored.prev_hash, payload=stored.payload_hash)
    assert stored.note == awkward
    assert (decision.prev_hash, decision.hash) == (stored.prev_hash, stored.hash) != ("", "")
    assert stored.hash == expected
    assert verify_chain(Decision.objects.all()).ok
