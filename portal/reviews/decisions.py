"""Deciding interrupts: the one path every decision takes (dashboard form, admin, JSON API).

``decision_submit`` does everything in one transaction, all or nothing: lock the interrupt,
check against the thread's newest checkpoint that it is still the request the thread waits
on, check role, claim and policy, validate the answer with the runtime's own validator,
record the ``Decision``, resolve the interrupt and queue the resume (``thread_resume``:
the ``Run`` row the worker claims, seen only after commit). Any refusal raises a
``DecisionRefused`` subclass whose ``status_code`` says how an HTTP caller should answer
and whose message can be shown to the user as it is; nothing has been written when one
is raised.

A policy may ask for several reviewers (``approvals_required`` or ``rejections_required``
over 1, see ``portal.models.policies``). Then each answer is a vote, recorded as an ``Approval``
under the same lock, and only the vote that reaches a count records the ``Decision`` and
queues the resume; ``decision_submit`` returns the ``Approval`` for any earlier vote.

Also here: claiming (``interrupt_claim``/``interrupt_unclaim``) and expiry
(``interrupts_expire``, run by ``manage.py expire_interrupts`` and the worker).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import inbox
from agents.interrupt import validate_resume
from agents.schema import json_problem
from agents.state import Message
from agents.tools import OUTCOME_REASON
from portal.accounts import roles
from portal.errors import InputError, Refused
from portal.inputs import check_input
from portal.models import (
    Approval,
    AuditEvent,
    Checkpoint,
    Decision,
    Interrupt,
    Run,
    Thread,
    audit_record,
    policies,
)
from portal.notify import broadcast, outbox
from portal.reviews import external
from portal.runs.queue import enqueue

log = logging.getLogger(__name__)

__all__ = [
    "AlreadyDecided",
    "AlreadyVoted",
    "ClaimConflict",
    "DecisionForbidden",
    "DecisionRefused",
    "InvalidDecision",
    "StaleDecision",
    "ThreadNotPaused",
    "decision_forbidden",
    "decision_submit",
    "decision_submit_for_thread",
    "interrupt_claim",
    "interrupt_expire",
    "interrupt_unclaim",
    "interrupts_expire",
    "quorum_of",
    "thread_resume",
]


class DecisionRefused(Refused):
    """A decision (or claim) was refused; nothing was written."""

    status_code = 400

    def __init__(self, message: str, *, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors: list[str] = list(errors or [])


class AlreadyDecided(DecisionRefused):
    status_code = 409


class AlreadyVoted(DecisionRefused):
    """This reviewer already answered a request that needs several reviewers."""

    status_code = 409


class StaleDecision(DecisionRefused):
    """The form answers a request the thread no longer waits on."""

    status_code = 409


class ThreadNotPaused(DecisionRefused):
    status_code = 404


class DecisionForbidden(DecisionRefused):
    """Role, claim or policy: this user may not decide this request."""

    status_code = 403


class ClaimConflict(DecisionRefused):
    status_code = 409


class InvalidDecision(DecisionRefused):
    """The answer breaks the request's schema (or the note/size limits); see ``errors``."""

    status_code = 422


class _DecisionClash(Exception):
    """The decision's insert broke a unique constraint: the request has one already."""


class _Overdue(Exception):
    """The request's deadline passed before the answer came; the expiry declines it."""

    def __init__(self, at: datetime) -> None:
        super().__init__(at)
        self.at = at


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _who(user: Any) -> str:
    return user.get_username() if user is not None else "the system"


def _already_decided(interrupt: Interrupt) -> DecisionRefused:
    decision = Decision.objects.select_related("reviewer").filter(interrupt=interrupt).first()
    if decision is not None:
        return AlreadyDecided(
            f"This request was already decided by {_who(decision.reviewer)} at "
            f"{_when(decision.created_at)} ({decision.outcome}). Nothing was changed."
        )
    # Resolved without a decision: the thread moved past it (a newer pause superseded it).
    return StaleDecision(
        f"This request is no longer pending (it was {interrupt.status} at "
        f"{_when(interrupt.resolved_at)}). Reload to see what the thread waits on now."
    )


