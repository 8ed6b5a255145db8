"""Deciding a request: the one path every decision takes (dashboard form, admin, JSON API).

``decision_submit`` checks the answer (``check_decision``), locks the request, checks
what can change (status, pause, role, claim, policy, votes), then counts a vote
(``quorum``) or closes the request (``resolve``), all in one transaction. A refusal is
a ``DecisionRefused`` (``portal.errors``) whose ``status_code`` says how an HTTP caller
answers; nothing has been written when one is raised. See docs/architecture.md, reviews.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from portal.errors import InputError, InvalidDecision, StaleDecision, ThreadNotPaused, when
from portal.models import Approval, Checkpoint, Decision, Interrupt, Thread, policies, rows
from portal.models.db import prepared_cursor, stale_plan
from portal.reviews import sql
from portal.reviews.checks import (
    already_decided,
    check_decision,
    check_pending_in_checkpoint,
    check_refusal_reason,
    decision_forbidden,
    latest_checkpoint_columns,
)
from portal.reviews.expiry import expire_due
from portal.reviews.outcomes import asking_steps_columns, outcome_and_args
from portal.reviews.quorum import vote_record
from portal.reviews.resolve import DecisionClash, resolve

__all__ = ["decision_submit", "decision_submit_for_thread"]


class _Overdue(Exception):
    """The request's deadline passed before the answer came; the expiry declines it."""

    def __init__(self, at: datetime) -> None:
        super().__init__(at)
        self.at = at


def decision_submit(
    *,
    interrupt: Interrupt | str,
    reviewer: Any,
    value: Any,
    resume_interrupt_id: str | None,
    note: str = "",
    door: str = "",
) -> Decision | Approval:
    """Record ``reviewer``'s answer ``value`` to ``interrupt`` and queue the resume.

    When the request's policy needs several reviewers, the answer is a vote: the
    ``Approval`` is returned while the request waits for more (its ``needed`` says what
    for, in words), and the vote that reaches a count returns the ``Decision``. A second
    vote by the same reviewer raises ``AlreadyVoted`` (409).

    ``resume_interrupt_id`` is the request the client saw (a hidden field in forms); it
    must name this interrupt; ``door`` is where it came in (a ``Decision.Door``), recorded
    in the audit chain. When the schema has a ``note`` property and ``value`` has
    none, ``note`` is copied into the value, so the agent sees it. Raises
    ``AlreadyDecided``/``StaleDecision`` (409), ``ThreadNotPaused`` (404),
    ``DecisionForbidden`` (403) or ``InvalidDecision`` (422, with ``errors``).
    """
    asked = {
        "interrupt": interrupt,
        "reviewer": reviewer,
        "value": value,
        "resume_interrupt_id": resume_interrupt_id,
        "note": note,
        "door": door,
    }
    outermost = not connection.in_atomic_block
    try:
        return _submitted(**asked)
    except DatabaseError as exc:
        if not (outermost and stale_plan(exc)):
            raise
    # A migration changed a column the locking read returns, under this process: the
    # transaction rolled back at its first statement, nothing was recorded, and the
    # rollback dropped the connection's prepared statements. Once more, planned afresh.
    return _submitted(**asked)


def _submitted(
    *,
    interrupt: Interrupt | str,
    reviewer: Any,
    value: Any,
    resume_interrupt_id: str | None,
    note: str,
    door: str,
) -> Decision | Approval:
    answer = check_decision(interrupt=interrupt, value=value, note=note)
    pk, value, note = answer.pk, answer.value, answer.note
    try:
        with transaction.atomic():
            # Row lock. The race: two reviewers (or a reviewer and the expiry job) submit for
            # the same request at once. Both read "pending"; without the lock both would record
            # a decision and queue two resumes. With it the second waits here until the first
            # commits, then reads "resolved" and is refused. The same lock serialises the
            # votes of a request that needs several reviewers: M approvers at once would each
            # count M-1 earlier votes and none would resume the run, or two would count M and
            # both would; under the lock each counts the votes committed before it, so exactly
            # one reaches M. (SQLite takes its write lock at BEGIN IMMEDIATE, which serialises
            # the same way; Decision's one-to-one and Approval's unique (request, reviewer)
            # are the database's last word either way.)
            #
            # The same statement reads what the checks below need of other rows (the
            # thread's newest checkpoint, whether the reviewer wrote into it, the steps an
            # in-tool question's call is in) in the snapshot it took before waiting for the
            # lock. Whatever changed those while it waited was a decision of this request,
            # which the status re-read under the lock refuses: only a decision's resume
            # writes the paused thread's next step (and steps are never rewritten).
            locked = _locked_request(pk, getattr(reviewer, "pk", None))
            if getattr(reviewer, "pk", None) is not None:
                wrote = locked.reviewer_wrote  # type: ignore[attr-defined]
                locked.thread.authors_known(reviewer.pk, wrote)
            if locked.status != Interrupt.Status.PENDING:
                raise already_decided(locked)
            if locked.expires_at is not None and locked.expires_at <= timezone.now():
                raise _Overdue(locked.expires_at)
            if resume_interrupt_id != locked.pk:
                raise StaleDecision(
                    f"This answer names request {resume_interrupt_id!r}, not {locked.pk!r}. "
                    "Reload and decide the request the thread waits on."
                )
            check_pending_in_checkpoint(locked)
            forbidden = decision_forbidden(interrupt=locked, user=reviewer)
            if forbidden is not None:
                raise forbidden
            check_refusal_reason(
                value, note, said_no=answer.said_no, agent=locked.agent, reason=locked.reason
            )
            outcome, original, executed = outcome_and_args(locked, value, said_no=answer.said_no)
            if not note and isinstance(value, dict) and isinstance(value.get("note"), str):
                note = value["note"]
            policy = policies.policy_of(locked)
            if policy.needs_several:
                vote = vote_record(locked, reviewer, value, note, outcome, policy, door=door)
                if vote is not None:  # counted; the request waits for more reviewers
                    if isinstance(interrupt, Interrupt):
                        interrupt.claimed_by_id = locked.claimed_by_id
                        interrupt.claimed_at = locked.claimed_at
                    vote.resume_run = None  # type: ignore[attr-defined]
                    return vote
            try:
                decision, run = resolve(
                    locked,
                    status=Interrupt.Status.RESOLVED,
                    outcome=outcome,
                    value=value,
                    by=reviewer,
                    note=note,
                    original_args=original,
                    executed_args=executed,
                    door=door,
                )
            except InputError as exc:
                raise InvalidDecision(str(exc), errors=[f"$: {exc}"]) from None
    except DecisionClash:
        raise already_decided(Interrupt.objects.get(pk=pk)) from None
    except _Overdue as overdue:
        # Declined now, as the worker's next sweep would, rather than left for it.
        expire_due(pk, timezone.now())
        raise StaleDecision(
            f"This request's deadline passed at {when(overdue.at)}, before your answer "
            "came: it is declined as expired. Nothing was recorded."
        ) from None
    # The queued run, for callers that report it (the API answers with its id).
    decision.resume_run = run  # type: ignore[attr-defined]
    if isinstance(interrupt, Interrupt):
        interrupt.status, interrupt.resolved_at = locked.status, locked.resolved_at
    return decision


