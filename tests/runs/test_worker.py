"""The worker, in process: claiming, outcomes, leases, attempts and refusals.

Runs execute through ``Worker.run_forever(once=True)`` on the test's own connection, so
these tests need no subprocess; the cross-process behaviour is in test_worker_processes.
"""

from __future__ import annotations

import copy
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.models import Checkpoint, Interrupt, Run, Thread
from portal.reviews import resolve, threads
from portal.runs import queue
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.worker import Worker
from tests.processes import wait_for
from tests.testagents import read_effects

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_agents")]


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def drain() -> int:
    return Worker(name="test-worker").run_forever(once=True)


def test_a_queued_start_runs_until_the_tool_asks_and_the_queue_shows_the_request(
    support_agent, effects
):
    thread, run = threads.thread_start(agent="approve", input=say("pay 42"), user=support_agent)

    assert drain() == 1

    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, run.attempts, run.error) == (Run.Status.INTERRUPTED, 1, "")
    assert thread.status == Thread.Status.INTERRUPTED
    request = Interrupt.objects.get(thread=thread)
    assert (request.status, request.agent, request.reason) == (
        "pending",
        "approve",
        "tool_approval",
    )
    assert request.value == {"amount": 42.0}
    assert request.checkpoint_seq == thread.last_seq
    assert set(Checkpoint.objects.filter(thread=thread).values_list("run", flat=True)) == {run.pk}
    assert read_effects(effects, "pay") == []


def test_a_resume_finishes_the_thread_and_runs_the_approved_tool_once(support_agent, effects):
    thread, _ = threads.thread_start(agent="approve", input=say("pay 42"), user=support_agent)
    drain()
    request = Interrupt.objects.get(thread=thread)
    request.status = Interrupt.Status.RESOLVED
    request.save()
    resume = resolve.thread_resume(thread=thread, value={"approved": True}, interrupt_id=request.pk)

    drain()

    resume.refresh_from_db()
    thread.refresh_from_db()
    assert resume.status == Run.Status.SUCCEEDED
    assert thread.status == Thread.Status.DONE
    assert read_effects(effects, "pay") == [f"{thread.pk} 42.0"]
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    assert snapshot is not None
    assert snapshot.messages[-1]["content"].startswith("Done. Paid $42.00")


def test_a_run_for_an_unknown_agent_fails_readably_and_the_worker_goes_on(support_agent):
    ghost = Thread.objects.create(agent="no-such-agent")
    broken = Run.objects.create(thread=ghost, kind=Run.Kind.START, input=say("hi"))
    _, fine = threads.thread_start(agent="echo", input=say("hello"), user=support_agent)

    assert drain() == 2

    broken.refresh_from_db()
    fine.refresh_from_db()
    assert broken.status == Run.Status.FAILED
    assert "unknown agent 'no-such-agent'" in broken.error
    assert "echo" in broken.error  # it lists what is registered
    assert Thread.objects.get(pk=ghost.pk).status == Thread.Status.FAILED
    assert fine.status == Run.Status.SUCCEEDED


@pytest.mark.parametrize(
    "stored",
    [["not", "an", "object"], {"messages": "hello"}, {"messages": [{"role": "user"}]}],
)
def test_a_run_with_bad_stored_input_fails_readably(stored):
    thread = Thread.objects.create(agent="echo")
    run = Run.objects.create(thread=thread, kind=Run.Kind.START, input=stored)

    drain()

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("the run's stored input is not valid")


def test_a_resume_the_runtime_refuses_fails_the_run_and_the_thread_stays_paused(
    support_agent,
):
    thread, _ = threads.thread_start(agent="approve", input=say("pay 5"), user=support_agent)
    drain()
    run = resolve.thread_resume(thread=thread, value={"approved": True}, interrupt_id="int_wrong")

    drain()

    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "int_wrong" in run.error
    assert thread.status == Thread.Status.INTERRUPTED


