"""The durable run queue: a ``Run`` row is the work, and this module its only writer.

``enqueue`` adds a run and rings the doorbell (``notify_workers``); a worker ``claim``s the
next one under a lease, ``renew``s the lease while it runs, and ends it with ``finish``,
``release`` (given back) or ``give_up`` (claimed too often). A run whose lease lapsed is
claimed again, and ``recover`` says where it goes on from. On PostgreSQL a claim and a
finish are one statement each (``portal.runs.sql``); on SQLite they are ORM calls in a
transaction. docs/architecture.md (## runs) tells the rules.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from portal.models import Checkpoint, Interrupt, Run, Thread, together, waiting
from portal.notify import broadcast, outbox
from portal.runs import sql

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "portal_runs"

wake = threading.Event()

# An outcome that is not the run's: the worker gives the run back (its lease ends now; a
# worker continues it from its last checkpoint).
RELEASE = "release"


@dataclass(frozen=True)
class Outcome:
    status: str  # a Run.Status value, or RELEASE
    error: str = ""


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


# -- the doorbell ---------------------------------------------------------------------------


def notify_workers() -> None:
    """Wake idle workers once the current transaction commits."""
    if on_postgres():
        # Inside a transaction PostgreSQL delivers the notification at commit and drops
        # it on rollback, which is exactly "on commit".
        waiting.notify(NOTIFY_CHANNEL)  # NOTIFY; with others inside together()
    transaction.on_commit(wake.set)


# -- queueing and claiming ------------------------------------------------------------------


def enqueue(
    *, thread: Thread, kind: str, input: Any, author: Any = None, author_id: Any = None
) -> Run:
    """Queue a run of ``thread`` in the caller's transaction; workers are woken at commit.
    ``author`` (or its ``author_id``) is whose messages the run carries."""
    fields = {"author": author} if author is not None else {"author_id": author_id}
    run = Run(thread=thread, kind=kind, input=input, **fields)
    together.insert(run)  # with the caller's other last writes, when it gathers them
    notify_workers()
    return run


def _lease_until(seconds: float) -> Any:
    """The database's now() plus ``seconds``. Leases are set and compared on that one
    clock: on each worker's own, a worker whose clock ran ahead would take over runs
    whose workers are alive."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def claim(*, owner: str, lease: float, max_attempts: int) -> Run | None:
    """Take the next claimable run for ``owner`` for ``lease`` seconds: an expired lease
    first, then the oldest queued run of a thread with nothing else unfinished before it.
    A run claimed more than ``max_attempts`` times fails instead, and the next is looked
    for."""
    while True:
        if on_postgres():
            run, gave_up = _claim_one_statement(owner, lease, max_attempts)
        else:
            with transaction.atomic():  # BEGIN IMMEDIATE (see settings): writers queue up
                run, gave_up = _claim_one(owner, lease, max_attempts)
        if gave_up is None:
            return run


def _claim_one(owner: str, lease: float, max_attempts: int) -> tuple[Run | None, Run | None]:
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
            if run.attempts + 1 > max_attempts:
                give_up(run, owner=None, max_attempts=max_attempts)
                return None, run
            if _take(run, owner, lease, now):
                return run, None
    return None, None


def _take(run: Run, owner: str, lease: float, now: Any) -> bool:
    attempts = run.attempts + 1
    # The conditional UPDATE is the claim itself (and on SQLite the only guard): it
    # matches only if nobody changed the row since we read it.
    claimed = Run.objects.filter(pk=run.pk, status=run.status, attempts=run.attempts).update(
        status=Run.Status.RUNNING,
        attempts=attempts,
        lease_owner=owner,
        lease_expires_at=_lease_until(lease),
        started_at=Coalesce("started_at", now),
    )
    if not claimed:
        return False
    # A cancelled thread keeps its status (its runs are cancelled with it, so this
    # claim only happens if the cancellation commits after the claim read the run).
    Thread.objects.filter(pk=run.thread_id, cancelled_at__isnull=True).update(
        status=Thread.Status.RUNNING, updated_at=now
    )
    run.status, run.attempts = Run.Status.RUNNING, attempts
    run.lease_owner = owner
    run.lease_expires_at = now + timedelta(seconds=lease)
    run.started_at = run.started_at or now
    return True


def _claim_one_statement(
    owner: str, lease: float, max_attempts: int
) -> tuple[Run | None, Run | None]:
    """The claim on PostgreSQL: ``sql.CLAIM``, one round trip (it commits on its own
    outside a transaction)."""
    runs = list(Run.objects.raw(sql.CLAIM, {"owner": owner, "lease": lease}))
    if not runs:
        return None, None
    run = runs[0]
    # The thread as the claim read it, with only those fields loaded (as .only() would).
    fields = sql.CLAIMED_THREAD_FIELDS
    run.claimed_thread = Thread.from_db(  # type: ignore[attr-defined]
        "default", fields, [getattr(run, f"thread__{f}") for f in fields]
    )
    if run.attempts <= max_attempts:
        return run, None
    run.attempts -= 1  # claimed once too often: this claim was not an attempt
    give_up(run, owner=owner, max_attempts=max_attempts)
    return None, run


