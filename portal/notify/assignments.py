"""Routing requests to people: assignment, reminders and escalation.

More in docs/architecture.md (`notify/assignments.py`)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from portal.models import (
    Assignment,
    AuditEvent,
    Checkpoint,
    Interrupt,
    RoutingEvent,
    audit_record,
    policies,
)
from portal.notify import outbox

log = logging.getLogger(__name__)

__all__ = [
    "assigned_to",
    "request_assign",
    "request_route",
    "requests_remind_and_escalate",
    "routed_group_ids",
]


def assigned_to(user: Any) -> Q:
    """A filter on ``Interrupt`` for the requests assigned to ``user`` or their groups."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Q(pk__in=[])
    mine = Assignment.objects.filter(interrupt_id=OuterRef("pk")).filter(
        Q(user_id=user.pk) | Q(group__in=user.groups.all())
    )
    return Q(Exists(mine))


def routed_group_ids(interrupt_id: str, *, agent: str, reason: str) -> set[int]:
    """The groups a request is routed to: assigned or escalated to, or required by its
    policy (subscriptions narrowed to a group match these)."""
    ids = set(
        Assignment.objects.filter(interrupt_id=interrupt_id, group__isnull=False).values_list(
            "group_id", flat=True
        )
    )
    required = policies.policy_for(agent, reason).required_group
    if required:
        ids.update(Group.objects.filter(name=required).values_list("pk", flat=True))
    return ids