def stalled_echo_run(user) -> tuple[Thread, Run]:
    """An echo run taken once by a worker that stalled: its lease has just expired."""
    thread, run = threads.thread_start(agent="echo", input=say("hi"), user=user)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        attempts=1,
        lease_owner="stalled-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    return thread, run


def workers_kept_dying(run: Run, settings) -> None:
    """As if each worker that took ``run`` died: its attempts used up, its lease expired."""
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        attempts=settings.PORTAL_RUN_MAX_ATTEMPTS,
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )


@pytest.mark.parametrize("status", [Run.Status.SUCCEEDED, Run.Status.FAILED, "release"])
def test_two_workers_given_one_name_never_finish_each_others_runs(support_agent, status):
    """One --id in a deployment's template starts several workers with one name. The one
    whose lease another of that name took over records nothing of the run."""
    from portal.runs.worker import RELEASE, Outcome

    _, run = threads.thread_start(agent="echo", input=say("hi"), user=support_agent)
    first = Worker(name="worker")
    claimed = first.claim()
    assert claimed is not None and claimed.pk == run.pk
    # A long pause: its lease ran out, and the other "worker" took the run over.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = Worker(name="worker")
    taken = second.claim()
    assert taken is not None and taken.pk == run.pk

    first._finish(claimed, Outcome(RELEASE if status == "release" else status, "late"))

    run.refresh_from_db()
    assert (run.status, run.attempts) == (Run.Status.RUNNING, 2)  # the second's, running
    assert run.lease_expires_at > timezone.now()  # and its lease still holds
    assert run.lease_owner == second.lease_owner


def test_a_worker_name_too_long_for_its_leases_is_refused_at_start():
    from django.core.management import CommandError, call_command

    Worker(name="w" * 119)
    with pytest.raises(ValueError, match="at most 119 characters"):
        Worker(name="w" * 120)
    database = copy.deepcopy(connection.settings_dict)
    with pytest.raises(CommandError, match="--id: a worker's name may have at most 119"):
        call_command("run_worker", "--once", "--id", "w" * 120)
    assert not Run.objects.filter(status=Run.Status.RUNNING).exists()  # nothing claimed
    # Nor was this process's connection made a loop's (kept, bound on the server).
    assert connection.settings_dict == database


def test_a_run_whose_lease_expired_too_often_fails_with_the_reason(support_agent, settings):
    _, run = threads.thread_start(agent="echo", input=say("hi"), user=support_agent)
    workers_kept_dying(run, settings)

    assert drain() == 0

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert f"gave up after {settings.PORTAL_RUN_MAX_ATTEMPTS} attempts" in run.error
    assert run.thread.status == Thread.Status.FAILED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_that_gave_up_keeps_the_cancellation_that_came_after_its_claim(
    support_agent, settings, monkeypatch
):
    import threading

    from django.db import connections

    from portal.models import Notification

    thread, run = threads.thread_start(agent="echo", input=say("hi"), user=support_agent)
    workers_kept_dying(run, settings)
    gave_up = queue.give_up

    def cancelled_meanwhile(claimed: Run, **kwargs) -> None:
        # The user cancels the thread between the claim and the run's failure.
        def cancel() -> None:
            threads.thread_cancel(thread=thread, user=support_agent)
            connections.close_all()

        canceller = threading.Thread(target=cancel)
        canceller.start()
        canceller.join(timeout=20)
        return gave_up(claimed, **kwargs)

    monkeypatch.setattr(queue, "give_up", cancelled_meanwhile)
    assert Worker(name="late").claim() is None

    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, thread.status) == (Run.Status.CANCELLED, Thread.Status.CANCELLED)
    assert not Notification.objects.filter(kind="run.failed").exists()


