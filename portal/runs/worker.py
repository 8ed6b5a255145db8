"""The worker: claims runs from the durable queue (``portal.runs.queue``) and executes them
(``portal.runs.execute``), one at a time, modelled on healthchecks' ``sendalerts``.

``Worker`` holds the loop, the heartbeats (its own, and a run's lease renewed while the run
executes) and the event loop with its async connection. A worker that finds its lease gone
stops its graph; ``run_worker`` exits instead (``EXIT_FENCED``). Periodic work handed in
from above (``expire``: overdue requests) runs between claims, and ``arrived`` (decision
rules) after a run pauses. Run it with
``python manage.py run_worker``; the demo runs it in a daemon thread
(``start_embedded_worker``). docs/architecture.md (## runs) tells the rules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sized
from typing import Any

import psycopg
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from agents.models import ChatModel, resolve_model
from portal import loops
from portal.models import Run, WorkerHeartbeat
from portal.models.db import aconnect, connect_kwargs
from portal.runs import queue, sql
from portal.runs.execute import Prepared, failure, prepare, stream
from portal.runs.queue import NOTIFY_CHANNEL, RELEASE, Outcome, wake

log = logging.getLogger(__name__)

# How often an idle worker calls its ``expire`` (requests whose expires_at has passed).
EXPIRY_CHECK_SECONDS = 5.0
# Seconds between polls when no wake-up arrives: PostgreSQL workers are woken by NOTIFY,
# so their poll only has to notice expired leases; SQLite workers in other processes
# have nothing but the poll.
POLL_WITH_NOTIFY = 1.0
POLL_WITHOUT_NOTIFY = 0.2
# Given back (RELEASE) rather than failed: the heartbeat may only have lost touch with
# the database, and then the run is still this worker's to give back.
LEASE_LOST = (
    "stopped: this worker could not renew its lease, so another worker may have taken the "
    "run over; the run goes on from its last checkpoint"
)
# run_worker's exit status when the run it was executing may be another worker's now
# (sysexits' EX_TEMPFAIL: a supervisor starts it again).
EXIT_FENCED = 75


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
                    renewed = queue.renew(self.run_id, owner=self.owner, lease=self.lease)
                except Exception:
                    # A database hiccup: try again next beat, with a fresh connection. Once
                    # the lease may have run out, another worker may own the run: stop.
                    log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)
                    connection.close()
                    if time.monotonic() - renewed_at < self.lease:
                        continue
                    renewed, reached = False, False
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
        try:
            return queue.taken_over(self.run_id, owner=self.owner)
        except Exception:
            return True  # cannot be read: another worker may hold it

    def _beat_worker(self) -> None:
        # The worker's loop is busy with this run: its liveness is beaten from here.
        try:
            WorkerHeartbeat.objects.filter(name=self.worker).update(beat_at=Now())
        except Exception:
            log.warning("run %s: recording the worker's heartbeat failed", self.run_id)

    def stop(self) -> None:
        self.halt.set()
        self.join()


class _Lent:
    """A model the worker keeps, lent to one run's graph: closing the graph leaves it open
    for the next run (the worker closes it with its loop)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.name = model.name

    async def agenerate(self, messages: Any, tools: Any, *, on_delta: Any = None) -> Any:
        return await self.model.agenerate(messages, tools, on_delta=on_delta)

    async def aclose(self) -> None:
        return None


