"""The worker: drains the durable run queue and executes agents (nothing else does).

Modelled on healthchecks' ``sendalerts``: a loop that claims one row at a time with a row
lock, does the work outside the claiming transaction, and calls ``close_old_connections()``
between iterations so a long-lived process survives database restarts.

Claiming. A run is claimable when it is ``queued`` (and is the oldest unfinished run of a
thread with nothing else running), or ``running`` with an expired lease (its worker died).
On PostgreSQL the claim is one statement (one round trip): the candidate and its thread
row are locked ``FOR UPDATE SKIP LOCKED`` so concurrent workers take different rows and
two runs of one thread never execute at once, and are marked running. On SQLite the
claiming transaction is ``BEGIN IMMEDIATE`` (see settings), which serialises writers, and
the claim itself is a conditional UPDATE.

Leases. A claimed run carries ``lease_owner`` and ``lease_expires_at``; a heartbeat thread
renews the lease every third of ``PORTAL_RUN_LEASE_SECONDS`` while the graph runs. Leases
are set and compared with the database's clock, never a worker's. Each claim counts an
attempt; a run claimed more than ``PORTAL_RUN_MAX_ATTEMPTS`` times fails. A worker whose
heartbeat finds the lease gone (another worker took the run over) stops its graph at the
next await, so it takes no further step on a run that is no longer its own. A sync tool
in a thread (or a graph under ``async_to_sync``) cannot be stopped that way, so
``run_worker`` exits instead (``EXIT_FENCED``): a call of the stale worker must not act
while the one that took over asks about it or runs it again. A worker whose own database
connection dies mid-run releases the run (its lease ends at once) rather than failing it:
the failure is the worker's, and the run continues elsewhere.

Crash recovery. A re-claimed run continues from the thread's last checkpoint: if an
earlier attempt already wrote a checkpoint (``Checkpoint.run``) its input was applied, so
it continues with ``{"messages": []}``; if that attempt already reached a pause or the end,
the run is just marked so. If it wrote none (its input goes with its first step), the input
is applied again, on top of the checkpoint the thread had when that was decided
(``expected_seq``): should the earlier attempt, its lease lost but not yet stopped, write
in between, nothing is applied and the run is given back, to be recovered again. Tool
calls that completed are in the checkpoint, so the runtime's ToolNode does not call them
again. A call the checkpoint records as in flight (started, no result saved) may have
acted: an idempotent tool runs again with the same idempotency key; any other becomes a
request to a reviewer (confirm, retry or fail), and the run ends paused on it.

Waking up. Services call ``portal.runs.queue.notify_workers()`` in their transaction: on
PostgreSQL a ``NOTIFY portal_runs`` (delivered at commit, dropped on rollback) that idle
workers ``LISTEN`` for; in-process, ``portal.runs.queue.wake`` set on commit. A short poll covers
lost wake-ups and expired leases.

Executing. On PostgreSQL a worker keeps one event loop and one autocommit async connection
for its life, and the checkpointer writes each step through that connection in one
statement (``portal.runs.checkpointer``); a run that did not fail is finished, and its thread
settled, in one more. Live updates (chunks, the thread's status, queue changes) are
rendered and sent only while someone subscribes. When the caller holds a transaction (a
test driving the loop inside its own), or on SQLite, the graph runs through
``async_to_sync`` and the checkpointer uses this thread's Django connection instead.

Run it: ``python manage.py run_worker [--once] [--id NAME] [--poll SECONDS]``; the demo
runs the same loop in a daemon thread (``start_embedded_worker``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from agents.checkpoint import CheckpointConflict
from portal import loops
from portal.models import Checkpoint, Interrupt, Run, Thread, WorkerHeartbeat, waiting
from portal.notify import broadcast, outbox
from portal.reviews.expiry import interrupts_expire
from portal.runs.checkpointer import ThreadCancelled
from portal.runs.queue import NOTIFY_CHANNEL, wake

log = logging.getLogger(__name__)

# How often an idle worker looks for requests whose expires_at has passed.
EXPIRY_CHECK_SECONDS = 5.0
# A worker's loop records that it is alive (loops.Heartbeat); while a run holds the loop,
# the run's lease heartbeat records it instead.
beat = loops.beat
# Seconds between polls when no wake-up arrives: PostgreSQL workers are woken by NOTIFY,
# so their poll only has to notice expired leases; SQLite workers in other processes
# have nothing but the poll.
POLL_WITH_NOTIFY = 1.0
POLL_WITHOUT_NOTIFY = 0.2
# Seconds a run's chunks go unpublished after the channel layer said nobody watches its
# thread, before it is asked again.
HEARD_SECONDS = 0.5
# An outcome that is not the run's: the worker lost its database connection mid-run and
# gives the run back (its lease ends now; a worker continues it from its last checkpoint).
RELEASE = "release"
# Given back (RELEASE) rather than failed: the heartbeat may only have lost touch with
# the database, and then the run is still this worker's to give back.
LEASE_LOST = (
    "stopped: this worker could not renew its lease, so another worker may have taken the "
    "run over; the run goes on from its last checkpoint"
)


# run_worker's exit status when the run it was executing may be another worker's now
# (sysexits' EX_TEMPFAIL: a supervisor starts it again).
EXIT_FENCED = 75


def _refresh_connections() -> None:
    # Between runs, drop connections that broke or outlived CONN_MAX_AGE (as sendalerts
    # does). Not inside an atomic block: a test running the loop in its transaction
    # would lose that transaction.
    if not connection.in_atomic_block:
        close_old_connections()


def _using_postgres() -> bool:
    return connection.vendor == "postgresql"


def _lease_until(seconds: float) -> Any:
    """The database's now() plus ``seconds``. Leases are set and compared on that one
    clock: on each worker's own, a worker whose clock ran ahead would take over runs
    whose workers are alive."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


