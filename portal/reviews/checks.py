"""The ``check_…`` step of a decision: what is checked, and how a refusal reads.

``check_decision`` validates the answer before any lock (the schema is fixed when the
request is raised). What can change while someone else acts (the request's status, the
thread's pause, role, claim, policy, votes) is checked under the row lock by the
writers, with ``already_decided``, ``check_pending_in_checkpoint`` and
``decision_forbidden``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents import inbox
from agents.interrupt import validate_resume
from agents.schema import json_problem
from portal.accounts import roles
from portal.errors import (
    AlreadyDecided,
    DecisionForbidden,
    DecisionRefused,
    InvalidDecision,
    StaleDecision,
    ThreadNotPaused,
    when,
    who,
)
from portal.models import Checkpoint, Decision, Interrupt, policies
from portal.reviews import sql
from portal.reviews.quorum import already_voted, quorum_of
from portal.reviews.words import REFUSAL_NOTE_NEEDED, decided_by_words

__all__ = [
    "Answer",
    "already_decided",
    "check_decision",
    "check_pending_in_checkpoint",
    "check_refusal_reason",
    "decision_forbidden",
]


@dataclass(frozen=True)
class Answer:
    """An answer that passed ``check_decision``, as it will be recorded."""

    pk: str
    value: Any
    note: str
    # The typed answer of a yes/no "no" (recorded as a rejection, see outcomes).
    said_no: bool


def check_decision(*, interrupt: Interrupt | str, value: Any, note: str | None) -> Answer:
    """Validate ``value`` (and ``note``) against the request's schema, outside any lock.

    A yes/no approval to a request that declares typed answers becomes the typed answer
    it stands for; a ``note`` the schema has room for is copied into the value, so the
    agent sees it. Raises ``ThreadNotPaused`` (no such request) or ``InvalidDecision``.
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
    return Answer(pk=pk, value=value, note=note, said_no=said_no)


def refusal_kind(value: Any, *, said_no: bool = False) -> str | None:
    """ "reject" or "ignore" when ``value`` declines (a yes/no "no", an ignore), else None.
    A response is not one: its text is the reason."""
    if not isinstance(value, dict):
        return None
    if said_no or value.get("approved") is False:
        return "reject"
    return "ignore" if value.get("type") == "ignore" else None


def check_refusal_reason(value: Any, note: str, *, said_no: bool, agent: str, reason: str) -> None:
    """A rejection or an ignore needs a note (the agent and whoever asked read it as the
    reason), unless the request's policy says ``refusal_needs_note: false``. Checked under
    the lock after the status, so a late answer hears "already decided" first."""
    kind = refusal_kind(value, said_no=said_no)
    if kind is None or not policies.policy_for(agent, reason).refusal_needs_note:
        return
    # The note, or a reason the request's own schema asks for.
    given = [note] + [value.get(k) for k in ("note", "reason") if isinstance(value, dict)]
    if any(isinstance(text, str) and text.strip() for text in given):
        return
    what = REFUSAL_NOTE_NEEDED[kind]
    raise InvalidDecision(f"Not recorded: {what}", errors=[f"$.note: {what}"])


def already_decided(interrupt: Interrupt) -> DecisionRefused:
    decision = Decision.objects.select_related("reviewer").filter(interrupt=interrupt).first()
    if decision is not None:
        return AlreadyDecided(
            f"This request was already decided by {decided_by_words(decision)} at "
            f"{when(decision.created_at)} ({decision.outcome}). Nothing was changed."
        )
    # Resolved without a decision: the thread moved past it (a newer pause superseded it).
    return StaleDecision(
        f"This request is no longer pending (it was {interrupt.status} at "
        f"{when(interrupt.resolved_at)}). Reload to see what the thread waits on now."
    )


def check_pending_in_checkpoint(interrupt: Interrupt) -> None:
    # The checkpoint is the source of truth; the Interrupt row is only the queue's index.
    # Read with the locked row when its query asked (``latest_checkpoint_columns``).
    latest: Any
    if "latest_checkpoint_status" in interrupt.__dict__:
        status = interrupt.latest_checkpoint_status  # type: ignore[attr-defined]
        latest = (
            None
            if status is None
            else {
                "status": status,
                "interrupt_id": interrupt.latest_checkpoint_interrupt,  # type: ignore[attr-defined]
            }
        )
    else:
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


def latest_checkpoint_columns() -> dict[str, Any]:
    """Annotations of an interrupt query: its thread's newest checkpoint's status and
    request, for ``check_pending_in_checkpoint`` (read in the query that locks the row)."""
    return {
        "latest_checkpoint_status": sql.latest_checkpoint("status"),
        "latest_checkpoint_interrupt": sql.latest_checkpoint("interrupt_id"),
    }


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
    holder = interrupt.claim_holder() if claims else None
    # Claims coordinate reviewers; they do not block whoever may take claims over, and a
    # lapsed claim blocks nobody.
    if holder is not None and holder.pk != user.pk and not roles.can_take_over_claims(user):
        return DecisionForbidden(
            f"{who(holder)} claimed this request at {when(interrupt.claimed_at)}; ask them "
            f"to release it, or wait: the claim lapses at {when(interrupt.claim_ends_at)}."
        )
    try:
        policies.check_decider(interrupt=interrupt, user=user)
    except policies.PolicyViolation as exc:
        return DecisionForbidden(str(exc))
    quorum = quorum_of(interrupt)
    mine = quorum.voted(user) if quorum is not None else None
    if quorum is not None and mine is not None:
        return already_voted(mine, quorum)
    return None


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
