"""Exactly once under real concurrency: 20 reviewers submit for one interrupt at once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents.examples import refunds
from portal.decisions import AlreadyDecided, decision_submit
from portal.models import Decision, Interrupt, Run, Thread
from portal.services import thread_start
from portal.worker import Worker
from tests.factories import make_user

THREADS = 20


def run_queued_work() -> int:
    return Worker(name="test-worker").run_forever(once=True)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_decisions_record_one_and_refuse_nineteen(roles, support_agent):
    refunds.ISSUED.clear()
    reviewers = [make_user(f"reviewer-{n}", role="reviewer") for n in range(THREADS)]
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    run_queued_work()
    interrupt = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)

    barrier = threading.Barrier(THREADS)
    results: list[object] = [None] * THREADS

    def decide(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[n] = decision_submit(
                interrupt=interrupt.pk,
                reviewer=reviewers[n],
                value={"approved": True, "note": f"reviewer {n}"},
                resume_interrupt_id=interrupt.pk,
            )
        except Exception as exc:
            results[n] = exc
        finally:
            connection.close()  # each thread had its own connection

    workers = [threading.Thread(target=decide, args=(n,)) for n in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    recorded = [r for r in results if isinstance(r, Decision)]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(recorded) == 1, results
    assert len(refused) == THREADS - 1, results
    winner = recorded[0].reviewer.username
    assert all(f"already decided by {winner} at" in str(r) for r in refused)
    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).count() == 1

    run_queued_work()

    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]
    assert list(
        Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).values_list("status", flat=True)
    ) == [Run.Status.SUCCEEDED]
