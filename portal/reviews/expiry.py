"""Expiry: a request whose deadline passed is declined as expired.

``interrupts_expire`` (run by ``manage.py expire_interrupts`` and the worker) sweeps every
overdue request; ``interrupt_expire`` expires one now (the admin's action). Either way
the run resumes with a decline (fail closed), through ``resolve``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import inbox
from agents.interrupt import validate_resume
from portal.accounts import roles
from portal.errors import DecisionForbidden, DecisionRefused, when, who
from portal.models import AuditEvent, Decision, Interrupt, audit_record
from portal.reviews.checks import already_decided, check_pending_in_checkpoint, decision_forbidden
from portal.reviews.claims import claims_lapsed_announce
from portal.reviews.outcomes import outcome_and_args
from portal.reviews.resolve import resolve

log = logging.getLogger(__name__)

__all__ = ["expire_due", "interrupt_expire", "interrupts_expire"]


def _decline_value(interrupt: Interrupt, now: datetime) -> Any:
    # Fail closed: a yes/no request, or a typed approval of tool calls, gets an explicit no
    # with the reason, which the runtime hands back to the model as the calls' decline;
    # anything else gets None (cancelled).
    schema = interrupt.response_schema
    reason = f"The request expired at {when(now)} without a decision."
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


# Where this process's last sweep ended: the next one announces the claims that lapsed
# since (a first sweep looks back one minute, so a restart misses none in practice).
_swept_until: list[datetime] = []


def interrupts_expire(now: datetime | None = None) -> list[Decision]:
    """Resolve every pending interrupt whose ``expires_at`` has passed as expired and
    queue a declining resume for its thread; announce the claims that lapsed since the
    last sweep (``claims_lapsed_announce``). Returns the decisions recorded."""
    now = now or timezone.now()
    since = _swept_until[0] if _swept_until else now - timedelta(minutes=1)
    _swept_until[:] = [max(now, since)]
    if since < now:
        claims_lapsed_announce(since=since, now=now)
    due = list(
        Interrupt.objects.filter(
            status=Interrupt.Status.PENDING, expires_at__isnull=False, expires_at__lte=now
        ).values_list("pk", flat=True)
    )
    recorded = [expire_due(pk, now) for pk in due]
    return [decision for decision in recorded if decision is not None]


def expire_due(pk: str, now: datetime) -> Decision | None:
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
                check_pending_in_checkpoint(locked)
            except DecisionRefused:
                return None
            return _expire(locked, now, by=None)
    except Exception:
        # One request that cannot be expired (its agent's data, a bug) must not keep
        # every overdue request after it pending.
        log.exception("expiring request %s failed; the others go on", pk)
        return None


def _expire(locked: Interrupt, now: datetime, *, by: Any, door: str = "") -> Decision:
    """Resolve the row-locked, pending ``locked`` as expired and queue a declining resume."""
    value = _decline_value(locked, now)
    note = f"Expired at {when(now)} without a decision."
    if by is not None:
        note = f"Expired by {who(by)} at {when(now)} without a decision."
    decision, _run = resolve(
        locked,
        status=Interrupt.Status.EXPIRED,
        outcome=Decision.Outcome.EXPIRED,
        value=value,
        by=by,
        note=note,
        original_args=outcome_and_args(locked, None)[1],
        at=now,
        door=door,
    )
    return decision


def interrupt_expire(*, interrupt: Interrupt, user: Any, door: str = "") -> Decision:
    """Expire one pending request now, as if its time had run out (the admin's bulk
    action): the run resumes with a decline, and the decision names ``user`` and ``door``
    (a ``Decision.Door``; the audit event says it too).

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
            raise already_decided(locked)
        check_pending_in_checkpoint(locked)
        forbidden = decision_forbidden(interrupt=locked, user=user)
        if forbidden is not None:
            raise forbidden
        decision = _expire(locked, now, by=user, door=door)
        audit_record(
            action=AuditEvent.Action.EXPIRE,
            actor=user,
            target=locked,
            detail={"thread": str(locked.thread_id), "decision": decision.pk, "door": door},
        )
    interrupt.status, interrupt.resolved_at = locked.status, locked.resolved_at
    return decision
