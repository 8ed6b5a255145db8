"""Notifications that are never lost: the outbox, written with its cause, and its subscriptions.

An event is a ``Notification`` row written by ``outbox_enqueue`` in the same transaction
as its cause (a new request, a decision, a failed run...): rolled back together, committed
together. Nothing is sent from inside a request or a run: the notifier fans it out
(``notifier.outbox_dispatch``) and sends it (``delivery.outbox_deliver``, also importable
from here). The events' kinds and words are in ``events``. More in docs/architecture.md
(``## notify``).
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.models import (
    AuditEvent,
    Decision,
    Delivery,
    Interrupt,
    Notification,
    Run,
    Subscription,
    audit_record,
    rule_of,
    together,
    waiting,
)
from portal.notify.delivery import backoff, outbox_deliver, send
from portal.notify.events import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    KINDS,
    REQUEST_ASSIGNED,
    REQUEST_CREATED,
    REQUEST_DECIDED,
    REQUEST_ESCALATED,
    REQUEST_EXPIRED,
    REQUEST_REMINDER,
    REQUEST_WITHDRAWN,
    RULE_CAP_REACHED,
    RUN_FAILED,
    SLACK_REPLY,
    TO_ASSIGNEES,
    Channel,
    SendError,
    Target,
    TargetError,
    addresses,
    check_target,
    envelope,
    iso,
    request_payload,
    summary,
)

__all__ = [
    "EVENT_ID_HEADER",
    "EVENT_TYPE_HEADER",
    "KINDS",
    "REQUEST_ASSIGNED",
    "REQUEST_CREATED",
    "REQUEST_DECIDED",
    "REQUEST_ESCALATED",
    "REQUEST_EXPIRED",
    "REQUEST_REMINDER",
    "REQUEST_WITHDRAWN",
    "RULE_CAP_REACHED",
    "RUN_FAILED",
    "SLACK_REPLY",
    "TO_ASSIGNEES",
    "SendError",
    "Target",
    "TargetError",
    "addresses",
    "backoff",
    "check_subscription",
    "check_target",
    "envelope",
    "notify_decision",
    "notify_run_failed",
    "outbox_deliver",
    "outbox_enqueue",
    "request_payload",
    "send",
    "subscription_delete",
    "subscription_save",
    "summary",
    "wake_event",
    "wake_on_commit",
]


# A notifier waits on this; it is set by this process's commits, and on PostgreSQL by any
# process's (the notifier listens for ``waiting.OUTBOX_KEY``).
wake_event = threading.Event()


def wake_on_commit() -> None:
    """Wake the notifiers once the current transaction commits: the in-process one at once
    and, on PostgreSQL, those of other processes by NOTIFY (a rollback wakes nobody)."""
    waiting.changed(waiting.OUTBOX_KEY)
    transaction.on_commit(wake_event.set)


def outbox_enqueue(
    *,
    kind: str,
    payload: dict[str, Any] | None = None,
    agent: str = "",
    reason: str = "",
    interrupt: Interrupt | None = None,
    thread_id: Any = None,
    to: Target | None = None,
) -> Notification:
    """Record an event to announce, in the caller's transaction (or one of its own).

    Without ``to`` it goes to every active subscription that matches its kind, agent,
    reason and the groups its request is routed to; with ``to``, to that one target only
    (a webhook, a Slack URL or email addresses; ``TargetError`` when it cannot be used).
    The notifier sends it once this commits; ``Notification.id`` is the event id the
    receiver sees in ``Portal-Event-Id``.
    """
    if to is not None:
        to.check()
    if interrupt is not None:
        agent, reason = agent or interrupt.agent, reason or interrupt.reason
        thread_id = thread_id or interrupt.thread_id
    now = timezone.now()
    # No savepoint inside a caller's transaction (a round trip each way): nothing recovers
    # from a failure here, which fails the caller's transaction as a whole.
    with transaction.atomic(savepoint=False):
        note = Notification(
            kind=kind,
            payload=payload or {},
            agent=agent,
            reason=reason,
            interrupt=interrupt,
            thread_id=thread_id,
            created_at=now,
            # A named target needs no fan-out: its one delivery is written here.
            dispatched_at=now if to is not None else None,
        )
        if to is None:
            together.insert(note)  # with the caller's other last writes, when it gathers them
        else:  # its delivery refers to it: written now
            note.save(force_insert=True)
            Delivery.objects.create(
                notification=note, channel=to.channel, target=to.target, secret=to.secret
            )
        wake_on_commit()
    return note


# --- subscriptions (the admin's writes) -------------------------------------------------


def check_subscription(
    *, channel: str, target: str, secret: str, events: Any, has_group: bool
) -> None:
    """Raise ``TargetError`` naming what makes a subscription undeliverable."""
    if channel == Channel.SLACK_RESPONSE:
        raise TargetError("a reply to a Slack interaction is not a channel to subscribe to")
    if channel != Channel.EMAIL or target:
        check_target(channel, target, secret)
    elif not has_group:
        raise TargetError("an email subscription needs addresses, or a group to mail")
    if not isinstance(events, list) or any(k not in KINDS for k in events):
        raise TargetError(f"events must be a list of any of {', '.join(KINDS)}; got {events!r}")


def subscription_save(*, subscription: Subscription, user: Any) -> Subscription:
    """Create or change a subscription (the admin's form calls this). Raises
    ``TargetError`` when it could not be delivered to."""
    check_subscription(
        channel=subscription.channel,
        target=subscription.target,
        secret=subscription.secret,
        events=subscription.events,
        has_group=subscription.group_id is not None,
    )
    with transaction.atomic():
        created = subscription.pk is None
        subscription.save()
        audit_record(
            action=(
                AuditEvent.Action.SUBSCRIPTION_CREATE
                if created
                else AuditEvent.Action.SUBSCRIPTION_CHANGE
            ),
            actor=user,
            target=subscription,
            detail=_subscription_detail(subscription),
        )
    return subscription


def _subscription_detail(subscription: Subscription) -> dict[str, Any]:
    # Never the secret, nor a Slack URL (which is one).
    shown = subscription.target if subscription.channel != Channel.SLACK else ""
    return {
        "name": subscription.name,
        "channel": subscription.channel,
        "target": shown[:200],
        "events": subscription.events,
        "agent": subscription.agent,
        "reason": subscription.reason,
        "group": subscription.group.name if subscription.group is not None else "",
        "active": subscription.active,
    }


def subscription_delete(*, subscription: Subscription, user: Any) -> None:
    """Remove a subscription; deliveries already written keep going out."""
    with transaction.atomic():
        detail = _subscription_detail(subscription)
        target = ("subscription", subscription.pk)
        subscription.delete()
        audit_record(
            action=AuditEvent.Action.SUBSCRIPTION_DELETE, actor=user, target=target, detail=detail
        )


# --- the portal's events, written by their causes ---------------------------------------


def notify_decision(decision: Decision, interrupt: Interrupt) -> Notification:
    """The event for a request that left the queue with ``decision`` (decided, expired
    or withdrawn); written by the decision services in their transaction."""
    if decision.outcome == Decision.Outcome.EXPIRED:
        kind = REQUEST_EXPIRED
    elif decision.is_withdrawal(interrupt.thread):
        kind = REQUEST_WITHDRAWN
    else:
        kind = REQUEST_DECIDED
    reviewer = decision.reviewer.get_username() if decision.reviewer is not None else None
    rule = decision.rule_version
    payload = {
        "request": request_payload(interrupt),
        "decision": {
            "outcome": decision.outcome,
            "reviewer": reviewer,
            "note": decision.note,
            "at": iso(decision.created_at),
            # A decision rule's version decided (no person): which, with its hash.
            "rule": rule_of(decision),
            "rule_words": str(rule) if rule is not None else None,
        },
    }
    return outbox_enqueue(kind=kind, payload=payload, interrupt=interrupt)


def notify_run_failed(run: Run, *, agent: str) -> Notification:
    """The event for a run that failed; written by the worker with the failure."""
    payload = {
        "run": {"id": str(run.pk), "kind": run.kind, "error": run.error},
        "thread": {"id": str(run.thread_id), "agent": agent},
    }
    return outbox_enqueue(kind=RUN_FAILED, payload=payload, agent=agent, thread_id=run.thread_id)