def _check_pending_in_checkpoint(interrupt: Interrupt) -> None:
    # The checkpoint is the source of truth; the Interrupt row is only the queue's index.
    latest = (
        Checkpoint.objects.filter(thread_id=interrupt.thread_id)
        .order_by("-seq")
        .values("status", "interrupt_id")
        .first()
    )
    if latest is None or latest["status"] != Checkpoint.Status.INTERRUPTED:
        raise ThreadNotPaused(
            "This thread is not paused, so there is nothing to decide "
            f"(its status is {interrupt.thread.status})."
        )
    if latest["interrupt_id"] != interrupt.pk:
        raise StaleDecision(
            f"This form answers request {interrupt.pk}, but the thread is now paused on "
            f"request {latest['interrupt_id']}. Reload and decide the current request."
        )


def decision_forbidden(
    *, interrupt: Interrupt, user: Any, claims: bool = True
) -> DecisionRefused | None:
    """Why ``user`` may not decide ``interrupt`` now (role, claim, policy, or their vote is
    in already on a request that needs several reviewers), or None when they may.
    ``decision_submit`` refuses with it; the request page shows it instead of the form.
    ``claims=False`` leaves someone else's claim out: whether they could once it ends."""
    if user is None or not user.is_authenticated:
        return DecisionForbidden("Log in as a reviewer to decide requests.")
    if not roles.can_decide(user):
        return DecisionForbidden("Your role can read this request but not decide it.")
    holder = interrupt.claimed_by if claims else None
    # Claims coordinate reviewers; they do not block whoever may take claims over.
    if holder is not None and holder.pk != user.pk and not roles.can_take_over_claims(user):
        return DecisionForbidden(
            f"{_who(holder)} claimed this request at {_when(interrupt.claimed_at)}; "
            "ask them to release it first."
        )
    try:
        policies.check_decider(interrupt=interrupt, user=user)
    except policies.PolicyViolation as exc:
        return DecisionForbidden(str(exc))
    quorum = quorum_of(interrupt)
    mine = quorum.voted(user) if quorum is not None else None
    if quorum is not None and mine is not None:
        return _already_voted(mine, quorum)
    return None


def _already_voted(mine: Approval, quorum: Quorum) -> AlreadyVoted:
    return AlreadyVoted(
        f"You already answered this request ({mine.outcome}) at {_when(mine.created_at)}; "
        f"it needs {quorum.needed} from other reviewers."
    )


def _schema_has_note(schema: Any) -> bool:
    props = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(props, dict) and "note" in props


def _validate(schema: Any, value: Any, note: str) -> None:
    errors: list[str] = []
    limit = settings.PORTAL_MAX_NOTE_CHARS
    if not isinstance(note, str):
        errors.append(f"note: expected a string, got {type(note).__name__}")
    elif len(note) > limit:
        errors.append(f"note: {len(note):,} characters, over the limit of {limit:,}")
    inner = value.get("note") if isinstance(value, dict) else None
    if isinstance(inner, str) and inner != note and len(inner) > limit:
        errors.append(f"$.note: {len(inner):,} characters, over the limit of {limit:,}")
    problem = json_problem(value)
    if problem is not None:
        raise InvalidDecision("The answer is not JSON data we can store.", errors=[problem])
    refused = inbox.not_allowed(value, schema)
    if refused is not None:
        found = inbox.declared(schema)
        allowed = ", ".join(found.actions) if found else ""
        raise InvalidDecision(
            f"This request allows only these answers: {allowed}; nothing was recorded.",
            errors=[refused],
        )
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > settings.PORTAL_MAX_INPUT_BYTES:
        errors.append(
            f"$: {size} bytes of JSON, over the limit of {settings.PORTAL_MAX_INPUT_BYTES}"
        )
    errors.extend(validate_resume(value, schema))
    if errors:
        # The banner names the real cause; each line is also shown next to its field.
        raise InvalidDecision(f"Not recorded: {'; '.join(errors)}.", errors=errors)


