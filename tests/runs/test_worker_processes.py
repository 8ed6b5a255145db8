"""Durable threads across real processes: restarts, kill -9, many workers, wake-up latency.

Every worker here is a separate ``manage.py run_worker`` process on the test database; the
test process only queues work and reads the database and the side-effect files the test
agents write (see testagents.py).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from portal.models import Checkpoint, Decision, Interrupt, Run, Thread
from portal.reviews import threads
from portal.runs import sql
from tests.processes import output, wait_for
from tests.testagents import read_effects

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("test_agents")]


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    proc.wait(timeout=timeout)
    text = output(proc)
    assert proc.returncode == 0, text
    return text


def run_status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


DECIDE_IN_A_NEW_PROCESS = """
from django.contrib.auth import get_user_model
from portal.reviews.decisions import decision_submit
from portal.models import Interrupt
pending = list(Interrupt.objects.filter(status="pending").order_by("created_at"))
print("PENDING", " ".join(i.pk for i in pending))
reviewer = get_user_model().objects.get(username="rita-reviewer")
decision_submit(interrupt=pending[0], reviewer=reviewer, value={"approved": True},
                resume_interrupt_id=pending[0].pk, note="looks right")
print("DECIDED", pending[0].pk)
"""


def test_a_thread_paused_by_one_process_is_resumed_by_a_brand_new_one(
    spawn, support_agent, reviewer, effects
):
    thread, run = threads.thread_start(agent="approve", input=say("pay 42"), user=support_agent)

    # Process 1 runs the thread until the tool asks for approval, then exits.
    finish(spawn("run_worker", "--once", "--id", "first"))
    assert run_status(run) == Run.Status.INTERRUPTED
    request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)

    # Process 2 lists the queue and decides; process 3 (a new worker) resumes.
    listed = finish(spawn("shell", "-c", DECIDE_IN_A_NEW_PROCESS))
    assert f"PENDING {request.pk}" in listed
    assert f"DECIDED {request.pk}" in listed
    finish(spawn("run_worker", "--once", "--id", "second"))

    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    resume = Run.objects.get(thread=thread, kind=Run.Kind.RESUME)
    assert (resume.status, resume.lease_owner.split("/")[0]) == (Run.Status.SUCCEEDED, "second")
    assert Decision.objects.get(interrupt=request).outcome == Decision.Outcome.APPROVED
    assert read_effects(effects, "pay") == [f"{thread.pk} 42.0"]


def test_a_worker_killed_inside_a_slow_tool_is_finished_by_another_after_its_lease(
    spawn, support_agent, effects
):
    """The turn calls ``fast_step`` then ``slow_step``; the worker is killed (SIGKILL)
    while ``slow_step`` waits. A second worker claims the run once the lease (1 s) has
    expired and continues from the last checkpoint.

    ``fast_step`` runs exactly once: its result was checkpointed as soon as it finished,
    so the ToolNode skips it on the re-run. ``slow_step`` was in flight when the process
    died and nothing recorded its result; it is declared idempotent, so it runs again
    (with the same idempotency key). A tool that is not idempotent would become a request
    to a reviewer instead (test_effects_processes.py).
    """
    thread, run = threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    lease = {"PORTAL_RUN_LEASE_SECONDS": "1"}
    doomed = spawn("run_worker", "--id", "doomed", "--poll", "0.1", **lease)
    wait_for(lambda: read_effects(effects, "slow_started"), timeout=30, what="the slow tool")
    doomed.kill()
    doomed.wait(timeout=10)
    assert run_status(run) == Run.Status.RUNNING  # nobody recorded an outcome
    (effects / "release").touch()

    rescuer = spawn("run_worker", "--id", "rescuer", "--poll", "0.1", **lease)
    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, timeout=30, what="the rescue")
    rescuer.terminate()
    finish(rescuer)

    run.refresh_from_db()
    assert (run.attempts, run.lease_owner.split("/")[0]) == (2, "rescuer")
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE
    assert read_effects(effects, "fast") == [str(thread.pk)]
    assert read_effects(effects, "slow_started") == [str(thread.pk)] * 2
    assert read_effects(effects, "slow_finished") == [str(thread.pk)]


@pytest.mark.postgres
def test_four_workers_execute_five_hundred_runs_each_exactly_once(spawn, effects):
    owner = get_user_model().objects.create_user("load-owner")
    threads = Thread.objects.bulk_create(
        Thread(agent="marker", owner=owner, title=f"load {n}") for n in range(500)
    )
    Run.objects.bulk_create(
        Run(thread=t, kind=Run.Kind.START, input=say(f"mark {n}")) for n, t in enumerate(threads)
    )

    workers = [spawn("run_worker", "--once", "--id", f"w{n}") for n in range(4)]
    for proc in workers:
        finish(proc, timeout=300)

    marks = Counter(read_effects(effects, "marker"))
    assert len(marks) == 500
    assert set(marks.values()) == {1}
    assert set(marks) == {str(t.pk) for t in threads}
    runs = Run.objects.all()
    assert {(r.status, r.attempts) for r in runs} == {(Run.Status.SUCCEEDED, 1)}
    # They really shared the work (SKIP LOCKED), rather than queueing behind one another.
    assert len({r.lease_owner for r in runs}) >= 2


@pytest.mark.postgres
def test_an_idle_worker_starts_a_queued_run_within_fifty_milliseconds_at_the_median(
    spawn, support_agent
):
    worker = spawn("run_worker", "--id", "listener")
    # Warm up: the first run also imports the agent.
    _, first = threads.thread_start(agent="echo", input=say("warm up"), user=support_agent)
    wait_for(lambda: run_status(first) == Run.Status.SUCCEEDED, timeout=30, what="warm-up")

    delays = []
    for n in range(15):
        time.sleep(0.05)  # let the worker go idle again (LISTEN)
        _, run = threads.thread_start(agent="echo", input=say(f"hi {n}"), user=support_agent)
        wait_for(lambda run=run: run_status(run) == Run.Status.SUCCEEDED, timeout=10)
        delays.append((run.started_at - run.created_at).total_seconds())
    worker.terminate()
    finish(worker)

    median = statistics.median(delays)
    print(f"queued -> started: median {median * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms")
    assert median < 0.050, delays


def _turn() -> dict[str, list[str]]:
    """Which workers (by application name) hold the idle workers' turn to listen, and
    which wait for it, in this test's database."""
    key = sql.TURN_KEY
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name, l.granted FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [key >> 32, key & 0xFFFFFFFF],
        )
        rows = cursor.fetchall()
    return {
        "holds": sorted(name for name, granted in rows if granted),
        "waits": sorted(name for name, granted in rows if not granted),
    }