def _asked_for(interrupt: Interrupt) -> list[str]:
    """Whom the agent named when it asked, from the checkpoint that raised the request."""
    raised = (
        Checkpoint.objects.filter(thread_id=interrupt.thread_id, seq=interrupt.checkpoint_seq)
        .values_list("interrupt", flat=True)
        .first()
    )
    names = raised.get("assign_to") if isinstance(raised, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def request_assign(
    *, interrupt: Interrupt, names: list[str], source: str, announce: bool = True
) -> list[str]:
    """Assign ``interrupt`` to ``names`` (``"user:<username>"``/``"group:<name>"``),
    record each assignment and announce it; returns the names newly assigned.

    Runs in the caller's transaction (the fan-out's or the escalation's). With
    ``announce`` off the caller records and announces it (an escalation does).
    """
    users = {u.get_username(): u for u in _users([n[5:] for n in names if n.startswith("user:")])}
    groups = {
        g.name: g
        for g in Group.objects.filter(name__in=[n[6:] for n in names if n.startswith("group:")])
    }
    added: list[str] = []
    missing: list[str] = []
    usernames: list[str] = []
    for name in dict.fromkeys(names):
        kind, _, rest = name.partition(":")
        user = users.get(rest) if kind == "user" else None
        group = groups.get(rest) if kind == "group" else None
        if user is None and group is None:
            missing.append(name)
            continue
        try:
            # A savepoint: a name assigned before (by the policy and the agent both, or
            # an escalation to a group already assigned) leaves the outer work usable.
            with transaction.atomic():
                Assignment.objects.create(
                    interrupt=interrupt, user=user, group=group, source=source
                )
        except IntegrityError:
            continue
        if announce:
            _record(interrupt, RoutingEvent.Action.ASSIGNED, user=user, group=group, detail=source)
        added.append(name)
        if user is not None:
            usernames.append(user.get_username())
        elif group is not None:
            members = group.user_set.filter(is_active=True).values_list("username", flat=True)
            usernames.extend(members)
    if missing:
        log.warning("request %s: no user or group for %s; skipped", interrupt.pk, missing)
    if added and announce:
        outbox.outbox_enqueue(
            kind=outbox.REQUEST_ASSIGNED,
            payload={
                "request": outbox.request_payload(interrupt),
                "assigned": added,
                "assignees": sorted(set(usernames)),
            },
            interrupt=interrupt,
        )
    return added


def _users(usernames: list[str]) -> QuerySet[Any]:
    model = get_user_model()
    return model.objects.filter(**{f"{model.USERNAME_FIELD}__in": usernames}, is_active=True)


def request_route(*, interrupt: Interrupt) -> list[str]:
    """Assign a new request as its policy and its agent say (see the module docstring)."""
    if interrupt.status != Interrupt.Status.PENDING:
        return []
    policy = policies.policy_for(interrupt.agent, interrupt.reason)
    added = []
    if policy.assign_to:
        added += request_assign(
            interrupt=interrupt, names=list(policy.assign_to), source=Assignment.Source.POLICY
        )
    asked = _asked_for(interrupt)
    if asked:
        added += request_assign(
            interrupt=interrupt, names=asked, source=Assignment.Source.INTERRUPT
        )
    return added


def _remind_at(interrupt: Interrupt, policy: policies.Policy) -> datetime | None:
    if interrupt.expires_at is None or policy.remind_before is None:
        return None
    return interrupt.expires_at - policy.remind_before


def _escalate_at(interrupt: Interrupt, policy: policies.Policy) -> datetime | None:
    remind = _remind_at(interrupt, policy)
    if remind is None or policy.escalate_after is None or not policy.escalate_to:
        return None
    return remind + policy.escalate_after


# Requests one sweep acts on at most; the next sweep takes the rest.
SWEEP_LIMIT = 500


def requests_remind_and_escalate(now: datetime | None = None) -> tuple[int, int]:
    """Send due reminders and escalate due requests; returns (reminded, escalated)."""
    now = now or timezone.now()
    reminded = escalated = 0
    done = RoutingEvent.objects.filter(interrupt_id=OuterRef("pk"))
    # Every policy's reminder falls before its expiry, so only requests expiring within
    # the longest remind_before can be due; their policies decide the rest.
    horizon = _longest_remind_before()
    if horizon is None:
        return 0, 0
    candidates = (
        Interrupt.objects.filter(
            status=Interrupt.Status.PENDING,
            expires_at__isnull=False,
            expires_at__lte=now + horizon,
        )
        .exclude(Exists(done.filter(action=RoutingEvent.Action.ESCALATED)))
        .annotate(reminded=Exists(done.filter(action=RoutingEvent.Action.REMINDED)))
        .only("pk", "agent", "reason", "expires_at")
        .order_by("expires_at", "pk")
    )
    # Only what is due now is locked, soonest expiry first: requests reminded and waiting
    # for nothing more stay candidates until decided, and must not crowd out the rest.
    due = [
        c.pk
        for c in candidates.iterator(chunk_size=1000)
        if any(_due(c, {RoutingEvent.Action.REMINDED} if c.reminded else set(), now))
    ]
    for pk in due[:SWEEP_LIMIT]:
        with transaction.atomic():
            # Row lock, skipping a request someone is deciding: several notifiers sweep at
            # once, and a decision may land now; either way the request is left alone.
            locked = (
                Interrupt.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(pk=pk, status=Interrupt.Status.PENDING)
                .first()
            )
            if locked is None:
                continue
            done_here = set(locked.routing_events.values_list("action", flat=True))
            remind, escalate = _due(locked, done_here, now)
            if remind:
                _remind(locked)
                reminded += 1
            if escalate:
                policy = policies.policy_for(locked.agent, locked.reason)
                _escalate(locked, policy.escalate_to or "")
                escalated += 1
    return reminded, escalated


def _due(interrupt: Interrupt, done: set[str], now: datetime) -> tuple[bool, bool]:
    """Whether ``interrupt``'s reminder and its escalation are due now, given the routing
    actions already ``done`` to it."""
    policy = policies.policy_for(interrupt.agent, interrupt.reason)
    remind = _remind_at(interrupt, policy)
    escalate = _escalate_at(interrupt, policy)
    return (
        RoutingEvent.Action.REMINDED not in done and remind is not None and remind <= now,
        RoutingEvent.Action.ESCALATED not in done and escalate is not None and escalate <= now,
    )


def _longest_remind_before() -> timedelta | None:
    longest: timedelta | None = None
    for key in policies.configured_keys():
        agent, _, reason = key.partition(":")
        before = policies.policy_for(agent, reason).remind_before
        if before is not None and (longest is None or before > longest):
            longest = before
    return longest


def _assignee_usernames(interrupt: Interrupt) -> list[str]:
    model = get_user_model()
    direct = model.objects.filter(assignments__interrupt=interrupt)
    via = model.objects.filter(groups__assignments__interrupt=interrupt)
    names = set(direct.values_list("username", flat=True)) | set(
        via.values_list("username", flat=True)
    )
    return sorted(names)


_AUDIT_ACTIONS: dict[str, str] = {
    RoutingEvent.Action.ASSIGNED: AuditEvent.Action.ASSIGN,
    RoutingEvent.Action.REMINDED: AuditEvent.Action.REMIND,
    RoutingEvent.Action.ESCALATED: AuditEvent.Action.ESCALATE,
}


def _record(
    interrupt: Interrupt, action: str, *, user: Any = None, group: Any = None, detail: str = ""
) -> None:
    """The routing record and its audit event, in the caller's transaction."""
    RoutingEvent.objects.create(
        interrupt=interrupt, action=action, user=user, group=group, detail=detail
    )
    to = f"user:{user.get_username()}" if user is not None else ""
    to = f"group:{group.name}" if group is not None else to
    audit_record(
        action=_AUDIT_ACTIONS[action],
        target=interrupt,
        detail={"to": to, "detail": detail} if to else {"detail": detail},
    )


def _remind(interrupt: Interrupt) -> None:
    _record(
        interrupt,
        RoutingEvent.Action.REMINDED,
        detail=f"expires at {interrupt.expires_at:%Y-%m-%d %H:%M:%S} UTC",
    )
    outbox.outbox_enqueue(
        kind=outbox.REQUEST_REMINDER,
        payload={
            "request": outbox.request_payload(interrupt),
            "assignees": _assignee_usernames(interrupt),
        },
        interrupt=interrupt,
    )


def _escalate(interrupt: Interrupt, group_name: str) -> None:
    group = Group.objects.filter(name=group_name).first()
    _record(
        interrupt,
        RoutingEvent.Action.ESCALATED,
        group=group,
        detail=f"to {group_name}" + ("" if group else " (no such group)"),
    )
    if group is not None:
        request_assign(
            interrupt=interrupt,
            names=[f"group:{group_name}"],
            source=Assignment.Source.ESCALATION,
            announce=False,  # the escalation below is its record and its announcement
        )
    outbox.outbox_enqueue(
        kind=outbox.REQUEST_ESCALATED,
        payload={
            "request": outbox.request_payload(interrupt),
            "escalated_to": group_name,
            "assignees": sorted(
                group.user_set.filter(is_active=True).values_list("username", flat=True)
            )
            if group is not None
            else [],
        },
        interrupt=interrupt,
    )
