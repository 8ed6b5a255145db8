"""``portal.models.together``: a transaction's last writes in one statement, and never
a write that a later read of the same block misses, nor one that outlives a rollback."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from portal.models import Interrupt, Run, together
from tests.api.roundtrips import round_trips, server_side_binding
from tests.factories import make_interrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_an_update_an_insert_and_a_notify_go_as_one_statement():
    interrupt = make_interrupt()
    run = Run(thread=interrupt.thread, kind=Run.Kind.RESUME, input={"resume": 1})

    with round_trips() as trips, transaction.atomic():
        with together.together():
            interrupt.status = Interrupt.Status.RESOLVED
            together.update(interrupt, ["status"])
            together.insert(run)
            together.gathered_notify("portal_test_together", "x")

    assert len(trips) == 3, "\n".join(trips)  # BEGIN, the writes with the notify, COMMIT
    assert trips[1].startswith("WITH w0 AS (UPDATE") and "pg_notify" in trips[1]
    assert Interrupt.objects.get(pk=interrupt.pk).status == Interrupt.Status.RESOLVED
    assert Run.objects.filter(pk=run.pk, thread=interrupt.thread).exists()


def test_a_read_inside_the_block_sees_the_writes_made_before_it():
    interrupt = make_interrupt()
    run = Run(thread=interrupt.thread, kind=Run.Kind.RESUME, input={})

    with transaction.atomic(), together.together():
        together.insert(run)
        interrupt.status = Interrupt.Status.RESOLVED
        together.update(interrupt, ["status"])
        assert Run.objects.filter(pk=run.pk).exists()
        assert Interrupt.objects.get(pk=interrupt.pk).status == Interrupt.Status.RESOLVED


def test_a_write_that_breaks_a_constraint_fails_the_transaction_and_leaves_nothing():
    interrupt = make_interrupt()
    first = Run(thread=interrupt.thread, kind=Run.Kind.RESUME, input={})
    first.save(force_insert=True)
    clash = Run(id=first.pk, thread=interrupt.thread, kind=Run.Kind.RESUME, input={})

    with pytest.raises(IntegrityError), transaction.atomic(), together.together():
        interrupt.status = Interrupt.Status.RESOLVED
        together.update(interrupt, ["status"])
        together.insert(clash)

    assert Interrupt.objects.get(pk=interrupt.pk).status == Interrupt.Status.PENDING
    assert Run.objects.filter(thread=interrupt.thread).count() == 1


def test_outside_a_block_each_write_goes_at_once():
    interrupt = make_interrupt()
    run = Run(id=uuid.uuid4(), thread=interrupt.thread, kind=Run.Kind.START, input={})

    with round_trips() as trips:
        together.insert(run)

    assert len(trips) == 1 and trips[0].startswith('INSERT INTO "portal_run"'), trips


def test_the_next_statement_goes_in_the_writes_round_trip_and_reads_its_own_result():
    interrupt = make_interrupt()
    run = Run(thread=interrupt.thread, kind=Run.Kind.RESUME, input={})

    with round_trips() as trips, transaction.atomic(), together.together():
        together.insert(run)
        together.then("SELECT 'kept after the writes'")
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), '100%%' FROM portal_run WHERE id = %s", [run.pk])
            assert cursor.fetchall() == [(1, "100%")]
            cursor.execute("SELECT '5%'")  # nothing bound: the % is the statement's own
            assert cursor.fetchone() == ("5%",)

    # BEGIN; the insert, the kept statement and the read; the second read; COMMIT.
    assert len(trips) == 4, "\n".join(trips)
    insert, kept, read = trips[1].split("; ")
    assert insert.startswith("WITH w0 AS (INSERT") and kept == "SELECT 'kept after the writes'"
    assert read.startswith("SELECT count(*)"), trips[1]


def test_with_server_side_binding_each_statement_goes_alone():
    interrupt = make_interrupt()
    run = Run(thread=interrupt.thread, kind=Run.Kind.RESUME, input={})
    with server_side_binding():
        with round_trips() as trips, transaction.atomic(), together.together():
            together.insert(run)
            together.then("SELECT 'kept after the writes'")
            assert Run.objects.filter(pk=run.pk).exists()

    assert len(trips) == 5, "\n".join(trips)  # BEGIN, the insert, the kept one, the read, COMMIT
    assert "SELECT 'kept after the writes'" in trips[2], "\n".join(trips)


def test_a_kept_statement_is_sent_as_the_block_ends_when_nothing_follows():
    with round_trips() as trips, transaction.atomic(), together.together():
        together.then("SELECT pg_advisory_xact_lock(7)")

    assert trips == ["BEGIN", "SELECT pg_advisory_xact_lock(7)", "COMMIT"], trips
    assert not together.then("SELECT 1"), "outside a block nothing is kept"
    with pytest.raises(ValueError, match="one statement"):
        together.then("SELECT 1; SELECT 2")  # the caller's result is found by counting