@pytest.mark.postgres
def test_one_idle_worker_listens_at_a_time_and_the_turn_passes_on_even_through_kill_9(
    spawn, support_agent
):
    # A poll of a minute: every run below is started by a wake-up, not by a poll.
    workers = {
        f"turn-{n}": spawn("run_worker", "--id", f"turn-{n}", "--poll", "60", PGAPPNAME=f"turn-{n}")
        for n in range(3)
    }
    wait_for(lambda: len(_turn()["waits"]) == 2, timeout=30, what="two workers waiting")
    assert len(_turn()["holds"]) == 1

    # One at a time: each run is claimed by the one listening, who passes the turn on.
    delays = []
    for n in range(6):
        _, run = threads.thread_start(agent="echo", input=say(f"one {n}"), user=support_agent)
        wait_for(lambda run=run: run_status(run) == Run.Status.SUCCEEDED, timeout=10)
        delays.append((run.started_at - run.created_at).total_seconds())
        wait_for(lambda: len(_turn()["waits"]) == 2, timeout=10, what="idle again")
    assert statistics.median(delays) < 0.050, delays

    # A burst in one transaction (one NOTIFY): the turn passes from each worker that
    # claims one to the next, and the workers that finish claim what is left.
    with transaction.atomic():
        burst = [
            threads.thread_start(agent="echo", input=say(f"burst {n}"), user=support_agent)[1]
            for n in range(8)
        ]
    wait_for(
        lambda: all(run_status(run) == Run.Status.SUCCEEDED for run in burst),
        timeout=15,
        what="the burst, well within a poll",
    )

    # The one holding the turn is killed: its session ends, and the turn with it.
    wait_for(lambda: len(_turn()["waits"]) == 2, timeout=10, what="idle again")
    [holder] = _turn()["holds"]
    workers[holder].kill()
    workers[holder].wait(timeout=10)
    wait_for(lambda: len(_turn()["holds"]) == 1, timeout=10, what="the turn taken over")
    assert holder not in _turn()["holds"] + _turn()["waits"]
    _, run = threads.thread_start(agent="echo", input=say("after kill -9"), user=support_agent)
    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, timeout=10)
    assert (run.started_at - run.created_at).total_seconds() < 1.0


@pytest.mark.postgres
def test_a_run_queued_while_the_listening_worker_executes_is_started_by_another_at_once(
    spawn, support_agent, effects
):
    # The worker holding the turn keeps it while it executes; a wake-up meanwhile must
    # pass it on, or the second run would wait for the first (or for a poll of a minute).
    for n in range(2):
        spawn("run_worker", "--id", f"busy-{n}", "--poll", "60", PGAPPNAME=f"busy-{n}")
    wait_for(lambda: len(_turn()["waits"]) == 1, timeout=30, what="one worker waiting")
    [holder] = _turn()["holds"]
    _, slow = threads.thread_start(agent="crash", input=say("crash"), user=support_agent)
    wait_for(lambda: read_effects(effects, "slow_started"), timeout=30, what="the slow tool")
    slow.refresh_from_db()
    assert slow.lease_owner.startswith(holder)  # the listening worker took it, and holds on

    _, quick = threads.thread_start(agent="echo", input=say("meanwhile"), user=support_agent)
    wait_for(lambda: run_status(quick) == Run.Status.SUCCEEDED, timeout=10)
    assert (quick.started_at - quick.created_at).total_seconds() < 1.0
    assert run_status(slow) == Run.Status.RUNNING  # still waiting for its release
    (effects / "release").write_text("")
    wait_for(lambda: run_status(slow) == Run.Status.SUCCEEDED, timeout=30)


