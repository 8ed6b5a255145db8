"""Claims: a reviewer marks a request as theirs so others see who is on it.

A claim coordinates reviewers; it does not block whoever may take claims over
(``roles.can_take_over_claims``), and it lapses ``PORTAL_CLAIM_EXPIRES_SECONDS`` after it
was taken (``Interrupt.claim_holder``), so a reviewer who walked away stops nobody.
``decision_forbidden`` reads it under the row lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.accounts import roles
from portal.errors import ClaimConflict, DecisionForbidden, when, who
from portal.models import AuditEvent, Interrupt, audit_record
from portal.notify import broadcast
from portal.reviews.checks import already_decided

__all__ = ["claims_lapsed_announce", "interrupt_claim", "interrupt_unclaim"]


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
            raise already_decided(locked)
        holder, now = locked.claimed_by, timezone.now()
        live = locked.claim_holder(now)
        if live is not None and live.pk != user.pk and not roles.can_take_over_claims(user):
            raise ClaimConflict(
                f"{who(live)} already claimed this request at {when(locked.claimed_at)}; "
                f"the claim lapses at {when(locked.claim_ends_at)}."
            )
        if holder is None or holder.pk != user.pk or live is None:
            locked.claimed_by, locked.claimed_at = user, now
            locked.save(update_fields=["claimed_by", "claimed_at"])
            # A takeover names whom it was taken from, and whether their claim had lapsed.
            taken = {}
            if holder is not None and holder.pk != user.pk:
                taken = {"taken_over_from": holder.get_username(), "lapsed": live is None}
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
            lapsed = locked.claim_holder() is None
            if holder.pk != user.pk and not lapsed and not roles.can_take_over_claims(user):
                raise DecisionForbidden(
                    f"{who(holder)} holds this claim; only they or an admin can release it."
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


def claims_lapsed_announce(*, since: datetime, now: datetime) -> int:
    """Tell open queues and request pages about each claim that lapsed in (since, now].

    A lapse is the clock's doing, not a write, so nothing else announces it; the sweep
    that expires overdue requests calls this with the window since its last run. Returns
    how many were announced."""
    lasts = timedelta(seconds=settings.PORTAL_CLAIM_EXPIRES_SECONDS)
    lapsed = Interrupt.objects.filter(
        status=Interrupt.Status.PENDING,
        claimed_by__isnull=False,
        claimed_at__gt=since - lasts,
        claimed_at__lte=now - lasts,
    ).only("id", "thread_id", "agent", "reason", "status")
    count = 0
    for interrupt in lapsed:
        broadcast.publish_queue_change(
            interrupt_id=interrupt.pk,
            thread_id=interrupt.thread_id,
            agent=interrupt.agent,
            reason=interrupt.reason,
            status=interrupt.status,
        )
        count += 1
    return count