def test_an_answer_whose_run_gave_up_before_writing_it_is_sent_again_by_a_retry(
    support_agent, settings, effects
):
    """The resume's workers kept dying before its answer reached the checkpoint: the
    request has left the queue, so the thread is failed, not paused on a request nobody
    can answer. A retry sends the answer again, and the tool runs once."""
    thread, _ = threads.thread_start(agent="approve", input=say("pay 42"), user=support_agent)
    drain()
    request = Interrupt.objects.get(thread=thread)
    Interrupt.objects.filter(pk=request.pk).update(status=Interrupt.Status.RESOLVED)
    resume = resolve.thread_resume(thread=thread, value={"approved": True}, interrupt_id=request.pk)
    workers_kept_dying(resume, settings)

    assert drain() == 0

    resume.refresh_from_db()
    thread.refresh_from_db()
    assert resume.status == Run.Status.FAILED and thread.status == Thread.Status.FAILED
    retry = threads.thread_continue(thread=thread, user=support_agent)
    assert retry.input == {"resume": {"approved": True}, "resume_interrupt_id": request.pk}

    assert drain() == 1

    retry.refresh_from_db()
    thread.refresh_from_db()
    assert (retry.status, thread.status) == (Run.Status.SUCCEEDED, Thread.Status.DONE)
    assert read_effects(effects, "pay") == [f"{thread.pk} 42.0"]


def held_by_a_live_worker(user) -> Run:
    """A run that another worker is executing, its lease good for 30 more seconds."""
    _, run = threads.thread_start(agent="echo", input=say("hi"), user=user)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        attempts=1,
        lease_owner="busy-worker",
        lease_expires_at=timezone.now() + timedelta(seconds=30),
    )
    return run


def test_a_live_lease_is_not_taken_over(support_agent):
    held_by_a_live_worker(support_agent)

    assert Worker(name="other").claim() is None


def test_a_recovered_run_that_already_paused_is_marked_interrupted_without_running_again(
    support_agent, effects
):
    thread, run = threads.thread_start(agent="approve", input=say("pay 7"), user=support_agent)
    drain()
    # As if the worker died after the pause was checkpointed but before it recorded it.
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    seq = Thread.objects.get(pk=thread.pk).last_seq

    assert drain() == 1

    run.refresh_from_db()
    assert (run.status, run.attempts) == (Run.Status.INTERRUPTED, 2)
    assert Thread.objects.get(pk=thread.pk).last_seq == seq  # nothing new was written
    assert Interrupt.objects.filter(thread=thread).count() == 1


def test_runs_of_one_thread_execute_one_at_a_time_in_order(support_agent):
    thread, first = threads.thread_start(agent="echo", input=say("one"), user=support_agent)
    second = Run.objects.create(thread=thread, kind=Run.Kind.START, input=say("two"))

    w1 = Worker(name="w1")
    claimed = w1.claim()
    assert claimed is not None and claimed.pk == first.pk
    assert Worker(name="w2").claim() is None  # the thread is busy
    w1.execute(claimed)  # w1's lease: it records the outcome
    claimed = Worker(name="w2").claim()
    assert claimed is not None and claimed.pk == second.pk


def test_the_embedded_worker_runs_queued_work_in_a_thread_of_this_process(
    transactional_db, support_agent
):
    from portal.reviews.expiry import interrupts_expire
    from portal.runs.worker import start_embedded_worker, stop_embedded_worker

    worker = start_embedded_worker(expire=interrupts_expire)
    try:
        assert start_embedded_worker(expire=interrupts_expire) is worker  # one per process
        _, run = threads.thread_start(agent="echo", input=say("hello"), user=support_agent)

        def finished() -> bool:
            run.refresh_from_db()
            return run.status == Run.Status.SUCCEEDED

        wait_for(finished, timeout=20, what="the embedded worker")
    finally:
        stop_embedded_worker()
    assert run.lease_owner == worker.lease_owner


