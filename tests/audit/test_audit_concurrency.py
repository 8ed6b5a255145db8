"""Concurrent decisions never fork the hash chain (real concurrency, PostgreSQL)."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from django.db import connection, transaction

from portal.audit.chains import verify_chain
from portal.models import Decision, Interrupt, chain
from portal.models.db import connect_kwargs
from tests.api.roundtrips import server_side_binding
from tests.factories import make_decision, make_interrupt

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 6


def _decide_slowly(interrupt_id: str, start: threading.Barrier, errors: list[BaseException]):
    try:
        start.wait(timeout=10)
        with transaction.atomic():
            interrupt = Interrupt.objects.get(pk=interrupt_id)
            Decision.objects.create(
                interrupt=interrupt,
                thread_id=interrupt.thread_id,
                reviewer=None,
                value=None,
                outcome=Decision.Outcome.CANCELLED,
            )
            # Hold the transaction open: without the chain lock every other writer reads
            # the same head meanwhile and stores it as its prev_hash.
            time.sleep(0.2)
    except BaseException as exc:
        errors.append(exc)
    finally:
        connection.close()


def test_decisions_committed_at_the_same_moment_form_one_unbroken_chain():
    interrupts = [make_interrupt() for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_decide_slowly, args=(i.pk, start, errors)) for i in interrupts
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    decisions = list(Decision.objects.order_by("id"))
    assert len(decisions) == WRITERS
    assert len({d.prev_hash for d in decisions}) == WRITERS, "two decisions share a prev_hash"
    report = verify_chain(Decision.objects.all())
    assert report.ok, report.broken
    assert report.count == WRITERS


@pytest.mark.parametrize("binding", ["client-side", "server-side"])
def test_a_decision_is_chained_to_the_head_under_the_chains_lock(binding, reviewer):
    # Django's cursors bind on the client unless OPTIONS ask for server-side binding,
    # which cannot send the lock and the insert as one query string: it reads the head
    # after the lock and hashes in Python instead. Either way the row comes back sealed.
    newest = make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    bound = server_side_binding() if binding == "server-side" else contextlib.nullcontext()
    with bound:
        with transaction.atomic():
            decision = make_decision(interrupt=make_interrupt(), reviewer=reviewer)
            with psycopg.connect(**connect_kwargs(), autocommit=True) as other:
                key = chain.CHAIN_LOCK_KEY
                taken = other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        assert taken == (False,), "another transaction could take the chains' lock"
        assert decision.prev_hash == newest.hash
        stored = Decision.objects.get(pk=decision.pk)
        assert (stored.prev_hash, stored.hash) == (decision.prev_hash, decision.hash)
        assert verify_chain(Decision.objects.all()).ok