PREPARED_IN_A_WORKER = """
from django.db import connection
from portal import loops
from portal.runs.worker import Worker
loops.keep_connections()
Worker(name="preparing").run_forever(once=True)
with connection.cursor() as cursor:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    for (statement,) in cursor.fetchall():
        print("PREPARED", " ".join(statement.split())[:30])
"""


@pytest.mark.postgres
def test_a_worker_plans_its_claim_and_finish_once_not_on_each_run(spawn, support_agent):
    for n in range(8):
        threads.thread_start(agent="echo", input=say(f"run {n}"), user=support_agent)
    text = finish(spawn("shell", "-c", PREPARED_IN_A_WORKER))
    assert Run.objects.filter(status=Run.Status.SUCCEEDED).count() == 8
    prepared = [line.removeprefix("PREPARED ").strip() for line in text.splitlines()]
    assert "WITH expired AS ( SELECT r.id" in prepared, text
    assert "WITH finished AS ( UPDATE port" in prepared, text


def _prepared_worker(spawn, support_agent, name: str) -> subprocess.Popen:
    """A ``run_worker`` that has run enough runs for every statement of one to be prepared
    (psycopg prepares what a connection runs five times)."""
    worker = spawn("run_worker", "--id", name)
    for n in range(8):
        _, run = threads.thread_start(agent="echo", input=say(f"before {n}"), user=support_agent)
        wait_for(lambda run=run: run_status(run) == Run.Status.SUCCEEDED, timeout=30)
    return worker


# Columns a migration adds to the tables a worker's repeated statements read, while the
# workers of the release before keep running.
_ADDED = ("portal_run", "portal_thread", "portal_checkpoint")


@pytest.mark.postgres
def test_a_column_migrated_in_under_a_running_worker_leaves_its_prepared_statements_working(
    spawn, support_agent
):
    # A worker's statements are prepared once they repeat. One that returned a table's
    # every column would fail on each claim after such a migration ("cached plan must not
    # change result type"), until the connection was replaced.
    worker = _prepared_worker(spawn, support_agent, "migrated-under")
    try:
        with connection.cursor() as cursor:
            for table in _ADDED:
                cursor.execute(f"ALTER TABLE {table} ADD COLUMN added_by_a_migration integer")
        _, after = threads.thread_start(agent="echo", input=say("after"), user=support_agent)
        wait_for(
            lambda: run_status(after) == Run.Status.SUCCEEDED,
            timeout=10,
            what="the run queued after the migration",
        )
        worker.terminate()
        text = finish(worker)
        assert "cached plan" not in text, text
    finally:
        worker.kill()
        with connection.cursor() as cursor:
            for table in _ADDED:
                cursor.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS added_by_a_migration")


@pytest.mark.postgres
def test_a_column_type_migrated_under_a_running_worker_costs_it_one_failed_claim(
    spawn, support_agent, retyped
):
    # A column a prepared claim returns changes type ("cached plan must not change result
    # type" on every later run of it in that session): the worker's connection, once it
    # saw the error, is replaced, and the next claim is planned anew.
    worker = _prepared_worker(spawn, support_agent, "retyped-under")
    try:
        retyped(Run, "lease_owner")
        _, after = threads.thread_start(agent="echo", input=say("after"), user=support_agent)
        wait_for(
            lambda: run_status(after) == Run.Status.SUCCEEDED,
            timeout=10,
            what="the run queued after the migration",
        )
        worker.terminate()
        text = finish(worker)
        assert text.count("cached plan must not change result type") <= 2, text  # one claim
    finally:
        worker.kill()


@pytest.mark.postgres
def test_a_checkpoint_column_retyped_under_a_running_worker_gives_its_run_back_not_failed(
    spawn, support_agent, retyped
):
    # The checkpoints go through the worker's own async connection, whose statements are
    # prepared too: the run whose step meets the stale plan is given back, the connection
    # replaced, and the run finished on the next claim.
    worker = _prepared_worker(spawn, support_agent, "retyped-checkpoints")
    try:
        retyped(Checkpoint, "status")
        _, after = threads.thread_start(agent="echo", input=say("after"), user=support_agent)
        wait_for(
            lambda: run_status(after) in (Run.Status.SUCCEEDED, Run.Status.FAILED),
            timeout=15,
            what="the run queued after the migration",
        )
        after.refresh_from_db()
        assert (after.status, after.error) == (Run.Status.SUCCEEDED, ""), after.error
    finally:
        worker.kill()
