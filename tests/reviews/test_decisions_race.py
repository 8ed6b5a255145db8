"""Exactly once under real concurrency: 20 reviewers submit for one interrupt at once."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import Permission
from django.db import connection

from agents.examples import refunds
from portal.audit.chains import verify_chain
from portal.errors import AlreadyDecided
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews import external
from portal.reviews.decisions import decision_submit, decision_submit_for_thread
from portal.reviews.external import RequestSpec, external_request_create
from portal.reviews.threads import ThreadNotCancellable, thread_cancel, thread_start
from portal.runs.worker import Worker
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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_answers_racing_the_worker_that_finishes_the_thread_all_get_already_decided(
    roles, support_agent
):
    # Answers arrive by thread id (the API's path) while a worker resumes the thread and
    # runs it to its end: every loser names the winner, none is told "not paused".
    refunds.ISSUED.clear()
    reviewers = [make_user(f"racer-{n}", role="reviewer") for n in range(THREADS)]
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    run_queued_work()
    interrupt = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)

    barrier = threading.Barrier(THREADS + 1)
    results: list[object] = [None] * THREADS
    finished = threading.Event()

    def decide(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            if n >= THREADS // 2:
                # The late half answers only after the worker has finished the thread.
                finished.wait(timeout=30)
            results[n] = decision_submit_for_thread(
                thread=thread,
                reviewer=reviewers[n],
                value={"approved": True},
                resume_interrupt_id=interrupt.pk,
            )
        except Exception as exc:
            results[n] = exc
        finally:
            connection.close()

    def work() -> None:
        try:
            barrier.wait(timeout=30)
            while Thread.objects.get(pk=thread.pk).status != Thread.Status.DONE:
                run_queued_work()
        finally:
            finished.set()
            connection.close()

    started = [threading.Thread(target=decide, args=(n,)) for n in range(THREADS)]
    started.append(threading.Thread(target=work))
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=60)

    assert finished.is_set()
    recorded = [r for r in results if isinstance(r, Decision)]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(recorded) == 1, results
    assert len(refused) == THREADS - 1, results
    winner = recorded[0].reviewer.username
    assert all(f"already decided by {winner} at" in str(r) for r in refused)
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_decisions_on_an_external_request_record_one(roles):
    # An external agent's request has no graph: the winner closes its thread, nobody
    # queues a resume, and the losers name the winner as on any request.
    reviewers = [make_user(f"ext-reviewer-{n}", role="reviewer") for n in range(THREADS)]
    request, _ = external_request_create(
        user=make_user("invoice-bot", role="agent"),
        spec=RequestSpec(
            agent="invoice-bot",
            title="Pay invoice 7",
            response_schema={"type": "object", "properties": {"approved": {"type": "boolean"}}},
        ),
    )
    interrupt_id = request.interrupt_id
    barrier = threading.Barrier(THREADS)
    results: list[object] = [None] * THREADS

    def decide(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[n] = decision_submit(
                interrupt=interrupt_id,
                reviewer=reviewers[n],
                value={"approved": n % 2 == 0},
                resume_interrupt_id=interrupt_id,
                note=f"reviewer {n}",
            )
        except Exception as exc:
            results[n] = exc
        finally:
            connection.close()

    started = [threading.Thread(target=decide, args=(n,)) for n in range(THREADS)]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=60)

    recorded = [r for r in results if isinstance(r, Decision)]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(recorded) == 1, results
    assert len(refused) == THREADS - 1, results
    winner = recorded[0].reviewer.username
    assert all(f"already decided by {winner} at" in str(r) for r in refused)
    thread = Interrupt.objects.get(pk=interrupt_id).thread
    assert Decision.objects.filter(interrupt_id=interrupt_id).count() == 1
    assert not Run.objects.filter(thread=thread).exists()
    assert thread.status == Thread.Status.DONE
    assert list(thread.checkpoints.order_by("seq").values_list("status", flat=True)) == [
        "interrupted",
        "done",
    ]
    assert verify_chain(Decision.objects.all()).ok


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancelling_an_external_request_while_it_is_being_decided_refuses_the_cancel(
    roles, monkeypatch
):
    # The decision locks the request and then closes its thread, a write to the thread's
    # row. A cancellation arriving in between must not hold the thread while it waits for
    # the request: that deadlock would fail one of them with a database error.
    agent = make_user("invoice-bot", role="agent")
    request, _ = external_request_create(
        user=agent,
        spec=RequestSpec(
            agent="invoice-bot",
            title="Pay invoice 8",
            response_schema={"type": "object", "properties": {"approved": {"type": "boolean"}}},
        ),
    )
    interrupt_id = request.interrupt_id
    thread = Interrupt.objects.get(pk=interrupt_id).thread
    reviewer = make_user("ext-reviewer", role="reviewer")
    operator = make_user("operator")
    operator.user_permissions.add(Permission.objects.get(codename="cancel_thread"))
    locked = threading.Event()
    close = external.external_request_close

    def close_later(**kwargs: object) -> None:
        locked.set()  # the request is locked; the cancellation starts now
        time.sleep(0.5)
        close(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(external, "external_request_close", close_later)
    results: dict[str, object] = {}

    def decide() -> None:
        try:
            results["decision"] = decision_submit(
                interrupt=interrupt_id,
                reviewer=reviewer,
                value={"approved": True},
                resume_interrupt_id=interrupt_id,
            )
        except Exception as exc:
            results["decision"] = exc
        finally:
            connection.close()

    def cancel() -> None:
        try:
            assert locked.wait(timeout=30)
            results["cancel"] = thread_cancel(thread=thread, user=operator)
        except Exception as exc:
            results["cancel"] = exc
        finally:
            connection.close()

    started = [threading.Thread(target=decide), threading.Thread(target=cancel)]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=60)

    assert isinstance(results["decision"], Decision), results
    assert isinstance(results["cancel"], ThreadNotCancellable), results
    assert "nothing to cancel" in str(results["cancel"])
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE and thread.cancelled_at is None