# The PostgreSQL claim (Worker._claim_one_statement). An expired lease first, then the
# oldest queued run of a thread with nothing earlier unfinished and nothing running; the
# queued branch is only read when no expired lease is found.
_CLAIM_SQL = """
WITH expired AS (
    SELECT r.id FROM {run} r JOIN {thread} t ON t.id = r.thread_id
    WHERE r.status = 'running' AND r.lease_expires_at < statement_timestamp()
    ORDER BY r.lease_expires_at
    LIMIT 1
    FOR UPDATE OF r, t SKIP LOCKED
), queued AS (
    SELECT r.id FROM {run} r JOIN {thread} t ON t.id = r.thread_id
    WHERE r.status = 'queued'
      AND NOT EXISTS (
        SELECT 1 FROM {run} e WHERE e.thread_id = r.thread_id
        AND e.status IN ('queued', 'running') AND e.created_at < r.created_at)
      AND NOT EXISTS (
        SELECT 1 FROM {run} b WHERE b.thread_id = r.thread_id AND b.status = 'running')
    ORDER BY r.created_at
    LIMIT 1
    FOR UPDATE OF r, t SKIP LOCKED
), picked AS (
    (SELECT id FROM expired) UNION ALL (SELECT id FROM queued) LIMIT 1
), claimed AS (
    UPDATE {run} r SET
        status = 'running',
        attempts = r.attempts + 1,
        lease_owner = %(owner)s,
        lease_expires_at = statement_timestamp() + %(lease)s * interval '1 second',
        started_at = coalesce(r.started_at, statement_timestamp())
    FROM picked WHERE r.id = picked.id
    RETURNING r.*
), busy AS (
    UPDATE {thread} t SET status = 'running', updated_at = statement_timestamp()
    FROM claimed WHERE t.id = claimed.thread_id AND t.cancelled_at IS NULL
)
SELECT claimed.*, {thread_columns} FROM claimed JOIN {thread} t ON t.id = claimed.thread_id
"""
# What a run needs of its thread (Worker._execute), read by the claim as of its snapshot
# (the thread row is locked by it): the run starts from these, as from a read just after.
_THREAD_FIELDS = ("id", "agent", "owner_id", "last_seq", "cancelled_at")


# A run's outcome, when it did not fail, and its thread's status (Worker._settle_thread's
# rule), in one statement: the run is recorded only by its lease holder, and the thread,
# unless cancelled, follows its newest checkpoint. Returns the thread's status, or no row
# when the run was not this worker's any more. The NOTIFY is sent at commit.
_FINISH_SQL = """
WITH finished AS (
    UPDATE {run} SET status = %(status)s, error = %(error)s, finished_at = %(now)s,
        lease_expires_at = NULL
    WHERE id = %(run)s AND lease_owner = %(owner)s AND status = 'running'
    RETURNING thread_id
), settled AS (
    SELECT finished.thread_id, CASE (
        SELECT c.status FROM {checkpoint} c WHERE c.thread_id = finished.thread_id
        ORDER BY c.seq DESC LIMIT 1
    ) WHEN 'interrupted' THEN 'interrupted' WHEN 'done' THEN 'done' ELSE 'idle' END AS status
    FROM finished
), moved AS (
    UPDATE {thread} t SET status = settled.status, updated_at = %(now)s
    FROM settled WHERE t.id = settled.thread_id AND t.cancelled_at IS NULL
)
SELECT settled.status, pg_notify(%(channel)s, %(key)s) FROM settled
"""


@dataclass(frozen=True)
class Outcome:
    status: str  # a Run.Status value
    error: str = ""


