"""Exactly-once effects across real processes: a worker is killed (SIGKILL) at each point
of a tool call, and another one recovers the run.

The points: ``before`` the payment (the call is recorded in flight, nothing paid yet),
``after`` it (paid, result not saved), and ``saved`` (the result is in the thread; the
model's next turn). The test agent ``refunds`` (testagents.py) stops at the point the
test asks for; payments are counted in files, which no process shares but through the
file system. ``refund_once`` is idempotent and pays through a ledger that acts once per
idempotency key; ``refund`` is not, so a call whose outcome is unknown must become a
request to a reviewer, in the queue like any other, and nothing is paid again unless the
reviewer says "retry".
"""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.tools import OUTCOME_REASON
from portal.models import Interrupt, Run, Thread
from portal.reviews import threads
from portal.runs.worker import EXIT_FENCED
from tests.processes import held_at, output, wait_for
from tests.testagents import read_effects

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("test_agents")]

LEASE = {"PORTAL_RUN_LEASE_SECONDS": "1"}


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def run_status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


def kill_at(spawn, effects: Path, point: str) -> None:
    """Run the queued run in a worker until it reaches ``point``; kill it there."""
    doomed = held_at(spawn, effects, point, "doomed", **LEASE)
    doomed.kill()
    doomed.wait(timeout=10)
    (effects / f"hold_{point}").unlink()


def recover(spawn, run: Run, status: str) -> None:
    """Another worker takes the run over once the lease ran out, and takes it to ``status``."""
    assert run_status(run) == Run.Status.RUNNING  # the killed worker recorded nothing
    rescuer = spawn("run_worker", "--id", "rescuer", "--poll", "0.1", **LEASE)
    wait_for(lambda: run_status(run) == status, timeout=60, what=f"the run {status}")
    rescuer.terminate()
    finish(rescuer)
    run.refresh_from_db()
    assert (run.attempts, run.lease_owner.split("/")[0]) == (2, "rescuer")


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    proc.wait(timeout=timeout)
    text = output(proc)
    assert proc.returncode == 0, text
    return text


def last_words(thread: Thread) -> str:
    return (thread.checkpoints.order_by("-seq").first().messages or [{}])[-1].get("content", "")


@pytest.mark.parametrize("point", ["before", "after", "saved"])
def test_an_idempotent_tool_killed_at_any_point_pays_once(spawn, support_agent, effects, point):
    thread, run = threads.thread_start(
        agent="refunds", input=say("refund A-1 once"), user=support_agent
    )
    kill_at(spawn, effects, point)
    recover(spawn, run, Run.Status.SUCCEEDED)

    calls = read_effects(effects, "refund_once_calls")
    # Run again after a kill before its result was saved, never after; same key each time.
    assert len(calls) == (1 if point == "saved" else 2) and len(set(calls)) == 1
    assert read_effects(effects, "ledger") == [f"{calls[0]} {thread.pk} A-1"]  # paid once
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert not Interrupt.objects.filter(thread=thread).exists()
    assert last_words(thread) == "Done. Refunded A-1."


def test_a_tool_killed_after_its_result_was_saved_is_not_run_again(spawn, support_agent, effects):
    thread, run = threads.thread_start(agent="refunds", input=say("refund A-1"), user=support_agent)
    kill_at(spawn, effects, "saved")
    recover(spawn, run, Run.Status.SUCCEEDED)

    assert len(read_effects(effects, "refund_calls")) == 1
    assert len(read_effects(effects, "refund")) == 1
    assert not Interrupt.objects.filter(thread=thread).exists()
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE


def decide(client, reviewer, request: Interrupt, outcome: str) -> None:
    """The reviewer finds the request in the queue, opens it and answers with the form."""
    client.force_login(reviewer)
    queue = client.get(reverse("queue")).content.decode()
    assert request.pk in queue and "may already have taken effect" in queue
    page = client.get(reverse("interrupt_detail", args=[request.pk])).content.decode()
    assert "confirm it happened, retry it, or mark it failed" in page
    response = client.post(
        reverse("interrupt_decide", args=[request.pk]),
        {"resume_interrupt_id": request.pk, "value.outcome": outcome, "note": "checked"},
    )
    assert response.status_code == 302, response.content.decode()