def _asking_call_args(interrupt: Interrupt) -> dict[str, Any] | None:
    """Arguments of the tool call an in-tool ``interrupt()`` belongs to, from the thread's
    checkpoints (newest first: the call is in the step that paused or just before). The
    question about a call a crash cut short names the arguments the call ran with, which
    an approval's edit may have changed from the model's, and those are what a "retry"
    runs again."""
    asked = interrupt.value if isinstance(interrupt.value, dict) else {}
    call = asked.get("tool_call")
    ran_with = call.get("arguments") if isinstance(call, dict) else None
    if interrupt.reason == OUTCOME_REASON and isinstance(ran_with, dict):
        return ran_with
    steps = Checkpoint.objects.filter(
        thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq
    )
    for data in steps.messages_newest_first():
        if not isinstance(data, dict) or data.get("role") != "assistant":
            continue
        for call_id, _name, args in Message.from_dict(data).tool_call_arguments():
            if call_id == interrupt.tool_call_id:
                return args
    return None


def _outcome_and_args(
    interrupt: Interrupt, value: Any, *, said_no: bool = False
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(outcome, original_args, executed_args), args keyed by tool call id.

    Args are recorded when the request approves tool calls: the ToolNode's high-risk
    approval or a breakpoint before the tools (``value["tool_calls"]``, editable through
    ``value["args"]``), or an ``interrupt()`` inside a tool (``tool_call_id`` set;
    editable when it allows "edit"). Executed args are None unless it goes ahead.
    ``said_no``: ``value`` is the typed answer of a yes/no "no" (``from_approval``).
    """
    declared = inbox.declared(interrupt.response_schema)
    if declared is not None:
        outcome, original, executed = _typed_outcome(interrupt, declared, value)
        # A yes/no "no" reaches the agent as an ignore, but the reviewer refused: it is
        # recorded as the rejection a "no" always is; only an explicit ignore is ignored.
        return (Decision.Outcome.REJECTED if said_no else outcome), original, executed
    if value is None:
        outcome = Decision.Outcome.CANCELLED
    elif isinstance(value, dict) and "approved" in value:
        outcome = (
            Decision.Outcome.APPROVED if value["approved"] is True else Decision.Outcome.REJECTED
        )
    elif interrupt.reason == OUTCOME_REASON and isinstance(value, dict):
        # A call a crash cut short: "fail" says it did not happen, so nothing was executed.
        failed = value.get("outcome") == "fail"
        outcome = Decision.Outcome.REJECTED if failed else Decision.Outcome.APPROVED
    else:
        outcome = Decision.Outcome.APPROVED  # an answer to a question, not a yes/no
    calls = interrupt.tool_calls
    if calls:
        original = {call.id: call.args for call in calls}
    elif interrupt.tool_call_id:
        original = {interrupt.tool_call_id: _asking_call_args(interrupt)}
    else:
        return outcome, None, None
    if outcome != Decision.Outcome.APPROVED:
        return outcome, original, None
    executed = dict(original)
    edits = value.get("args") if isinstance(value, dict) and calls else None
    if isinstance(edits, dict):
        for call_id, args in edits.items():
            if call_id in executed and isinstance(args, dict):
                executed[call_id] = args
    if executed != original:
        outcome = Decision.Outcome.EDITED
    return outcome, original, executed


# What each answer of a request that declared its actions is recorded as.
_TYPED_OUTCOMES = {
    "accept": Decision.Outcome.APPROVED,
    "edit": Decision.Outcome.EDITED,
    "response": Decision.Outcome.RESPONDED,
    "ignore": Decision.Outcome.IGNORED,
}


def _typed_outcome(
    interrupt: Interrupt, declared: inbox.Declared, value: Any
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    kind = value.get("type") if isinstance(value, dict) else None
    # None (cancelled) is the only answer without a type that reaches here.
    outcome = _TYPED_OUTCOMES.get(str(kind), Decision.Outcome.CANCELLED)
    calls = interrupt.tool_calls
    if calls:
        # An approval of tool calls (a high-risk tool's, a breakpoint's): arguments keyed
        # by call id, and an edit may change some calls and leave the others as asked.
        asked = {call.id: call.args for call in calls}
        if kind == "accept":
            return outcome, asked, dict(asked)
        if kind == "edit":
            edits = value.get("args") if isinstance(value.get("args"), dict) else {}
            return outcome, asked, {k: edits.get(k, v) for k, v in asked.items()}
        return outcome, asked, None
    offered = declared.args
    if interrupt.tool_call_id:
        offered = _asking_call_args(interrupt) if offered is None else offered
        key = interrupt.tool_call_id
    else:
        key = interrupt.node or "args"
    if offered is None and kind != "edit":
        return outcome, None, None
    original = {key: offered}
    if kind == "accept":
        return outcome, original, dict(original)
    if kind == "edit":
        return outcome, original, {key: value.get("args")}
    return outcome, original, None


def thread_resume(*, thread: Thread, value: Any, interrupt_id: str) -> Run | None:
    """Queue the run that answers ``interrupt_id`` with ``value`` (None: cancelled).

    Called inside the transaction that locked and resolved the interrupt: the ``Run`` row
    is the durable queue, and workers see it (and are woken) only once that commits. An
    external agent's request has no graph to resume: its thread is closed instead and the
    agent told (``portal.reviews.external``), and there is no run (None).
    """
    payload = {"resume": value, "resume_interrupt_id": interrupt_id}
    check_input(payload, "the decision")
    if external.is_external(interrupt_id):
        external.external_request_close(thread=thread, interrupt_id=interrupt_id)
        return None
    # Part of the caller's transaction when there is one, without a savepoint of its own.
    with transaction.atomic(savepoint=False):
        run = enqueue(thread=thread, kind=Run.Kind.RESUME, input=payload)
    return run


def decision_submit(
    *,
    interrupt: Interrupt | str,
    reviewer: Any,
    value: Any,
    resume_interrupt_id: str | None,
    note: str = "",
) -> Decision | Approval:
    """Record ``reviewer``'s answer ``value`` to ``interrupt`` and queue the resume.

    When the request's policy needs several reviewers, the answer is a vote: the
    ``Approval`` is returned while the request waits for more (its ``needed`` says what
    for, in words), and the vote that reaches a count returns the ``Decision``. A second
    vote by the same reviewer raises ``AlreadyVoted`` (409).

    ``resume_interrupt_id`` is the request the client saw (a hidden field in forms); it
    must name this interrupt. When the schema has a ``note`` property and ``value`` has
    none, ``note`` is copied into the value, so the agent sees it. Raises
    ``AlreadyDecided``/``StaleDecision`` (409), ``ThreadNotPaused`` (404),
    ``DecisionForbidden`` (403) or ``InvalidDecision`` (422, with ``errors``).
    """
    pk = interrupt.pk if isinstance(interrupt, Interrupt) else str(interrupt)
    if note is None:
        note = ""
    # Validated before the lock: the schema is fixed when the request is raised, so the
    # answer's fit cannot change, and validating under the lock would make every other
    # decision on this request wait for it. Under the lock only what can change is checked.
    if isinstance(interrupt, Interrupt):
        schema = interrupt.response_schema
    else:
        found = Interrupt.objects.filter(pk=pk).values_list("response_schema", flat=True)
        if not found:
            raise ThreadNotPaused(f"There is no request {pk}.")
        schema = found[0]
    # A yes/no approval to a request that declares typed answers (a high-risk tool's, or a
    # breakpoint's before the tools) is recorded as the typed answer it stands for.
    typed = inbox.from_approval(value, schema)
    said_no = typed is not value and typed.get("type") == "ignore"
    value = typed
    if note and isinstance(value, dict) and "note" not in value and _schema_has_note(schema):
        value = {**value, "note": note}
    _validate(schema, value, note)
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
            try:
                locked = (
                    Interrupt.objects.select_for_update(of=("self",))
                    .select_related("thread", "claimed_by")
                    .get(pk=pk)
                )
            except Interrupt.DoesNotExist:
                raise ThreadNotPaused(f"There is no request {pk}.") from None
            if locked.status != Interrupt.Status.PENDING:
                raise _already_decided(locked)
            if locked.expires_at is not None and locked.expires_at <= timezone.now():
                raise _Overdue(locked.expires_at)
            if resume_interrupt_id != locked.pk:
                raise StaleDecision(
                    f"This answer names request {resume_interrupt_id!r}, not {locked.pk!r}. "
                    "Reload and decide the request the thread waits on."
                )
            _check_pending_in_checkpoint(locked)
            forbidden = decision_forbidden(interrupt=locked, user=reviewer)
            if forbidden is not None:
                raise forbidden
            outcome, original, executed = _outcome_and_args(locked, value, said_no=said_no)
            if not note and isinstance(value, dict) and isinstance(value.get("note"), str):
                note = value["note"]
            policy = policies.policy_for(locked.agent, locked.reason)
            if policy.needs_several:
                vote = _vote(locked, reviewer, value, note, outcome, policy)
                if vote is not None:  # counted; the request waits for more reviewers
                    if isinstance(interrupt, Interrupt):
                        interrupt.claimed_by_id = locked.claimed_by_id
                        interrupt.claimed_at = locked.claimed_at
                    vote.resume_run = None  # type: ignore[attr-defined]
                    return vote
            try:
                decision = Decision.objects.create(
                    interrupt=locked,
                    thread=locked.thread,
                    reviewer=reviewer,
                    value=value,
                    note=note,
                    outcome=outcome,
                    original_args=original,
                    executed_args=executed,
                )
            except IntegrityError:
                # No savepoint to recover in (a round trip each way, for a clash the row lock
                # all but rules out): the transaction rolls back and the refusal is read after.
                raise _DecisionClash from None
            locked.decided_as(Interrupt.Status.RESOLVED, timezone.now())
            outbox.notify_decision(decision, locked)
            try:
                run = thread_resume(thread=locked.thread, value=value, interrupt_id=locked.pk)
            except InputError as exc:
                raise InvalidDecision(str(exc), errors=[f"$: {exc}"]) from None
            broadcast.queue_change_on_commit(locked)
    except _DecisionClash:
        raise _already_decided(Interrupt.objects.get(pk=pk)) from None
    except _Overdue as overdue:
        # Declined now, as the worker's next sweep would, rather than left for it.
        _expire_due(pk, timezone.now())
        raise StaleDecision(
            f"This request's deadline passed at {_when(overdue.at)}, before your answer "
            "came: it is declined as expired. Nothing was recorded."
        ) from None
    # The queued run, for callers that report it (the API answers with its id).
    decision.resume_run = run  # type: ignore[attr-defined]
    if isinstance(interrupt, Interrupt):
        interrupt.status, interrupt.resolved_at = locked.status, locked.resolved_at
    return decision


def _same_answer(a: Any, b: Any) -> bool:
    def bare(value: Any) -> Any:
        return {k: v for k, v in value.items() if k != "note"} if isinstance(value, dict) else value

    return bool(bare(a) == bare(b))


def _vote(
    locked: Interrupt,
    reviewer: Any,
    value: Any,
    note: str,
    outcome: str,
    policy: policies.Policy,
) -> Approval | None:
    """Record ``reviewer``'s vote on ``locked`` (row-locked by the caller). Returns it when
    the request still waits for more; None when this vote reached a count, and the caller
    goes on to record the decision with this answer."""
    votes = list(
        Approval.objects.filter(interrupt=locked).select_related("reviewer").order_by("id")
    )
    quorum = Quorum(policy.approvals_required, policy.rejections_required, votes)
    mine = quorum.voted(reviewer)
    if mine is not None:
        raise _already_voted(mine, quorum)
    goes_ahead = outcome in Approval.GOES_AHEAD
    if outcome == Decision.Outcome.EDITED:
        raise InvalidDecision(
            f"This request needs {policy.approvals_required} approvals, so it can only be "
            "approved as asked or declined: an edit would go ahead with something the other "
            "approvers did not see. Nothing was recorded.",
            errors=["$: edits are not accepted on a request that needs several approvals"],
        )
    approvals = [v for v in votes if v.approves]
    if goes_ahead and approvals and not _same_answer(approvals[0].value, value):
        raise InvalidDecision(
            f"{approvals[0].reviewer.get_username()} approved a different answer; approve the "
            "same one, or decline. Nothing was recorded.",
            errors=["$: differs from the answer already approved"],
        )
    try:
        # A savepoint, so a unique violation leaves the outer transaction usable.
        with transaction.atomic():
            vote = Approval.objects.create(
                interrupt=locked, reviewer=reviewer, outcome=outcome, value=value, note=note
            )
    except IntegrityError:
        raise AlreadyVoted("You already answered this request. Nothing was changed.") from None
    quorum = Quorum(policy.approvals_required, policy.rejections_required, [*votes, vote])
    if (goes_ahead and quorum.approvals >= policy.approvals_required) or (
        not goes_ahead and quorum.rejections >= policy.rejections_required
    ):
        return None
    if locked.claimed_by_id == reviewer.pk:
        # Their part is done: let the next reviewer take the request.
        locked.claimed_by, locked.claimed_at = None, None
        locked.save(update_fields=["claimed_by", "claimed_at"])
        audit_record(
            action=AuditEvent.Action.RELEASE,
            actor=reviewer,
            target=locked,
            detail={"held_by": reviewer.get_username(), "why": "answered"},
        )
    vote.needed = quorum.needed  # type: ignore[attr-defined]
    said = locked.message or "a request"
    broadcast.queue_change_on_commit(
        locked, news=f"{_who(reviewer)} {outcome} “{said}”; it needs {quorum.needed}"
    )
    return vote


@dataclass(frozen=True)
class Quorum:
    """Where a request that needs several reviewers stands: its counts and the votes so
    far, oldest first."""

    approvals_required: int
    rejections_required: int
    votes: list[Approval]

    @property
    def approvals(self) -> int:
        return sum(1 for v in self.votes if v.approves)

    @property
    def rejections(self) -> int:
        return len(self.votes) - self.approvals

    @property
    def needed(self) -> str:
        """What the request still waits for, in words: "1 more approval"."""
        more_yes = max(self.approvals_required - self.approvals, 0)
        parts = [f"{more_yes} more approval{'s' if more_yes != 1 else ''}"]
        if self.rejections_required > 1:
            more_no = max(self.rejections_required - self.rejections, 0)
            parts.append(f"{more_no} more rejection{'s' if more_no != 1 else ''} to decline it")
        return " or ".join(parts)

    def voted(self, user: Any) -> Approval | None:
        return next((v for v in self.votes if v.reviewer_id == user.pk), None)


def quorum_of(interrupt: Any) -> Quorum | None:
    """The votes on ``interrupt`` if its policy needs several reviewers, else None (no
    query then). Uses the ``approvals`` a page prefetched (with their reviewers)."""
    policy = policies.policy_for(interrupt.agent, interrupt.reason)
    if not policy.needs_several:
        return None
    votes: list[Approval] = []
    if isinstance(interrupt, Interrupt) and interrupt.pk:
        cached = getattr(interrupt, "_prefetched_objects_cache", {}).get("approvals")
        if cached is not None:
            votes = list(cached)
        else:
            votes = list(
                Approval.objects.filter(interrupt=interrupt)
                .select_related("reviewer")
                .order_by("id")
            )
    return Quorum(policy.approvals_required, policy.rejections_required, votes)


def decision_submit_for_thread(
    *,
    thread: Thread,
    reviewer: Any,
    value: Any,
    resume_interrupt_id: str | None,
    note: str = "",
) -> Decision | Approval:
    """``decision_submit`` addressed by thread (the JSON API's resume endpoint).

    A request of this thread named by ``resume_interrupt_id`` goes straight to
    ``decision_submit``, which looks at the request before the thread: a late or losing
    answer gets 409 "already decided by X at T" even once the resumed thread has finished.
    Otherwise 404 when the thread's newest checkpoint is not a pause, and 409 when
    ``resume_interrupt_id`` is missing or names no request of this thread.
    """
    # With its schema, which decision_submit would otherwise read in a query of its own.
    named = (
        Interrupt.objects.filter(thread=thread, pk=resume_interrupt_id)
        .only("response_schema")
        .first()
        if resume_interrupt_id
        else None
    )
    if named is not None:
        return decision_submit(
            interrupt=named,
            reviewer=reviewer,
            value=value,
            resume_interrupt_id=resume_interrupt_id,
            note=note,
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


def interrupt_claim(*, interrupt: Interrupt, user: Any) -> Interrupt:
    """Mark ``interrupt`` as held by ``user`` so other reviewers see who is on it.

    A claim held by someone else is refused (409) unless ``user`` may take claims over
    (``roles.can_take_over_claims``). Claiming your own claim again is a no-op.
    """
    if not roles.can_claim(user):
        raise DecisionForbidden("Your role can read this request but not claim it.")
    with transaction.atomic():
        # Row lock: two reviewers clicking "claim" together would both see it unclaimed.
        locked = (
            Interrupt.objects.select_for_update(of=("self",))
            .select_related("claimed_by")
            .get(pk=interrupt.pk)
        )
        if locked.status != Interrupt.Status.PENDING:
            raise _already_decided(locked)
        holder = locked.claimed_by
        if holder is not None and holder.pk != user.pk and not roles.can_take_over_claims(user):
            raise ClaimConflict(
                f"{_who(holder)} already claimed this request at {_when(locked.claimed_at)}."
            )
        if holder is None or holder.pk != user.pk:
            locked.claimed_by, locked.claimed_at = user, timezone.now()
            locked.save(update_fields=["claimed_by", "claimed_at"])
            taken = {"taken_over_from": holder.get_username()} if holder is not None else {}
            audit_record(action=AuditEvent.Action.CLAIM, actor=user, target=locked, detail=taken)
            broadcast.queue_change_on_commit(locked)
    interrupt.claimed_by, interrupt.claimed_at = locked.claimed_by, locked.claimed_at
    return interrupt


def interrupt_unclaim(*, interrupt: Interrupt, user: Any) -> Interrupt:
    """Release a claim. Only its holder, or a user who may take claims over, may; releasing
    nothing is a no-op."""
    if not roles.can_claim(user):
        raise DecisionForbidden("Your role can read this request but not release claims.")
    with transaction.atomic():
        # Row lock: a release racing a takeover must not clear the new holder's claim.
        locked = (
            Interrupt.objects.select_for_update(of=("self",))
            .select_related("claimed_by")
            .get(pk=interrupt.pk)
        )
        holder = locked.claimed_by
        if holder is not None:
            if holder.pk != user.pk and not roles.can_take_over_claims(user):
                raise DecisionForbidden(
                    f"{_who(holder)} holds this claim; only they or an admin can release it."
                )
            locked.claimed_by, locked.claimed_at = None, None
            locked.save(update_fields=["claimed_by", "claimed_at"])
            audit_record(
                action=AuditEvent.Action.RELEASE,
                actor=user,
                target=locked,
                detail={"held_by": holder.get_username()},
            )
            broadcast.queue_change_on_commit(locked, by=user)
    interrupt.claimed_by, interrupt.claimed_at = None, None
    return interrupt


def _decline_value(interrupt: Interrupt, now: datetime) -> Any:
    # Fail closed: a yes/no request, or a typed approval of tool calls, gets an explicit no
    # with the reason, which the runtime hands back to the model as the calls' decline;
    # anything else gets None (cancelled).
    schema = interrupt.response_schema
    reason = f"The request expired at {_when(now)} without a decision."
    found = inbox.declared(schema)
    if found is not None and interrupt.tool_calls and "ignore" in found.actions:
        return {"type": "ignore", "note": reason}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(props, dict) and "approved" in props:
        value: dict[str, Any] = {"approved": False}
        if "note" in props:
            value["note"] = reason
        if not validate_resume(value, schema):
            return value
    return None


def interrupts_expire(now: datetime | None = None) -> list[Decision]:
    """Resolve every pending interrupt whose ``expires_at`` has passed as expired and
    queue a declining resume for its thread. Returns the decisions recorded."""
    now = now or timezone.now()
    due = list(
        Interrupt.objects.filter(
            status=Interrupt.Status.PENDING, expires_at__isnull=False, expires_at__lte=now
        ).values_list("pk", flat=True)
    )
    recorded = [_expire_due(pk, now) for pk in due]
    return [decision for decision in recorded if decision is not None]


def _expire_due(pk: str, now: datetime) -> Decision | None:
    """Expire the overdue request ``pk`` in a transaction of its own; None if it is no
    longer pending, or could not be expired (logged, and tried again next sweep)."""
    try:
        with transaction.atomic():
            # Row lock, skipping rows a reviewer is deciding right now: the expiry and a
            # last-second decision race for the same request, and whoever locks first
            # wins; the other sees it is no longer pending.
            locked = (
                Interrupt.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("thread")
                .filter(pk=pk, status=Interrupt.Status.PENDING)
                .first()
            )
            if locked is None:
                return None
            try:
                _check_pending_in_checkpoint(locked)
            except DecisionRefused:
                return None
            return _expire(locked, now, by=None)
    except Exception:
        # One request that cannot be expired (its agent's data, a bug) must not keep
        # every overdue request after it pending.
        log.exception("expiring request %s failed; the others go on", pk)
        return None


def _expire(locked: Interrupt, now: datetime, *, by: Any) -> Decision:
    """Resolve the row-locked, pending ``locked`` as expired and queue a declining resume."""
    value = _decline_value(locked, now)
    note = f"Expired at {_when(now)} without a decision."
    if by is not None:
        note = f"Expired by {_who(by)} at {_when(now)} without a decision."
    decision = Decision.objects.create(
        interrupt=locked,
        thread=locked.thread,
        reviewer=by,
        value=value,
        note=note,
        outcome=Decision.Outcome.EXPIRED,
        original_args=_outcome_and_args(locked, None)[1],
    )
    locked.decided_as(Interrupt.Status.EXPIRED, now)
    outbox.notify_decision(decision, locked)
    thread_resume(thread=locked.thread, value=value, interrupt_id=locked.pk)
    broadcast.queue_change_on_commit(locked)
    return decision


def interrupt_expire(*, interrupt: Interrupt, user: Any) -> Decision:
    """Expire one pending request now, as if its time had run out (the admin's bulk
    action): the run resumes with a decline, and the decision names ``user``.

    A decline is a decision, so ``user`` must be allowed to decide this request as
    ``decision_submit`` would allow them: the role, another reviewer's claim, the policy's
    separation of duties and group, and a vote already cast (``DecisionForbidden``).
    ``AlreadyDecided`` or ``StaleDecision`` when it is no longer pending.
    """
    if user is None or not roles.can_decide(user):
        raise DecisionForbidden("Expiring a request declines it: that needs the decide permission.")
    now = timezone.now()
    with transaction.atomic():
        # Row lock. The race: a reviewer deciding this request, or the expiry job, at the
        # same moment; whoever locks it first wins and the other sees it is not pending.
        locked = (
            Interrupt.objects.select_for_update(of=("self",))
            .select_related("thread", "claimed_by")
            .get(pk=interrupt.pk)
        )
        if locked.status != Interrupt.Status.PENDING:
            raise _already_decided(locked)
        _check_pending_in_checkpoint(locked)
        forbidden = decision_forbidden(interrupt=locked, user=user)
        if forbidden is not None:
            raise forbidden
        decision = _expire(locked, now, by=user)
        audit_record(
            action=AuditEvent.Action.EXPIRE,
            actor=user,
            target=locked,
            detail={"thread": str(locked.thread_id), "decision": decision.pk},
        )
    interrupt.status, interrupt.resolved_at = locked.status, locked.resolved_at
    return decision
