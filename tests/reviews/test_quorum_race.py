"""M-of-N under real concurrency on PostgreSQL: every reviewer of the quorum approves at
the same moment, each from its own thread and database connection."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents.examples import refunds
from portal.audit.chains import verify_chain
from portal.errors import AlreadyDecided, AlreadyVoted
from portal.models import Approval, Decision, Interrupt, Run, Thread, chain
from portal.reviews.decisions import decision_submit
from portal.reviews.threads import thread_start
from portal.runs.worker import Worker
from tests.factories import make_user

M = 5


def run_queued_work() -> int:
    return Worker(name="test-worker").run_forever(once=True)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_m_reviewers_approving_at_once_resume_the_run_exactly_once(roles, support_agent, settings):
    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:*": {"approvals_required": M}}
    refunds.ISSUED.clear()
    reviewers = [make_user(f"quorum-{n}", role="reviewer") for n in range(M)]
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    run_queued_work()
    interrupt = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)

    # Each reviewer clicks twice (a double submit): 2M submissions at the same moment.
    submissions = [reviewers[n % M] for n in range(2 * M)]
    barrier = threading.Barrier(len(submissions))
    results: list[object] = [None] * len(submissions)

    def approve(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[n] = decision_submit(
                interrupt=interrupt.pk,
                reviewer=submissions[n],
                value={"approved": True},
                resume_interrupt_id=interrupt.pk,
            )
        except Exception as exc:
            results[n] = exc
        finally:
            connection.close()  # each thread had its own connection

    started = [threading.Thread(target=approve, args=(n,)) for n in range(len(submissions))]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=60)

    decided = [r for r in results if isinstance(r, Decision)]
    votes = [r for r in results if isinstance(r, Approval)]
    refused = [r for r in results if isinstance(r, AlreadyVoted | AlreadyDecided)]
    assert len(decided) == 1, results
    assert len(votes) == M - 1, results
    assert len(refused) == M, results
    # Every reviewer's approval is recorded, once; one decision, one resume.
    recorded = Approval.objects.filter(interrupt=interrupt)
    assert sorted(recorded.values_list("reviewer__username", flat=True)) == sorted(
        r.username for r in reviewers
    )
    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).count() == 1
    # The chain did not fork: each vote points at the one recorded before it.
    report = verify_chain(Approval.objects.all(), chain=chain.APPROVALS)
    assert report.ok and report.count == M, report

    run_queued_work()

    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]