async def test_a_send_from_the_embedded_workers_thread_wakes_in_memory_consumers_at_once(
    settings,
):
    """The in-memory layer's queues belong to the consumers' loop; without bind_loop a
    send from the worker's own loop sat unnoticed until something else woke that loop."""
    import asyncio
    import threading
    import time

    from channels.layers import channel_layers

    from portal.notify import broadcast

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    layer = channel_layers["default"]
    broadcast.bind_loop()
    channel = await layer.new_channel()
    await layer.group_add(broadcast.thread_group("t1"), channel)
    sent_at: list[float] = []

    def worker_thread() -> None:
        sent_at.append(time.monotonic())
        broadcast.publish_thread_status("t1", "done")

    threading.Thread(target=worker_thread).start()
    message = await asyncio.wait_for(layer.receive(channel), timeout=5)

    assert message["type"] == broadcast.THREAD_STATUS
    assert time.monotonic() - sent_at[0] < 1.0
    channel_layers.backends.clear()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_runs_write_on_the_workers_own_connection(support_agent, effects):
    from django.db import transaction

    worker = Worker(name="own-connection")
    try:
        conn = worker._native_connection()
        assert conn is not None and conn.autocommit
        assert worker._native_connection() is conn  # kept from run to run
        with transaction.atomic():
            # A caller's transaction must see the run's writes: Django's connection then.
            assert worker._native_connection() is None

        thread, _ = threads.thread_start(agent="approve", input=say("pay 7"), user=support_agent)
        assert worker.run_forever(once=True) == 1
        request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
        Interrupt.objects.filter(pk=request.pk).update(status=Interrupt.Status.RESOLVED)
        resolve.thread_resume(thread=thread, value={"approved": True}, interrupt_id=request.pk)
        assert worker.run_forever(once=True) == 1
        assert worker._pg is None and conn.closed  # closed when the loop ended
    finally:
        worker._close_loop()
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert read_effects(effects, "pay") == [f"{thread.pk} 7.0"]
    assert set(Run.objects.filter(thread=thread).values_list("status", flat=True)) == {
        Run.Status.INTERRUPTED,
        Run.Status.SUCCEEDED,
    }


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_connection_was_cut_while_idle_reconnects_before_the_next_run(
    support_agent,
):
    from django.db import connection

    worker = Worker(name="cut")
    try:
        first = worker._native_connection()
        with connection.cursor() as cursor:  # as a database restart would
            cursor.execute("SELECT pg_terminate_backend(%s)", [first.info.backend_pid])
        thread, _ = threads.thread_start(agent="approve", input=say("pay 3"), user=support_agent)
        second = worker._native_connection()
        assert second is not None and second is not first and first.closed
        assert worker.execute(worker.claim()).status == Run.Status.INTERRUPTED
    finally:
        worker._close_loop()
    assert Interrupt.objects.filter(thread=thread, status=Interrupt.Status.PENDING).exists()


def executing(worker: Worker, claimed: Run) -> tuple[threading.Thread, dict[str, Run]]:
    """``worker.execute(claimed)`` started in a thread of its own, which closes its loop
    and its connections at the end; its outcome lands in the dict under "run"."""
    from django.db import connections

    outcome: dict[str, Run] = {}

    def execute() -> None:
        try:
            outcome["run"] = worker.execute(claimed)
        finally:
            worker._close_loop()
            connections.close_all()

    runner = threading.Thread(target=execute)
    runner.start()
    return runner, outcome


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_loses_its_lease_stops_the_run_before_its_next_step(support_agent, effects):
    """Fail closed: once another worker owns the run, the old one must not go on."""
    import time

    from portal.runs.worker import LEASE_LOST, RELEASE

    thread, run = threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    worker = Worker(name="loser", lease_seconds=0.6)  # heartbeat every 0.2 s
    runner, outcome = executing(worker, worker.claim())
    wait_for(lambda: read_effects(effects, "slow_started"), timeout=20, what="the slow tool")
    assert read_effects(effects, "slow_started") == [str(thread.pk)]
    # Another worker took the run over (as after an expired lease). Once a heartbeat has
    # seen it, the slow tool is let go: a worker that went on would now finish it.
    Run.objects.filter(pk=run.pk).update(lease_owner="thief")
    time.sleep(0.5)
    (effects / "release").touch()
    runner.join(timeout=10)
    assert not runner.is_alive()

    assert (outcome["run"].status, outcome["run"].error) == (RELEASE, LEASE_LOST)
    assert read_effects(effects, "slow_finished") == []  # stopped inside the slow step
    assert read_effects(effects, "fast") == [str(thread.pk)]
    run.refresh_from_db()
    # The loser recorded nothing: the run is the thief's to finish.
    assert (run.status, run.lease_owner) == (Run.Status.RUNNING, "thief")


