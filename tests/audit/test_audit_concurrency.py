"""Concurrent decisions never fork the hash chain (real concurrency, PostgreSQL)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from portal.audit.chains import verify_chain
from portal.models import Decision, Interrupt
from tests.factories import make_interrupt

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
