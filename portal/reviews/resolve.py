"""Closing a request: the one place a ``Decision`` is recorded.

``resolve`` is the write every closing path ends in (a decision, the vote that completes
a quorum, the expiry, a withdrawal, a cancelled thread's requests, an outside agent's
request). Its callers check first, then lock the request and call it; it takes the
request out of the queue, notifies, resumes the run, records the decision (or records it,
then answers the outside agent) and announces the change on commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.inputs import check_input
from portal.models import Decision, Interrupt, RuleVersion, Run, Thread
from portal.models.together import together
from portal.notify import broadcast, outbox
from portal.reviews import external
from portal.runs.queue import enqueue

__all__ = ["DecisionClash", "resolve", "thread_resume"]


class DecisionClash(IntegrityError):
    """The decision's insert broke a unique constraint: the request has one already."""


def thread_resume(*, thread: Thread, value: Any, interrupt_id: str) -> Run:
    """Queue the run that answers ``interrupt_id`` with ``value`` (None: cancelled).

    Called inside the transaction that locked and resolved the interrupt: the ``Run`` row
    is the durable queue, and workers see it (and are woken) only once that commits. An
    outside agent's request has no graph to resume (``resolve`` answers it instead).
    """
    payload = _resume_input(value, interrupt_id)
    # Part of the caller's transaction when there is one, without a savepoint of its own.
    with transaction.atomic(savepoint=False):
        run = enqueue(thread=thread, kind=Run.Kind.RESUME, input=payload)
    return run


def _resume_input(value: Any, interrupt_id: str) -> dict[str, Any]:
    """The answer as a run's input, checked (``InputError``); an outside agent's answer
    is checked the same way, though no run takes it."""
    payload = {"resume": value, "resume_interrupt_id": interrupt_id}
    check_input(payload, "the decision")
    return payload


def _table_of(exc: IntegrityError) -> str | None:
    """The table whose constraint ``exc`` broke, when the database says (PostgreSQL)."""
    return getattr(getattr(exc.__cause__, "diag", None), "table_name", None)


def _door(by: Any, rule_version: RuleVersion | None) -> str:
    if rule_version is not None:
        return Decision.Door.RULE
    return Decision.Door.SYSTEM if by is None else ""


def resolve(
    locked: Interrupt,
    *,
    status: str,
    outcome: str,
    value: Any,
    by: Any,
    note: str = "",
    original_args: dict[str, Any] | None = None,
    executed_args: dict[str, Any] | None = None,
    at: datetime | None = None,
    resume: bool = True,
    door: str = "",
    rule_version: RuleVersion | None = None,
) -> tuple[Decision, Run | None]:
    """Close the pending request ``locked`` with a decision; caller holds the row lock
    (``select_for_update`` in its transaction) and has checked that it may close it.

    Records the ``Decision`` (``by`` None: the system, or with ``rule_version`` the
    decision rule's version that decided, its hash sealed beside it; ``door``: where it
    came in), marks
    the request ``status`` at ``at`` (default now), queues the outbox event, resumes the
    thread with ``value`` or, without ``resume``, only answers an outside agent; announces
    the change on commit.
    Returns the decision and the queued run (or None). ``DecisionClash``: the request
    has a decision already, and the caller's transaction must roll back.
    """
    thread = locked.thread
    decision = Decision(
        interrupt=locked,
        thread=thread,
        reviewer=by,
        value=value,
        note=note,
        outcome=outcome,
        original_args=original_args,
        executed_args=executed_args,
        door=door or _door(by, rule_version),
        rule_version=rule_version,
        rule_hash=rule_version.hash if rule_version is not None else "",
    )
    outside = external.is_external(locked.pk, node=locked.node)
    # The chains' lock holds every other decision back from the read of its chain's head
    # to the commit, so what needs no head is built first: the request's new status, the
    # outbox event, the queued run and the wake-ups wait for one statement, which goes
    # ahead of the lock in the decision's insert's round trip (portal/models/together.py),
    # still inside the caller's transaction. Under the lock there is left the decision's
    # insert, and whatever the caller writes after it, to the commit.
    run = None
    with together():
        locked.decided_as(status, at if at is not None else timezone.now())
        outbox.notify_decision(decision, locked)
        if resume and outside:
            _resume_input(value, locked.pk)
        elif resume:
            run = thread_resume(thread=thread, value=value, interrupt_id=locked.pk)
        try:
            decision.save()
        except IntegrityError as exc:
            # The save sends the writes above too: only the decision's own table clashes.
            if _table_of(exc) not in (None, Decision._meta.db_table):
                raise
            # No savepoint to recover in (a round trip each way, for a clash the row
            # lock all but rules out): the transaction rolls back and the refusal is read
            # after.
            raise DecisionClash(*exc.args) from None
        # An outside agent's answer carries the decision's id and hash: after its insert.
        if outside and resume:
            external.external_request_close(thread=thread, interrupt_id=locked.pk)
        elif outside:
            # Its agent is told it was cancelled (the thread is not closed: a cancelled
            # thread takes no more steps).
            external.external_answer_queue(locked.pk)
    broadcast.queue_change_on_commit(locked)
    return decision, run