def test_a_lease_lost_before_a_graph_that_cannot_be_stopped_starts_gives_the_run_back(
    support_agent, effects, monkeypatch
):
    """Inside the test's transaction (as on SQLite) the graph runs through async_to_sync,
    where nothing can cancel it: a lease lost before it starts must keep it from starting."""
    from portal.runs import registry
    from portal.runs.worker import LEASE_LOST, RELEASE

    thread, run = threads.thread_start(agent="marker", input=say("hi"), user=support_agent)
    worker = Worker(name="late")
    compile_agent = registry.compile_agent

    def compiled_as_the_lease_is_lost(*args, **kwargs):
        graph = compile_agent(*args, **kwargs)
        worker._abandon(True)  # the heartbeat found the run taken over meanwhile
        return graph

    monkeypatch.setattr(registry, "compile_agent", compiled_as_the_lease_is_lost)
    outcome = worker.execute(worker.claim())

    assert (outcome.status, outcome.error) == (RELEASE, LEASE_LOST)
    assert read_effects(effects, "marker") == []
    assert not Checkpoint.objects.filter(thread=thread).exists()  # nothing of it was written
    run.refresh_from_db()
    # Given back (the lease was in fact still its own): claimable at once.
    assert (run.status, run.error) == (Run.Status.RUNNING, LEASE_LOST)
    assert run.lease_expires_at <= timezone.now()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_that_loses_touch_with_the_database_gives_the_run_back_not_fails_it(
    support_agent, effects, monkeypatch
):
    import threading
    import time

    from django.db import connections

    thread, run = threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    worker = Worker(name="hiccup", lease_seconds=0.6)  # heartbeat every 0.2 s
    claimed = worker.claim()
    unreachable = threading.Event()
    renew = queue._lease_until

    def lease_until(seconds: float):
        # Only the heartbeat's renewals fail, as when its own connection cannot be made.
        if unreachable.is_set() and threading.current_thread().name.startswith("heartbeat-"):
            raise ConnectionError("the database cannot be reached")
        return renew(seconds)

    monkeypatch.setattr(queue, "_lease_until", lease_until)
    runner = threading.Thread(target=lambda: (worker.execute(claimed), worker._close_loop()))
    runner.start()
    wait_for(lambda: read_effects(effects, "slow_started"), timeout=20, what="the slow tool")
    unreachable.set()
    time.sleep(1.2)  # two leases of failed renewals; nobody takes the run over
    unreachable.clear()
    (effects / "release").touch()
    runner.join(timeout=10)
    assert not runner.is_alive()
    connections.close_all()

    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.lease_owner == worker.lease_owner
    assert thread.status != Thread.Status.FAILED
    # Given back: the next worker takes it up from its last checkpoint.
    assert Worker(name="next").claim().pk == run.pk


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_busy_with_a_long_run_still_beats(support_agent, effects):
    """While a run executes, the worker's liveness is beaten with each renewal of its
    lease: a worker on a slow tool is busy, not dead, to the health check."""
    import time

    from django.db import connections

    from portal import loops
    from portal.models import WorkerHeartbeat

    threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    worker = Worker(name="busy", lease_seconds=0.6)  # a renewal every 0.2 s
    loops.beat(worker.name)
    before = WorkerHeartbeat.objects.get(name="busy").beat_at
    runner, _ = executing(worker, worker.claim())
    try:
        wait_for(lambda: read_effects(effects, "slow_started"), timeout=20, what="the slow tool")
        time.sleep(0.6)  # a few renewals while the tool still runs
        during = WorkerHeartbeat.objects.get(name="busy").beat_at
    finally:
        (effects / "release").touch()
        runner.join(timeout=10)
        connections.close_all()
    assert during > before