def _locked_request(pk: str, reviewer_id: Any) -> Interrupt:
    """Request ``pk`` with its row locked (as ``select_for_update(of=("self",))``), its
    thread and who claimed it (as ``select_related``), and the columns the checks read
    with the lock as annotations: one statement (``sql.LOCKED_REQUEST``)."""
    columns = _with_the_lock(reviewer_id)
    params = [p for column in columns.values() for p in column.params]
    with prepared_cursor() as cursor:
        cursor.execute(_locked_request_sql(connection.vendor), [*params, pk])
        found = cursor.fetchone()
    if found is None:
        raise ThreadNotPaused(f"There is no request {pk}.")
    values = iter(found)
    locked = rows.loaded(Interrupt, [next(values) for _ in range(rows.width(Interrupt))])
    thread = rows.loaded(Thread, [next(values) for _ in range(rows.width(Thread))])
    user = get_user_model()
    claimer = [next(values) for _ in range(rows.width(user))]
    Interrupt.thread.field.set_cached_value(locked, thread)
    claimed_by = rows.loaded(user, claimer) if locked.claimed_by_id is not None else None
    Interrupt.claimed_by.field.set_cached_value(locked, claimed_by)
    for name, column in columns.items():
        setattr(locked, name, rows.converted(column, next(values)))
    return locked


def _with_the_lock(reviewer_id: Any) -> dict[str, Any]:
    """The annotations the locking read brings, by name, in the statement's order."""
    return {
        **latest_checkpoint_columns(),
        **asking_steps_columns(),
        "reviewer_wrote": sql.wrote_into_thread(reviewer_id),
    }


@cache
def _locked_request_sql(vendor: str) -> str:
    user = get_user_model()
    columns = _with_the_lock(None).values()
    lock = "FOR UPDATE OF portal_interrupt" if connection.features.has_select_for_update_of else ""
    return sql.LOCKED_REQUEST.format(
        request=rows.columns(Interrupt, Interrupt._meta.db_table),
        thread=rows.columns(Thread, "t"),
        claimer=rows.columns(user, "u"),
        columns=", ".join(f"({column.sql})" for column in columns),
        user_table=user._meta.db_table,
        lock=lock,
    )


def decision_submit_for_thread(
    *,
    thread: Thread,
    reviewer: Any,
    value: Any,
    resume_interrupt_id: str | None,
    note: str = "",
    named: Interrupt | None = None,
    door: str = Decision.Door.API,
) -> Decision | Approval:
    """``decision_submit`` addressed by thread (the JSON API's resume endpoint).

    A request of this thread named by ``resume_interrupt_id`` goes straight to
    ``decision_submit``, which looks at the request before the thread: a late or losing
    answer gets 409 "already decided by X at T" even once the resumed thread has finished.
    Otherwise 404 when the thread's newest checkpoint is not a pause, and 409 when
    ``resume_interrupt_id`` is missing or names no request of this thread.
    """
    # With its schema, which decision_submit would otherwise read in a query of its own.
    # ``named``: the caller read it already (this thread's request resume_interrupt_id).
    if named is None and resume_interrupt_id:
        named = (
            Interrupt.objects.filter(thread=thread, pk=resume_interrupt_id)
            .only("response_schema")
            .first()
        )
    if named is not None:
        return decision_submit(
            interrupt=named,
            reviewer=reviewer,
            value=value,
            resume_interrupt_id=resume_interrupt_id,
            note=note,
            door=door,
        )
    latest = (
        Checkpoint.objects.filter(thread=thread)
        .order_by("-seq")
        .values("status", "interrupt_id")
        .first()
    )
    if latest is None or latest["status"] != Checkpoint.Status.INTERRUPTED:
        raise ThreadNotPaused(
            f"Thread {thread.pk} is not paused (status {thread.status}); there is nothing "
            "to resume."
        )
    if not resume_interrupt_id:
        raise StaleDecision(
            f"Name the request you answer: resume_interrupt_id is required (the thread "
            f"waits on {latest['interrupt_id']!r})."
        )
    raise StaleDecision(
        f"Thread {thread.pk} has no request {resume_interrupt_id!r}; it waits on "
        f"{latest['interrupt_id']!r}."
    )
