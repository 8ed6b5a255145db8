"""Cancelling fails closed across processes: a worker holds the thread's run, the model is
about to ask for a refund, and the thread is cancelled. The refund never runs.

The test agent ``refunds`` (testagents.py) stops at ``turn`` until the test lets go; the
refund tool notes every call in ``refund_calls.log``, which the test reads.
"""

from __future__ import annotations

import time

import pytest

from portal.models import Checkpoint, Run, Thread
from portal.reviews import threads
from tests.processes import held_at, output, wait_for
from tests.testagents import read_effects

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("test_agents")]


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def test_a_thread_cancelled_while_a_worker_holds_its_run_runs_no_pending_tool_call(
    spawn, support_agent, effects
):
    thread, run = threads.thread_start(agent="refunds", input=say("refund A-1"), user=support_agent)
    # A long lease: the worker's heartbeat, which would also notice, stays out of it.
    worker = held_at(spawn, effects, "turn", "holder", PORTAL_RUN_LEASE_SECONDS="60")
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    seq = Thread.objects.get(pk=thread.pk).last_seq

    threads.thread_cancel(thread=thread, user=support_agent)
    (effects / "hold_turn").unlink()  # the model answers now: "call refund(A-1)"

    wait_for(lambda: "outcome dropped" in output(worker), timeout=60, what="the worker to stop")
    worker.terminate()
    worker.wait(timeout=30)

    assert read_effects(effects, "refund_calls") == []
    assert read_effects(effects, "refund") == []
    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert thread.status == Thread.Status.CANCELLED
    # Nothing the run did after the cancellation was recorded.
    assert thread.last_seq == seq
    assert not Checkpoint.objects.filter(thread=thread, seq__gt=seq).exists()


def test_a_thread_cancelled_mid_call_leaves_its_worker_running(spawn, support_agent, effects):
    # A worker exits when another one takes its run over (test_effects_processes); a run
    # cancelled with its thread is nobody's to take over, so the worker goes on.
    thread, run = threads.thread_start(agent="refunds", input=say("refund A-1"), user=support_agent)
    worker = held_at(spawn, effects, "before", "holder", PORTAL_RUN_LEASE_SECONDS="1")

    threads.thread_cancel(thread=thread, user=support_agent)
    wait_for(
        lambda: "lease ended: the run was cancelled" in output(worker),
        timeout=10,
        what="the heartbeat to look",
    )
    time.sleep(0.5)
    assert worker.poll() is None, output(worker)
    assert "another worker" not in output(worker)  # an operator is not told of a takeover
    (effects / "hold_before").unlink()

    _, later = threads.thread_start(agent="marker", input=say("hi"), user=support_agent)
    wait_for(
        lambda: Run.objects.get(pk=later.pk).status == Run.Status.SUCCEEDED,
        timeout=30,
        what="the next run",
    )
    worker.terminate()
    assert worker.wait(timeout=30) == 0, output(worker)
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