def test_leases_follow_the_databases_clock_not_a_workers(support_agent, monkeypatch):
    """A worker whose clock runs an hour ahead must not take over a live lease, and the
    lease it sets itself must not be an hour long."""
    run = held_by_a_live_worker(support_agent)
    ahead = timezone.now() + timedelta(hours=1)
    monkeypatch.setattr(queue.timezone, "now", lambda: ahead)
    assert Worker(name="clock-ahead").claim() is None

    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.localtime() - timedelta(1))
    claimed = Worker(name="clock-ahead", lease_seconds=30).claim()
    assert claimed is not None and claimed.pk == run.pk
    monkeypatch.undo()
    lease = Run.objects.get(pk=run.pk).lease_expires_at
    assert timedelta(seconds=20) < lease - timezone.now() < timedelta(seconds=40)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_mid_run_gives_the_run_back_and_it_finishes(support_agent, effects):
    """A database restart during a run is the worker's failure, not the run's: the run is
    released, taken up again and finished from its last checkpoint, not failed."""
    import threading

    from django.db import connection, connections

    thread, run = threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    worker = Worker(name="cut-mid-run")

    def drain_in_thread() -> None:
        try:
            worker.run_forever(once=True)
        finally:
            connections.close_all()

    runner = threading.Thread(target=drain_in_thread)
    runner.start()
    wait_for(lambda: read_effects(effects, "slow_started"), timeout=20, what="the slow tool")
    with connection.cursor() as cursor:  # the worker's connection dies mid-tool
        cursor.execute("SELECT pg_terminate_backend(%s)", [worker._pg.info.backend_pid])
    (effects / "release").touch()
    runner.join(timeout=30)
    assert not runner.is_alive()

    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, run.attempts) == (Run.Status.SUCCEEDED, 2), run.error
    assert thread.status == Thread.Status.DONE
    assert read_effects(effects, "fast") == [str(thread.pk)]  # saved before the cut: once
    assert len(read_effects(effects, "slow_started")) == 2  # in flight, idempotent: again