def give_up(run: Run, *, owner: str | None, max_attempts: int) -> None:
    """Fail ``run``, claimed more than ``max_attempts`` times. ``owner``: the claim that
    found it so holds it (PostgreSQL); None: it was only read, in the claiming
    transaction (SQLite)."""
    error = (
        f"gave up after {run.attempts} attempts (PORTAL_RUN_MAX_ATTEMPTS="
        f"{max_attempts}): each time, the worker running it stopped before it "
        "finished. The thread keeps its last checkpoint and can be retried."
    )
    if owner is None:
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.FAILED,
            error=error,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )
        run.status, run.error = Run.Status.FAILED, error
        _settle(run, failed=True)
        return
    with transaction.atomic():
        failed = Run.objects.filter(pk=run.pk, lease_owner=owner, status=Run.Status.RUNNING).update(
            status=Run.Status.FAILED,
            error=error,
            attempts=run.attempts,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )
        if failed:  # not if its thread was cancelled since the claim: it stays so
            run.status, run.error = Run.Status.FAILED, error
            _settle(run, failed=True)


# -- while it runs --------------------------------------------------------------------------


def renew(run_id: Any, *, owner: str, lease: float) -> bool:
    """Extend ``owner``'s lease of a running run to ``lease`` seconds from now; False when
    it holds it no more (taken over, cancelled, gone)."""
    return bool(
        Run.objects.filter(pk=run_id, lease_owner=owner, status=Run.Status.RUNNING).update(
            lease_expires_at=_lease_until(lease)
        )
    )


def taken_over(run_id: Any, *, owner: str) -> bool:
    """Whether another worker may hold the run now (and may have finished it), once
    ``owner`` lost its lease: always, but for a run that is gone, or still ``owner``'s and
    cancelled (its thread was), which nobody takes over."""
    row = Run.objects.filter(pk=run_id).values_list("lease_owner", "status").first()
    return row is not None and row != (owner, Run.Status.CANCELLED)


def recover(run: Run) -> tuple[dict[str, Any], int | None] | Outcome:
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


# -- ending it ------------------------------------------------------------------------------


def release(run: Run, *, owner: str, error: str) -> None:
    """Give ``run`` back: ``owner``'s lease ends now, and a worker continues the run from
    its last checkpoint."""
    Run.objects.filter(pk=run.pk, lease_owner=owner, status=Run.Status.RUNNING).update(
        lease_expires_at=Now(), error=error
    )


def finish(
    run: Run, *, owner: str, status: str, error: str = ""
) -> Callable[[], Awaitable[None]] | None:
    """Record ``run``'s outcome if ``owner`` still holds its lease (if it expired and
    another worker took the run over, that one's counts), and settle its thread.

    Returns the telling of the thread's watchers when the caller is to run it on its own
    event loop (PostgreSQL, committed, someone watching); else None (told at commit, or
    nobody watches)."""
    now = timezone.now()
    if on_postgres() and status != Run.Status.FAILED:
        return _finish_one_statement(run, owner, status, error, now)
    with transaction.atomic():
        recorded = Run.objects.filter(
            pk=run.pk, lease_owner=owner, status=Run.Status.RUNNING
        ).update(status=status, error=error, finished_at=now, lease_expires_at=None)
        if not recorded:
            # Its lease was taken over, or its thread cancelled (which cancels the run).
            log.warning("run %s: no longer this worker's; outcome dropped", run.pk)
            return None
        run.status, run.error, run.finished_at = status, error, now
        _settle(run, failed=status == Run.Status.FAILED)
    if status == Run.Status.FAILED:
        log.warning("run %s failed: %s", run.pk, error)
    return None


def _finish_one_statement(
    run: Run, owner: str, status: str, error: str, now: Any
) -> Callable[[], Awaitable[None]] | None:
    """``finish`` for a run that did not fail, on PostgreSQL: ``sql.FINISH``, atomic and
    committed as the server is set."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.FINISH,
            {
                "run": run.pk,
                "owner": owner,
                "status": status,
                "error": error,
                "now": now,
                "channel": waiting.CHANNEL,
                "key": waiting.thread_key(run.thread_id),
            },
        )
        row = cursor.fetchone()
    if row is None:
        log.warning("run %s: no longer this worker's; outcome dropped", run.pk)
        return None
    run.status, run.error, run.finished_at = status, error, now
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
        return None
    if not broadcast.listening(broadcast.thread_group(run.thread_id))[0]:
        return None
    return told


def _settle(run: Run, *, failed: bool) -> None:
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


def _answer_lost(run: Run, paused_on: str | None) -> bool:
    """Whether ``run`` answered the request the thread is still paused on, and nobody can
    answer that request again (it was decided) while none of the run's steps were written."""
    answered = run.input.get("resume_interrupt_id") if isinstance(run.input, dict) else None
    if not answered or answered != paused_on:
        return False
    decided = not Interrupt.objects.filter(pk=answered, status=Interrupt.Status.PENDING).exists()
    return decided and not Checkpoint.objects.filter(run=run).exists()