class Worker:
    """One claim-execute loop. ``name`` names it in logs and heartbeats (host:pid:random
    by default); its leases carry the name and a token of its own. ``expire``, called
    every ``EXPIRY_CHECK_SECONDS`` between claims, declines overdue requests and returns
    them (the worker does not know what a request is; its starter does). ``arrived``,
    called with the thread's id once a run's pause is recorded, lets the rules above act
    on the new request; a worker that dies first leaves it to people."""

    def __init__(
        self,
        *,
        name: str | None = None,
        poll: float | None = None,
        lease_seconds: float | None = None,
        max_attempts: int | None = None,
        exit_when_fenced: bool = False,
        expire: Callable[[], Sized] | None = None,
        arrived: Callable[[Any], object] | None = None,
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
        self._my_turn = False  # this idle worker is the one a NOTIFY wakes (see _wait)
        self._expire = expire
        self._arrived = arrived
        self._last_expiry = -EXPIRY_CHECK_SECONDS
        self._heartbeat = loops.Heartbeat(self.name, kind=WorkerHeartbeat.Kind.WORKER)
        # One event loop for the worker's life (a loop per run costs a thread and a new
        # channel-layer connection each time), and on PostgreSQL one async connection the
        # checkpointer writes through without hopping threads.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pg: Any = None
        self._running: asyncio.Task[bool] | None = None  # the graph now executing
        # Models kept for the runs on that loop, by name: a run's model then reuses the
        # connections to its server that earlier runs opened.
        self._models: dict[str, ChatModel] = {}
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
                loops.refresh_connections()
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
            loops.refresh_connections()
        log.info("worker %s stopped after %d runs", self.name, done)
        return done

    def stop(self) -> None:
        self.stopping.set()
        wake.set()

    def _expire_due(self) -> None:
        # Overdue requests are declined here, so expiry needs no cron job; several
        # workers may try at once, and the service's row locks let exactly one win.
        now = time.monotonic()
        if self._expire is None or now - self._last_expiry < EXPIRY_CHECK_SECONDS:
            return
        self._last_expiry = now
        try:
            expired = self._expire()
        except Exception:
            log.exception("worker %s: expiring overdue requests failed", self.name)
            return
        if expired:
            log.info("worker %s: expired %d overdue requests", self.name, len(expired))

    def claim(self) -> Run | None:
        """Take the next claimable run (an expired lease first, then the oldest queued)."""
        return queue.claim(owner=self.lease_owner, lease=self.lease, max_attempts=self.max_attempts)

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
        prepared = prepare(run, self._native_connection, self._lent_model)
        if isinstance(prepared, Outcome):
            return prepared
        if self._lease_lost:  # lost before the graph even started
            return Outcome(RELEASE, LEASE_LOST)
        paused: bool | Outcome
        try:
            if prepared.connection is None:
                self._turn_give()  # no loop of this worker's to hear a wake-up on
                # Nothing can stop the graph once it runs here (see _cancel_running).
                paused = async_to_sync(stream)(prepared)
            else:
                paused = self._run_on_loop(prepared)
        except Exception as exc:
            return failure(run, exc, prepared, connection_lost=self._connection_lost)
        if isinstance(paused, Outcome):
            return paused
        return Outcome(Run.Status.INTERRUPTED if paused else Run.Status.SUCCEEDED)

    def _run_on_loop(self, prepared: Prepared) -> bool | Outcome:
        """The graph as a task of the worker's loop, which the heartbeat can cancel."""
        loop = self._event_loop()
        self._running = loop.create_task(stream(prepared))
        if self._lease_lost:  # lost between the check before and now
            self._running.cancel()
        heard = self._hear_while_busy(loop)
        try:
            return loop.run_until_complete(self._running)
        except asyncio.CancelledError:
            if self._lease_lost:
                return Outcome(RELEASE, LEASE_LOST)
            return Outcome(Run.Status.FAILED, "the run was cancelled inside the graph")
        finally:
            if heard is not None:
                loop.remove_reader(heard)
            self._running = None

    def _finish(self, run: Run, outcome: Outcome) -> None:
        if outcome.status == RELEASE:
            queue.release(run, owner=self.lease_owner, error=outcome.error)
            return
        tell = queue.finish(run, owner=self.lease_owner, status=outcome.status, error=outcome.error)
        if tell is not None:
            # Committed: told from the worker's own loop (no hop to the publishing thread).
            try:
                self._event_loop().run_until_complete(tell())
            except Exception:
                log.warning("run %s: publishing its outcome failed", run.pk, exc_info=True)
        if outcome.status == Run.Status.INTERRUPTED and self._arrived is not None:
            try:
                self._arrived(run.thread_id)
            except Exception:
                log.exception("run %s: the rules could not act on its request", run.pk)

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
        if not queue.on_postgres() or connection.in_atomic_block:
            return None
        if self._pg is not None and not self._native_usable():
            self._connection_lost()
        if self._pg is None:
            try:
                self._pg = self._event_loop().run_until_complete(aconnect())
            except Exception:
                log.warning(
                    "worker %s: no async connection; using Django's", self.name, exc_info=True
                )
                return None
        return self._pg

    def _lent_model(self, name: str) -> ChatModel:
        """The model ``name``, kept for this worker's runs on its loop and lent to one run's
        graph, whose close leaves it open."""
        kept = self._models.get(name)
        if kept is None:
            kept = self._models[name] = resolve_model(name)
        return _Lent(kept)

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
        models, self._models = list(self._models.values()), {}
        if loop is not None and not loop.is_closed():
            for model in models:
                try:
                    loop.run_until_complete(model.aclose())
                except Exception:
                    log.warning("worker %s: closing model %s failed", self.name, model.name)
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:  # (gather() of nothing would belong to another loop)
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
        self._loop = None

    # -- waiting -----------------------------------------------------------------------

    def _wait(self) -> None:
        if queue.on_postgres():
            poll = self.poll if self.poll is not None else POLL_WITH_NOTIFY
            listener = self._listen(poll)
            if listener is not None:
                try:
                    if self._my_turn:
                        for _ in listener.notifies(timeout=poll, stop_after=1):
                            pass
                    else:
                        self._my_turn = self._turn_taken(listener)
                    return
                except Exception:
                    log.warning("worker %s: LISTEN connection lost", self.name, exc_info=True)
                    self._close_listener()
            self._sleep(poll)
            return
        self._sleep(self.poll if self.poll is not None else POLL_WITHOUT_NOTIFY)

    # Idle workers take turns to listen. A NOTIFY reaches every listening connection, so
    # with several idle workers each queued run woke them all, and all but one claimed
    # nothing, taking the cores from the one that did. Only the idle worker holding the
    # turn (a session advisory lock) waits for a NOTIFY; the others wait for the turn, at
    # most a poll at a time, and PostgreSQL hands it to the longest waiting. A worker that
    # takes the turn claims before it listens, so a run queued while nobody held the turn
    # is found. One that claims a run keeps the turn while executing it and gives it up
    # when a wake-up arrives meanwhile (or at once, with no loop to hear one on); a worker
    # that dies gives it up with its session.

    def _turn_taken(self, listener: Any) -> bool:
        try:
            listener.execute(sql.TURN_TAKE, [sql.TURN_KEY])
        except psycopg.errors.LockNotAvailable:
            return False  # another idle worker held the turn for the whole poll
        return True

    def _hear_while_busy(self, loop: asyncio.AbstractEventLoop) -> int | None:
        # Holding the turn while executing, so that one client's runs wake nobody else;
        # a wake-up that arrives meanwhile is for another run, and passes the turn on.
        if not self._my_turn or self._listener is None:
            return None
        fd = int(self._listener.fileno())
        loop.add_reader(fd, self._heard)
        return fd

    def _heard(self) -> None:
        if self._loop is not None and self._listener is not None:
            self._loop.remove_reader(self._listener.fileno())
        self._turn_give()

    def _turn_give(self) -> None:
        if not self._my_turn:
            return
        self._my_turn = False
        try:
            self._listener.execute(sql.TURN_GIVE, [sql.TURN_KEY])
        except Exception:  # the session is gone, and its lock with it
            log.warning("worker %s: LISTEN connection lost", self.name, exc_info=True)
            self._close_listener()

    def _sleep(self, seconds: float) -> None:
        # In-process notify_workers() (and stop()) set the event and end the wait early.
        wake.wait(seconds)

    def _listen(self, poll: float) -> Any:
        if self._listener is None:
            try:
                self._listener = psycopg.connect(**connect_kwargs(), autocommit=True)
                self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                # How long a wait for the turn lasts before the loop goes round again.
                self._listener.execute(f"SET lock_timeout = {max(int(poll * 1000), 1)}")
            except Exception:
                log.warning("worker %s: cannot LISTEN; polling", self.name, exc_info=True)
                self._listener = None
        return self._listener

    def _close_listener(self) -> None:
        self._my_turn = False
        if self._listener is not None:
            try:
                self._listener.close()
            finally:
                self._listener = None


# -- the embedded worker ---------------------------------------------------------------

_embedded = loops.Embedded(
    lambda expire, arrived: Worker(
        name=f"embedded:{socket.gethostname()}:{os.getpid()}", expire=expire, arrived=arrived
    ),
    thread_name="portal-worker",
)


def start_embedded_worker(
    *, expire: Callable[[], Sized] | None, arrived: Callable[[Any], object] | None = None
) -> Worker:
    """Run the worker loop in a daemon thread of this process (the one-command demo), with
    ``expire`` and ``arrived`` as ``Worker`` takes them. Idempotent: a second call returns
    the running worker."""
    return _embedded.start(expire=expire, arrived=arrived)


def stop_embedded_worker(timeout: float = 10) -> None:
    """Stop the embedded worker after its current run (tests, orderly shutdown)."""
    _embedded.stop(timeout)