class _Heartbeat(threading.Thread):
    """Renews a run's lease until stopped. Its own thread (and database connection), so
    it keeps beating even while a tool blocks the event loop."""

    def __init__(
        self,
        run_id: Any,
        owner: str,
        lease: float,
        *,
        worker: str,
        on_lost: Callable[[bool], None] | None = None,
    ) -> None:
        super().__init__(name=f"heartbeat-{run_id}", daemon=True)
        self.run_id, self.owner, self.lease = run_id, owner, lease
        self.worker = worker  # its heartbeat row's name
        self.on_lost = on_lost
        self.halt = threading.Event()
        self.lost = False

    def run(self) -> None:
        renewed_at = time.monotonic()
        try:
            while not self.halt.wait(max(self.lease / 3, 0.2)):
                reached = True
                try:
                    renewed = Run.objects.filter(
                        pk=self.run_id, lease_owner=self.owner, status=Run.Status.RUNNING
                    ).update(lease_expires_at=_lease_until(self.lease))
                except Exception:
                    # A database hiccup: try again next beat, with a fresh connection. Once
                    # the lease may have run out, another worker may own the run: stop.
                    log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)
                    connection.close()
                    if time.monotonic() - renewed_at < self.lease:
                        continue
                    renewed, reached = 0, False
                if renewed:
                    self._beat_worker()
                if not renewed:
                    self.lost = True
                    # (Not read from a database out of reach: it could take long.)
                    taken = not reached or self._taken_over()
                    if taken:
                        log.warning("run %s: lease lost; another worker may hold it", self.run_id)
                    else:
                        log.warning(
                            "run %s: lease ended: the run was cancelled or deleted", self.run_id
                        )
                    if self.on_lost is not None:
                        self.on_lost(taken)
                    return
                renewed_at = time.monotonic()
        finally:
            connection.close()

    def _taken_over(self) -> bool:
        """Whether another worker may hold the run now (and may have finished it): always,
        but for a run that is gone, or still ours and cancelled (its thread was), which
        nobody takes over. True when that cannot be read."""
        try:
            row = Run.objects.filter(pk=self.run_id).values_list("lease_owner", "status").first()
        except Exception:
            return True
        return row is not None and row != (self.owner, Run.Status.CANCELLED)

    def _beat_worker(self) -> None:
        # The worker's loop is busy with this run: its liveness is beaten from here.
        try:
            WorkerHeartbeat.objects.filter(name=self.worker).update(beat_at=Now())
        except Exception:
            log.warning("run %s: recording the worker's heartbeat failed", self.run_id)

    def stop(self) -> None:
        self.halt.set()
        self.join()