def test_a_taken_over_run_applies_nothing_if_its_earlier_attempt_finished_meanwhile(
    support_agent, monkeypatch, caplog
):
    """The earlier attempt (its lease lost, still running) finishes the turn between the
    new worker's look for its steps and its load: the input is not applied a second time.
    The run is given back, and its next claim finds the turn done."""
    from agents.checkpoint import CheckpointWrite, ThreadStatus

    thread, run = stalled_echo_run(support_agent)
    recover = queue.recover
    stalled = [True]

    def recover_then_the_stalled_attempt_finishes(claimed):
        recovered = recover(claimed)
        if stalled:
            stalled.clear()
            user, reply = say("hi")["messages"][0], {"role": "assistant", "content": "hi"}
            turn = [
                CheckpointWrite(ThreadStatus.RUNNING, "MAIN", new_messages=[user]),
                CheckpointWrite(ThreadStatus.DONE, None, new_messages=[reply], node="MAIN"),
            ]
            DjangoCheckpointer(run=claimed).put_steps_sync(str(thread.pk), turn, parent_seq=None)
        return recovered

    monkeypatch.setattr(queue, "recover", recover_then_the_stalled_attempt_finishes)

    assert drain() == 2  # given back once, then claimed again

    run.refresh_from_db()
    assert (run.status, run.attempts) == (Run.Status.SUCCEEDED, 3)
    assert "the thread moved on under it" in caplog.text
    assert Thread.objects.get(pk=thread.pk).last_seq == 2  # the turn once, not twice


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_taken_over_as_its_earlier_attempt_writes_its_first_step_finishes_the_turn(
    support_agent, monkeypatch
):
    """The stalled attempt writes the input just after the new worker read the thread's
    row: the new worker continues from that step (it does not take the thread for new
    and find nothing to do), and the turn ends once."""
    from agents.checkpoint import CheckpointWrite, ThreadStatus

    thread, run = stalled_echo_run(support_agent)
    recover = queue.recover

    def the_stalled_attempt_writes_first(claimed):
        if not Checkpoint.objects.filter(run=claimed).exists():
            step = CheckpointWrite(
                ThreadStatus.RUNNING, "MAIN", new_messages=[say("hi")["messages"][0]]
            )
            DjangoCheckpointer(run=claimed).put_sync(str(thread.pk), step, parent_seq=None)
        return recover(claimed)

    monkeypatch.setattr(queue, "recover", the_stalled_attempt_writes_first)
    worker = Worker(name="takes-over")
    try:
        assert worker.run_forever(once=True) >= 1
    finally:
        worker._close_loop()

    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, thread.status) == (Run.Status.SUCCEEDED, Thread.Status.DONE)
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    assert snapshot is not None and [m["role"] for m in snapshot.messages] == ["user", "assistant"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_claim_is_one_statement_that_also_marks_the_thread_running(
    support_agent,
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    older, _ = threads.thread_start(agent="approve", input=say("pay 1"), user=support_agent)
    threads.thread_start(agent="approve", input=say("pay 2"), user=support_agent)
    worker = Worker(name="one-trip")

    with CaptureQueriesContext(connection) as queries:
        run = worker.claim()

    assert len(queries) == 1, [q["sql"][:80] for q in queries.captured_queries]
    assert run is not None and run.thread_id == older.pk  # the oldest queued first
    assert (run.status, run.attempts, run.lease_owner) == (
        Run.Status.RUNNING,
        1,
        worker.lease_owner,
    )
    assert run.lease_expires_at is not None and run.started_at is not None
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.attempts, stored.lease_owner) == (
        Run.Status.RUNNING,
        1,
        worker.lease_owner,
    )
    assert Thread.objects.get(pk=older.pk).status == Thread.Status.RUNNING


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_that_did_not_fail_is_finished_and_settled_in_one_statement(support_agent):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.runs.worker import Outcome

    thread, run = threads.thread_start(agent="approve", input=say("pay 5"), user=support_agent)
    worker = Worker(name="one-statement")
    try:
        claimed = worker.claim()
        with CaptureQueriesContext(connection) as queries:
            worker._finish(claimed, Outcome(Run.Status.SUCCEEDED))
    finally:
        worker._close_loop()
    assert len(queries) == 1
    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, run.lease_expires_at, thread.status) == ("succeeded", None, "idle")
    # Not the lease holder any more: nothing is recorded.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_owner="other")
    worker._finish(claimed, Outcome(Run.Status.INTERRUPTED))
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("watched", [False, True])
def test_a_worker_renders_and_sends_live_updates_only_when_someone_watches(
    support_agent, monkeypatch, watched
):
    """Nobody subscribed: no chunk, status or queue change is rendered or sent."""
    from portal.notify import broadcast
    from portal.web import live

    sent, rendered = [], []

    async def record(group, message):
        sent.append((group, message["type"]))

    def render(interrupt_id, **kwargs):
        rendered.append(interrupt_id)
        return [], ""

    monkeypatch.setattr(broadcast, "listening", lambda *groups: [watched for _ in groups])
    monkeypatch.setattr(broadcast, "agroup_send", record)
    monkeypatch.setattr(
        broadcast, "group_send", lambda group, message: sent.append((group, message["type"]))
    )
    monkeypatch.setattr(live, "render_interrupt_change", render)
    thread, _ = threads.thread_start(agent="approve", input=say("pay 7"), user=support_agent)
    worker = Worker(name="watched")
    try:
        assert worker.execute(worker.claim()).status == Run.Status.INTERRUPTED
    finally:
        worker._close_loop()
    if not watched:
        assert (sent, rendered) == ([], [])
        return
    kinds = {kind for _, kind in sent}
    assert {broadcast.THREAD_STATUS} <= kinds and (
        broadcast.THREAD_CHUNK in kinds or broadcast.THREAD_HTML in kinds
    )
    assert rendered == [Interrupt.objects.get(thread=thread).pk]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_run_costs_its_claim_and_its_finish_on_djangos_connection(support_agent):
    """The run's steps go through the worker's own connection; the thread the run needs
    comes with the claim, so Django's connection sees the claim and the finish alone."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    thread, _ = threads.thread_start(agent="approve", input=say("pay 4"), user=support_agent)
    worker = Worker(name="two-statements")
    try:
        worker._native_connection()  # opened once for the worker's life, not per run
        with CaptureQueriesContext(connection) as queries:
            outcome = worker.execute(worker.claim())
    finally:
        worker._close_loop()
    assert outcome.status == Run.Status.INTERRUPTED
    assert len(queries) == 2, [q["sql"][:80] for q in queries.captured_queries]
    thread.refresh_from_db()
    assert thread.status == Thread.Status.INTERRUPTED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status", [Run.Status.SUCCEEDED, Run.Status.FAILED])
def test_a_run_finishing_while_its_thread_is_cancelled_does_not_deadlock(
    support_agent, monkeypatch, status
):
    import threading
    import time

    from django.db import connection, connections

    from portal.runs.worker import Outcome

    thread, run = threads.thread_start(agent="echo", input=say("hi"), user=support_agent)
    worker = Worker(name="finisher")
    claimed = worker.claim()
    assert claimed is not None
    results: dict[str, str] = {}

    def finish() -> None:
        try:
            worker._finish(claimed, Outcome(status, "boom" if status == Run.Status.FAILED else ""))
            results["finish"] = "ok"
        except Exception as exc:
            results["finish"] = f"{type(exc).__name__}: {exc}"
        finally:
            connections.close_all()

    def waiting_on_a_lock() -> int:
        with connection.cursor() as cursor:
            # Read inside the cancellation's transaction, where the server keeps the list of
            # sessions from its first read of pg_stat_activity: a session that connects
            # later (the finisher's, when it opens a new one) would never be seen.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return int(cursor.fetchone()[0])

    finisher = threading.Thread(target=finish)
    interrupts = threads.Interrupt

    looks: list[int] = []

    class FinishMeanwhile:
        """The cancellation's second look at the thread's requests: it holds the run's and
        the thread's row locks by then, and the worker finishes the run meanwhile, until
        it waits for a lock."""

        Status = interrupts.Status

        @property
        def objects(self):
            looks.append(1)
            if len(looks) == 2:
                finisher.start()
                deadline = time.monotonic() + 10
                while not waiting_on_a_lock() and time.monotonic() < deadline:
                    time.sleep(0.02)
            return interrupts.objects

    monkeypatch.setattr(threads, "Interrupt", FinishMeanwhile())
    threads.thread_cancel(thread=thread, user=support_agent)
    finisher.join(timeout=20)

    assert results == {"finish": "ok"}
    run.refresh_from_db()
    thread.refresh_from_db()
    assert (run.status, thread.status) == (Run.Status.CANCELLED, Thread.Status.CANCELLED)


@pytest.mark.parametrize("history", [10, 100])
def test_a_run_reads_its_threads_history_once_however_long(support_agent, monkeypatch, history):
    earlier = [{"role": "user", "content": f"hi {n}"} for n in range(history)]
    thread, _ = threads.thread_start(
        agent="approve", input={"messages": earlier}, user=support_agent
    )
    drain()
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE, thread.status
    threads.thread_message(thread=thread, text="pay 42", user=support_agent)
    reads = []
    for name in ("get_sync", "_snapshot"):
        original = getattr(DjangoCheckpointer, name)

        def counted(self, *args, _original=original, _name=name):
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(DjangoCheckpointer, name, counted)

    assert drain() == 1

    # One read on either path (get_sync reads through _snapshot on PostgreSQL).
    assert reads in (["get_sync"], ["_snapshot"], ["get_sync", "_snapshot"])
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.INTERRUPTED