@pytest.mark.parametrize(
    ("point", "outcome", "paid", "words"),
    [
        # Killed before paying: the reviewer sees nothing paid and says retry: paid once.
        ("before", "retry", 1, "Done. Refunded A-1."),
        # Killed after paying: the reviewer finds the payment and confirms: still once.
        ("after", "confirm", 1, "Done."),
        # ... or, finding none, says it failed: the model is told so.
        ("after", "fail", 1, "That did not work"),
    ],
)
def test_a_tool_killed_before_its_result_was_saved_becomes_a_request_not_a_second_payment(
    spawn, client, support_agent, reviewer, effects, point, outcome, paid, words
):
    thread, run = threads.thread_start(agent="refunds", input=say("refund A-1"), user=support_agent)
    kill_at(spawn, effects, point)
    recover(spawn, run, Run.Status.INTERRUPTED)

    # Nothing was run again: the uncertain call is a request in the queue.
    assert len(read_effects(effects, "refund_calls")) == 1
    assert len(read_effects(effects, "refund")) == (0 if point == "before" else 1)
    request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
    key = read_effects(effects, "refund_calls")[0]
    assert request.reason == OUTCOME_REASON
    assert request.value["key"] == key
    assert request.message.startswith("refund (order id: A-1) may already have taken effect")
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.INTERRUPTED

    decide(client, reviewer, request, outcome)
    finish(spawn("run_worker", "--once", "--id", "after-review"))

    payments = read_effects(effects, "refund")
    assert len(payments) == paid
    assert all(line.endswith(key) for line in payments)  # a retry pays with the same key
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert words in last_words(thread)


@pytest.mark.parametrize(
    ("taker", "status"),
    [
        ("taker/0", Run.Status.RUNNING),
        ("taker/0", Run.Status.INTERRUPTED),
        (None, Run.Status.FAILED),  # as SQLite's claim fails a run out of attempts
    ],
    ids=["while-the-taker-runs", "after-the-taker-paused", "given-up-by-a-claim"],
)
def test_a_worker_whose_run_was_taken_over_mid_call_exits_before_the_call_can_act(
    spawn, support_agent, effects, taker, status
):
    # A worker stalled in a sync tool (a payment API that hangs) while its lease ran out;
    # another worker took the run over, and may have paused it on its question already
    # (or, the run out of attempts, failed it: the user may retry the thread).
    # Cancelling the run cannot stop a thread: the stale worker ends its process instead,
    # before the API answers and the call would pay.
    thread, run = threads.thread_start(agent="refunds", input=say("refund A-1"), user=support_agent)
    stalled = held_at(spawn, effects, "before", "stalled", **LEASE)
    taken = Run.objects.filter(pk=run.pk)
    taken.update(status=status, lease_expires_at=timezone.now() - timedelta(seconds=1))
    if taker is not None:
        taken.update(lease_owner=taker)
    deadline = time.monotonic() + 10
    while stalled.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    (effects / "hold_before").unlink()  # the payment API answers
    time.sleep(0.5)

    assert read_effects(effects, "refund") == []
    assert stalled.poll() == EXIT_FENCED, output(stalled)
    assert "the run it was executing is another worker's now" in output(stalled)
    if status == Run.Status.RUNNING:
        # The call is still in flight in the thread: whoever takes the run asks about it.
        recover(spawn, run, Run.Status.INTERRUPTED)
        request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
        assert request.reason == OUTCOME_REASON
        assert read_effects(effects, "refund") == []


def test_a_call_that_acts_after_its_run_was_taken_over_and_retried_is_refused_by_its_fence(
    spawn, client, support_agent, reviewer, effects
):
    # The window the exit above leaves: a worker frozen whole (a paused VM, a long
    # stall) inside a call cannot fence itself. Meanwhile another worker takes the run
    # over and asks about the call, a reviewer says "retry", and the retry pays. When the
    # frozen worker wakes, its call goes out with the same key but an older fencing
    # token, which a target that fences refuses: one payment, not two.
    thread, run = threads.thread_start(
        agent="refunds", input=say("refund A-1 fenced"), user=support_agent
    )
    # A long lease: the frozen worker's heartbeat does not look again during the test.
    frozen = held_at(spawn, effects, "before", "frozen", PORTAL_RUN_LEASE_SECONDS="300")
    try:
        frozen.send_signal(signal.SIGSTOP)
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        (effects / "hold_before").unlink()
        recover(spawn, run, Run.Status.INTERRUPTED)
        request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
        assert request.reason == OUTCOME_REASON
        decide(client, reviewer, request, "retry")
        finish(spawn("run_worker", "--once", "--id", "after-review"))
        assert len(read_effects(effects, "fenced")) == 1

        frozen.send_signal(signal.SIGCONT)
        wait_for(lambda: read_effects(effects, "fenced_refused"), timeout=30, what="the late call")
    finally:
        frozen.kill()
        frozen.wait(timeout=10)

    (stale, first), (retried, second) = (
        line.split(" ") for line in read_effects(effects, "refund_fenced_calls")
    )
    assert stale == retried and int(first) < int(second)
    assert read_effects(effects, "fenced") == [f"{retried} {second} {thread.pk} A-1"]
    assert read_effects(effects, "fenced_refused") == [f"{stale} {first}"]
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert "Refunded A-1" in last_words(thread)