class Worker:
    """One claim-execute loop. ``name`` names it in logs and heartbeats (host:pid:random
    by default); its leases carry the name and a token of its own."""

    def __init__(
        self,
        *,
        name: str | None = None,
        poll: float | None = None,
        lease_seconds: float | None = None,
        max_attempts: int | None = None,
        exit_when_fenced: bool = False,
    ) -> None:
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # What its leases carry: the name and a token of this worker alone, so that two
        # workers given one name (one --id in a deployment's template) never renew,
        # finish or give back each other's runs.
        self.lease_owner = f"{self.name}/{uuid.uuid4().hex[:8]}"
        room = (Run._meta.get_field("lease_owner").max_length or 0) - len(self.lease_owner)
        if room < 0:
            raise ValueError(
                f"a worker's name may have at most {len(self.name) + room} characters; "
                f"{self.name[:20]!r}... has {len(self.name)}"
            )
        self.poll = poll
        self.lease = float(lease_seconds or settings.PORTAL_RUN_LEASE_SECONDS)
        self.max_attempts = int(max_attempts or settings.PORTAL_RUN_MAX_ATTEMPTS)
        self.stopping = threading.Event()
        self._listener: Any = None
        self._last_expiry = -EXPIRY_CHECK_SECONDS
        self._heartbeat = loops.Heartbeat(self.name, kind=WorkerHeartbeat.Kind.WORKER)
        # One event loop for the worker's life (a loop per run costs a thread and a new
        # channel-layer connection each time), and on PostgreSQL one async connection the
        # checkpointer writes through without hopping threads.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pg: Any = None
        self._running: asyncio.Task[bool] | None = None  # the graph now executing
        # Exit the process when another worker takes a run over (run_worker); elsewhere
        # (the embedded worker, tests) the run is only cancelled.
        self.exit_when_fenced = exit_when_fenced
        self._lease_lost = False  # set by the heartbeat (another thread)

    # -- the loop ----------------------------------------------------------------------

    def run_forever(self, *, once: bool = False) -> int:
        """Claim and execute runs until stopped; with ``once``, until none is claimable.
        Returns how many runs it executed."""
        done = 0
        log.info("worker %s started", self.name)
        try:
            while not self.stopping.is_set():
                _refresh_connections()
                wake.clear()
                self._heartbeat.maybe_beat()
                self._expire_due()
                try:
                    run = self.claim()
                except Exception:
                    if once:
                        raise
                    # A database hiccup must not end the loop: wait and try again.
                    log.exception("worker %s: claiming failed", self.name)
                    self._sleep(1.0)
                    continue
                if run is not None:
                    try:
                        self.execute(run)
                    except Exception:
                        if once:
                            raise
                        # Recording the outcome failed (the database went away): the
                        # lease runs out and the run is taken up again; this loop goes on.
                        log.exception("worker %s: finishing run %s failed", self.name, run.pk)
                        self._sleep(1.0)
                    done += 1
                    continue
                if once:
                    break
                self._wait()
        finally:
            self._close_listener()
            self._close_loop()
            self._heartbeat.forget()
            _refresh_connections()
        log.info("worker %s stopped after %d runs", self.name, done)
        return done

    def stop(self) -> None:
        self.stopping.set()
        wake.set()

    def _expire_due(self) -> None:
        # Overdue requests are declined here, so expiry needs no cron job; several
        # workers may try at once, and the service's row locks let exactly one win.
        now = time.monotonic()
        if now - self._last_expiry < EXPIRY_CHECK_SECONDS:
            return
        self._last_expiry = now
        try:
            expired = interrupts_expire()
        except Exception:
            log.exception("worker %s: expiring overdue requests failed", self.name)
            return
        if expired:
            log.info("worker %s: expired %d overdue requests", self.name, len(expired))

    # -- claiming ----------------------------------------------------------------------

    def claim(self) -> Run | None:
        """Take the next claimable run (an expired lease first, then the oldest queued)."""
        while True:
            if _using_postgres():
                run, gave_up = self._claim_one_statement()
            else:
                with transaction.atomic():
                    run, gave_up = self._claim_one()
            if gave_up is not None:
                continue  # that one is finished now; look for another
            return run

    def _claim_one(self) -> tuple[Run | None, Run | None]:
        """The claim on SQLite, in the caller's (serialising) transaction."""
        now = timezone.now()
        expired = Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__lt=Now())
        earlier_unfinished = Run.objects.filter(
            thread_id=OuterRef("thread_id"),
            status__in=[Run.Status.QUEUED, Run.Status.RUNNING],
            created_at__lt=OuterRef("created_at"),
        )
        thread_busy = Run.objects.filter(thread_id=OuterRef("thread_id"), status=Run.Status.RUNNING)
        queued = Run.objects.filter(status=Run.Status.QUEUED).exclude(
            Exists(earlier_unfinished) | Exists(thread_busy)
        )
        for candidates in (expired.order_by("lease_expires_at"), queued.order_by("created_at")):
            for run in candidates[:5]:
                taken = self._take(run, now)
                if taken is not None:
                    return taken
        return None, None

    def _claim_one_statement(self) -> tuple[Run | None, Run | None]:
        """The claim on PostgreSQL: one statement, one round trip (it commits on its own
        outside a transaction). The run and its thread are locked SKIP LOCKED together,
        so concurrent workers take different runs and two runs of one thread never
        start at once; the same statement marks the thread running."""
        runs = list(
            Run.objects.raw(
                _CLAIM_SQL.format(
                    run=Run._meta.db_table,
                    thread=Thread._meta.db_table,
                    thread_columns=", ".join(f"t.{f} AS thread__{f}" for f in _THREAD_FIELDS),
                ),
                {"owner": self.lease_owner, "lease": self.lease},
            )
        )
        if not runs:
            return None, None
        run = runs[0]
        # The thread as the claim read it, with only those fields loaded (as .only() would).
        run.claimed_thread = Thread.from_db(  # type: ignore[attr-defined]
            "default", _THREAD_FIELDS, [getattr(run, f"thread__{f}") for f in _THREAD_FIELDS]
        )
        if run.attempts <= self.max_attempts:
            return run, None
        with transaction.atomic():
            # Claimed once too often: this claim was not an attempt, and the run fails.
            run.attempts -= 1
            error = self._gave_up(run)
            failed = Run.objects.filter(
                pk=run.pk, lease_owner=self.lease_owner, status=Run.Status.RUNNING
            ).update(
                status=Run.Status.FAILED,
                error=error,
                attempts=run.attempts,
                finished_at=timezone.now(),
                lease_expires_at=None,
            )
            if failed:  # not if its thread was cancelled since the claim: it stays so
                run.status, run.error = Run.Status.FAILED, error
                self._settle_thread(run, failed=True)
        return None, run

    def _gave_up(self, run: Run) -> str:
        return (
            f"gave up after {run.attempts} attempts (PORTAL_RUN_MAX_ATTEMPTS="
            f"{self.max_attempts}): each time, the worker running it stopped before it "
            "finished. The thread keeps its last checkpoint and can be retried."
        )

    def _take(self, run: Run, now: Any) -> tuple[Run | None, Run | None] | None:
        attempts = run.attempts + 1
        if attempts > self.max_attempts:
            error = self._gave_up(run)
            Run.objects.filter(pk=run.pk).update(
                status=Run.Status.FAILED, error=error, finished_at=now, lease_expires_at=None
            )
            run.status, run.error = Run.Status.FAILED, error
            self._settle_thread(run, failed=True)
            return None, run
        # The conditional UPDATE is the claim itself (and on SQLite the only guard): it
        # matches only if nobody changed the row since we read it.
        claimed = Run.objects.filter(pk=run.pk, status=run.status, attempts=run.attempts).update(
            status=Run.Status.RUNNING,
            attempts=attempts,
            lease_owner=self.lease_owner,
            lease_expires_at=_lease_until(self.lease),
            started_at=Coalesce("started_at", now),
        )
        if not claimed:
            return None
        # A cancelled thread keeps its status (its runs are cancelled with it, so this
        # claim only happens if the cancellation commits after the claim read the run).
        Thread.objects.filter(pk=run.thread_id, cancelled_at__isnull=True).update(
            status=Thread.Status.RUNNING, updated_at=now
        )
        run.status, run.attempts = Run.Status.RUNNING, attempts
        run.lease_owner = self.lease_owner
        run.lease_expires_at = now + timedelta(seconds=self.lease)
        run.started_at = run.started_at or now
        return run, None

    # -- executing ---------------------------------------------------------------------

    def execute(self, run: Run) -> Outcome:
        """Run the agent for a claimed run and record the outcome. Never raises for a
        problem of the run itself (unknown agent, bad input, model failure)."""
        log.info(
            "run %s (%s, attempt %d) on thread %s", run.pk, run.kind, run.attempts, run.thread_id
        )
        self._lease_lost = False
        heartbeat = _Heartbeat(
            run.pk, self.lease_owner, self.lease, worker=self.name, on_lost=self._abandon
        )
        heartbeat.start()
        try:
            outcome = self._execute(run)
        except Exception as exc:  # a bug of ours; the run fails, the worker goes on
            log.exception("run %s crashed the executor", run.pk)
            outcome = Outcome(Run.Status.FAILED, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            heartbeat.stop()
        self._finish(run, outcome)
        return outcome

    def _execute(self, run: Run) -> Outcome:
        from portal.runs.checkpointer import DjangoCheckpointer
        from portal.runs.registry import UnknownAgentError, compile_agent

        thread = getattr(run, "claimed_thread", None) or Thread.objects.get(pk=run.thread_id)
        if thread.cancelled_at is not None:
            return Outcome(Run.Status.CANCELLED, "its thread was cancelled")
        recovered = self._recover(run)
        if isinstance(recovered, Outcome):
            return recovered
        payload, expected_seq = recovered
        problem = _input_problem(payload)
        if problem:
            return Outcome(Run.Status.FAILED, f"the run's stored input is not valid: {problem}")
        native = self._native_connection()
        try:
            store = DjangoCheckpointer(run=run, connection=native, thread=thread)
            graph = compile_agent(thread.agent, store)
        except UnknownAgentError as exc:
            return Outcome(Run.Status.FAILED, str(exc))
        except Exception as exc:
            return Outcome(
                Run.Status.FAILED,
                f"agent {thread.agent!r} could not be built: {type(exc).__name__}: {exc}",
            )
        config: dict[str, Any] = {
            "thread_id": str(thread.pk),
            "user_id": str(thread.owner_id or ""),
            "run_id": str(run.pk),
            # The thread as this run found it: a thread that moved on is refused.
            "expected_seq": thread.last_seq if expected_seq is None else expected_seq,
        }
        try:
            if native is not None:
                if self._lease_lost:  # lost before the graph even started
                    return Outcome(RELEASE, LEASE_LOST)
                loop = self._event_loop()
                self._running = loop.create_task(_stream(graph, payload, config, thread.pk))
                if self._lease_lost:  # lost between the check above and now
                    self._running.cancel()
                try:
                    paused = loop.run_until_complete(self._running)
                except asyncio.CancelledError:
                    if self._lease_lost:
                        return Outcome(RELEASE, LEASE_LOST)
                    return Outcome(Run.Status.FAILED, "the run was cancelled inside the graph")
                finally:
                    self._running = None
            else:
                if self._lease_lost:  # nothing can stop the graph once it runs here
                    return Outcome(RELEASE, LEASE_LOST)
                paused = async_to_sync(_stream)(graph, payload, config, thread.pk)
        except ThreadCancelled as exc:
            # Cancelled while running: the write refused was this run's next step (a tool
            # call among them), so nothing after it happened.
            log.info("run %s: %s", run.pk, exc)
            return Outcome(Run.Status.CANCELLED, str(exc))
        except CheckpointConflict as exc:
            # Another writer moved the thread on: a taken-over run's earlier attempt, its
            # lease lost, that stops at its next await. Give the run back, to continue from
            # whatever that reached once it has stopped (MAX_ATTEMPTS bounds the retries).
            log.warning("run %s: the thread moved on under it (%s); releasing it", run.pk, exc)
            return Outcome(RELEASE, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            if native is not None and _connection_failed(native, exc):
                # Our connection died (a database restart, a failover), not the run: give
                # the run back, to continue from its last checkpoint after we reconnect.
                log.warning("run %s: the database connection failed; releasing it", run.pk)
                self._connection_lost()
                return Outcome(RELEASE, f"{type(exc).__name__}: {exc}")
            return Outcome(Run.Status.FAILED, f"{type(exc).__name__}: {exc}")
        return Outcome(Run.Status.INTERRUPTED if paused else Run.Status.SUCCEEDED)

    def _abandon(self, taken: bool) -> None:
        """Our lease is gone: ``taken`` over by another worker (or maybe: the database was
        out of reach), else the run was cancelled or is gone."""
        self._lease_lost = True
        self._cancel_running()
        if not (taken and self.exit_when_fenced):
            return
        # Cancelling stops the graph at its next await, but not a sync tool in a thread
        # (nor a graph under async_to_sync): such a call would still act while the worker
        # that took the run over asks a person whether it did, or runs it again. Ending
        # the process stops it.
        log.critical(
            "worker %s: the run it was executing is another worker's now, or may be (its "
            "lease could not be renewed); exiting (%d) so that none of its calls still "
            "running can act",
            self.name,
            EXIT_FENCED,
        )
        try:
            logging.shutdown()
        finally:
            os._exit(EXIT_FENCED)

    def _cancel_running(self) -> None:
        """Another worker owns the run now (our lease expired): stop the graph at its next
        await, so it takes no further step, tool call included, on a run that is not ours.
        Called from the heartbeat thread. (Under async_to_sync, on SQLite or inside a
        caller's transaction, there is no handle to stop it: the compare-and-swap refuses
        its next checkpoint only once the worker that took over has written one.)"""
        task, loop = self._running, self._loop
        if task is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _native_connection(self) -> Any:
        """The checkpointer's own async connection, on PostgreSQL when the caller holds no
        transaction; else None, and the checkpointer goes through Django's connection of
        this thread (a test that runs the loop inside its transaction sees the writes
        there). A broken connection is replaced, and one that cannot be opened falls back
        to Django's: slower, never wrong."""
        if not _using_postgres() or connection.in_atomic_block:
            return None
        if self._pg is not None and not self._native_usable():
            self._connection_lost()
        if self._pg is None:
            from portal.runs.queue import aconnect

            try:
                self._pg = self._event_loop().run_until_complete(aconnect())
            except Exception:
                log.warning(
                    "worker %s: no async connection; using Django's", self.name, exc_info=True
                )
                return None
        return self._pg

    def _native_usable(self) -> bool:
        # The connection may have been cut since the last run (a database restart, a
        # proxy's timeout): ping it before trusting a run to it, as CONN_HEALTH_CHECKS
        # does for Django's. One round trip per run.
        conn = self._pg
        if conn.closed or conn.broken:
            return False
        try:
            self._event_loop().run_until_complete(conn.execute("SELECT 1"))
        except Exception:
            log.warning("worker %s: the async connection is gone; reconnecting", self.name)
            return False
        return True

    def _connection_lost(self) -> None:
        """The async connection broke (a database restart, a failover): close it; the next
        run opens another."""
        self._close_native()

    def _close_native(self) -> None:
        conn, self._pg = self._pg, None
        if conn is not None and self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.run_until_complete(conn.close())
            except Exception:
                log.warning("worker %s: closing the async connection failed", self.name)

    def _close_loop(self) -> None:
        self._close_native()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:  # (gather() of nothing would belong to another loop)
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
        self._loop = None

    def _recover(self, run: Run) -> tuple[dict[str, Any], int | None] | Outcome:
        """The input to run with and, for a run taken over, the thread's checkpoint it goes
        on top of (None: the thread's row as read before); or the outcome an earlier
        attempt already reached."""
        stored = run.input if isinstance(run.input, dict) else {"invalid": run.input}
        if run.attempts <= 1:
            return stored, None
        # Read before looking for the run's steps: an earlier attempt still running (its
        # lease lost) may write its first step, or finish, in between. The runtime then
        # finds the thread past this seq and applies nothing (CheckpointConflict).
        base = Thread.objects.filter(pk=run.thread_id).values_list("last_seq", flat=True).first()
        if not Checkpoint.objects.filter(run=run).exists():
            # Nothing of this run reached the database: apply its input again.
            return stored, base or 0
        last = Checkpoint.objects.filter(thread_id=run.thread_id).order_by("-seq").first()
        if last is not None and last.run_id == run.pk:
            if last.status == Checkpoint.Status.INTERRUPTED:
                return Outcome(Run.Status.INTERRUPTED)
            if last.status == Checkpoint.Status.DONE:
                return Outcome(Run.Status.SUCCEEDED)
        log.info("run %s: continuing from checkpoint %s after a crash", run.pk, last and last.seq)
        # Continue from the checkpoint looked at here (read after this run's steps were):
        # should the earlier attempt write again meanwhile, the run is given back.
        return {"messages": []}, last.seq if last is not None else 0

    def _finish(self, run: Run, outcome: Outcome) -> None:
        now = timezone.now()
        if outcome.status == RELEASE:
            Run.objects.filter(
                pk=run.pk, lease_owner=self.lease_owner, status=Run.Status.RUNNING
            ).update(lease_expires_at=Now(), error=outcome.error)
            return
        if _using_postgres() and outcome.status != Run.Status.FAILED:
            self._finish_one_statement(run, outcome, now)
            return
        with transaction.atomic():
            # Only the lease holder records the outcome: if our lease expired and another
            # worker took the run over, its result is the one that counts.
            recorded = Run.objects.filter(
                pk=run.pk, lease_owner=self.lease_owner, status=Run.Status.RUNNING
            ).update(
                status=outcome.status,
                error=outcome.error,
                finished_at=now,
                lease_expires_at=None,
            )
            if not recorded:
                # Its lease was taken over, or its thread cancelled (which cancels the run).
                log.warning("run %s: no longer this worker's; outcome dropped", run.pk)
                return
            run.status, run.error, run.finished_at = outcome.status, outcome.error, now
            self._settle_thread(run, failed=outcome.status == Run.Status.FAILED)
        if outcome.status == Run.Status.FAILED:
            log.warning("run %s failed: %s", run.pk, outcome.error)

    def _finish_one_statement(self, run: Run, outcome: Outcome, now: Any) -> None:
        """``_finish`` and ``_settle_thread`` for a run that did not fail, on PostgreSQL:
        one statement (``_FINISH_SQL``), atomic and committed as the server is set."""
        with connection.cursor() as cursor:
            cursor.execute(
                _FINISH_SQL.format(
                    run=Run._meta.db_table,
                    thread=Thread._meta.db_table,
                    checkpoint=Checkpoint._meta.db_table,
                ),
                {
                    "run": run.pk,
                    "owner": self.lease_owner,
                    "status": outcome.status,
                    "error": outcome.error,
                    "now": now,
                    "channel": waiting.CHANNEL,
                    "key": waiting.thread_key(run.thread_id),
                },
            )
            row = cursor.fetchone()
        if row is None:
            log.warning("run %s: no longer this worker's; outcome dropped", run.pk)
            return
        run.status, run.error, run.finished_at = outcome.status, outcome.error, now
        waiting.changed_here(waiting.thread_key(run.thread_id))
        told = partial(
            broadcast.apublish_thread_status,
            run.thread_id,
            row[0],
            run_id=run.pk,
            run_status=run.status,
            error=run.error,
        )
        if connection.in_atomic_block:  # a test's transaction: told when it commits
            transaction.on_commit(lambda: async_to_sync(told)(), robust=True)
            return
        if not broadcast.listening(broadcast.thread_group(run.thread_id))[0]:
            return
        # Committed: told from the worker's own loop (no hop to the publishing thread).
        try:
            self._event_loop().run_until_complete(told())
        except Exception:
            log.warning("run %s: publishing its outcome failed", run.pk, exc_info=True)

    def _settle_thread(self, run: Run, *, failed: bool) -> None:
        # The thread's status follows its newest checkpoint; a failure that left the
        # thread paused (a resume refused by the runtime) keeps it paused, unless the run
        # was the answer to that very pause and it never reached the checkpoint: the
        # request has left the queue, so only a retry (which sends the answer again, see
        # services.thread_continue) can take the thread on.
        last, paused_on = (
            Checkpoint.objects.filter(thread_id=run.thread_id)
            .order_by("-seq")
            .values_list("status", "interrupt_id")
            .first()
        ) or (None, None)
        if last == Checkpoint.Status.INTERRUPTED and not (failed and _answer_lost(run, paused_on)):
            status = Thread.Status.INTERRUPTED
        elif failed:
            status = Thread.Status.FAILED
        elif last == Checkpoint.Status.DONE:
            status = Thread.Status.DONE
        else:
            status = Thread.Status.IDLE
        Thread.objects.filter(pk=run.thread_id, cancelled_at__isnull=True).update(
            status=status, updated_at=timezone.now()
        )
        if failed:
            # Told to whoever subscribed, in the transaction that records the failure.
            agent = Thread.objects.filter(pk=run.thread_id).values_list("agent", flat=True).first()
            outbox.notify_run_failed(run, agent=agent or "")
        waiting.changed(waiting.thread_key(run.thread_id))
        transaction.on_commit(
            lambda: broadcast.publish_thread_status(
                run.thread_id, status, run_id=run.pk, run_status=run.status, error=run.error
            ),
            robust=True,
        )

    # -- waiting -----------------------------------------------------------------------

    def _wait(self) -> None:
        if _using_postgres():
            poll = self.poll if self.poll is not None else POLL_WITH_NOTIFY
            listener = self._listen()
            if listener is not None:
                try:
                    for _ in listener.notifies(timeout=poll, stop_after=1):
                        pass
                    return
                except Exception:
                    log.warning("worker %s: LISTEN connection lost", self.name, exc_info=True)
                    self._close_listener()
            self._sleep(poll)
            return
        self._sleep(self.poll if self.poll is not None else POLL_WITHOUT_NOTIFY)

    def _sleep(self, seconds: float) -> None:
        # In-process notify_workers() (and stop()) set the event and end the wait early.
        wake.wait(seconds)

    def _listen(self) -> Any:
        if self._listener is None:
            import psycopg

            from portal.runs.queue import connect_kwargs

            try:
                self._listener = psycopg.connect(**connect_kwargs(), autocommit=True)
                self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            except Exception:
                log.warning("worker %s: cannot LISTEN; polling", self.name, exc_info=True)
                self._listener = None
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            finally:
                self._listener = None


async def _stream(
    graph: Any, payload: dict[str, Any], config: dict[str, Any], thread_id: Any
) -> bool:
    """Run the graph, publishing every chunk while anyone watches the thread; True if it
    paused on an interrupt."""
    paused = False
    # Whether anyone watches is asked again every HEARD_SECONDS, not per chunk (a token
    # is one): someone who opens the page meanwhile sees the next message, and the end.
    group, asked, heard = broadcast.thread_group(thread_id), -HEARD_SECONDS, False
    transcript = broadcast.LiveTranscript(thread_id)
    # aclosing: a cancel (lost lease) must also end the graph's own task, not leave it
    # pending on the worker's loop.
    async with graph, aclosing(graph.astream(payload, config=config)) as chunks:
        async for chunk in chunks:
            if chunk.event == "updates" and chunk.data.get("status") == "interrupted":
                paused = True
            if time.monotonic() - asked >= HEARD_SECONDS:
                # One call per run, normally: a round trip, as a publish would be.
                heard, asked = broadcast.listening(group)[0], time.monotonic()
            if heard:
                await broadcast.apublish_chunk(thread_id, chunk.to_dict(), transcript)
    return paused


def _connection_failed(conn: Any, exc: BaseException) -> bool:
    """Whether ``exc`` is the worker's own connection failing rather than the run."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError) or bool(conn.closed or conn.broken)


def _answer_lost(run: Run, paused_on: str | None) -> bool:
    """Whether ``run`` answered the request the thread is still paused on, and nobody can
    answer that request again (it was decided) while none of the run's steps were written."""
    answered = run.input.get("resume_interrupt_id") if isinstance(run.input, dict) else None
    if not answered or answered != paused_on:
        return False
    decided = not Interrupt.objects.filter(pk=answered, status=Interrupt.Status.PENDING).exists()
    return decided and not Checkpoint.objects.filter(run=run).exists()


def _input_problem(payload: Any) -> str:
    if not isinstance(payload, dict):
        return f"expected an object, got {type(payload).__name__}"
    if "resume" in payload:
        return ""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return "expected {'messages': [...]} or {'resume': ...}"
    for n, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return f"message {n} is not an object with string content"
    return ""


# -- the embedded worker ---------------------------------------------------------------

_embedded = loops.Embedded(
    lambda: Worker(name=f"embedded:{socket.gethostname()}:{os.getpid()}"),
    thread_name="portal-worker",
)


def start_embedded_worker() -> Worker:
    """Run the worker loop in a daemon thread of this process (the one-command demo).
    Idempotent: a second call returns the running worker."""
    return _embedded.start()


def stop_embedded_worker(timeout: float = 10) -> None:
    """Stop the embedded worker after its current run (tests, orderly shutdown)."""
    _embedded.stop(timeout)
