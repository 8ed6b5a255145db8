"""The shapes several resources answer with: a request (``InterruptOut``) with its votes and
assignees, and a thread (``ThreadOut``) with the request it waits on."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from ninja import Field, Schema

from agents import inbox
from portal.models import (
    Approval,
    Assignment,
    Checkpoint,
    Interrupt,
    RoutingEvent,
    Thread,
    policies,
)

# The longest a waiting GET holds its answer back.
WAIT_MAX_SECONDS = 30
THREAD_STATUSES = f"One of {', '.join(Thread.Status.values)}."


def first_user_words(newest_first: Iterable[Any]) -> str | None:
    for message in newest_first:
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content") or "")
    return None


def latest_user_message(interrupt: Interrupt) -> str | None:
    """The user's words that led to ``interrupt`` (newest checkpoints first, so this stops
    after a step or two however long the thread is)."""
    if hasattr(interrupt, "_latest_user_message"):  # set for a whole page by InterruptPage
        return interrupt._latest_user_message  # type: ignore[no-any-return]
    steps = Checkpoint.objects.filter(
        thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq
    )
    return first_user_words(steps.messages_newest_first())


# Newest checkpoints read per thread for a page of requests; the user's words are almost
# always among them, and a request whose are not is looked up on its own.
_RECENT_CHECKPOINTS = 8


def attach_latest_user_messages(interrupts: list[Interrupt]) -> None:
    """``latest_user_message`` for a page of interrupts in one query, not one per row."""
    if not interrupts:
        return
    wanted = Q()
    for interrupt in interrupts:
        wanted |= Q(thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq)
    recent = Window(RowNumber(), partition_by=[F("thread_id")], order_by=F("seq").desc())
    rows = (
        Checkpoint.objects.filter(wanted)
        .annotate(recent=recent)
        .filter(recent__lte=_RECENT_CHECKPOINTS)
        .order_by("thread_id", "-seq")
        .values_list("thread_id", "seq", "messages")
    )
    by_thread: dict[Any, list[tuple[int, Any]]] = {}
    for thread_id, seq, messages in rows:
        by_thread.setdefault(thread_id, []).append((seq, messages))
    for interrupt in interrupts:
        read = by_thread.get(interrupt.thread_id, [])
        found = first_user_words(
            message
            for seq, messages in read
            if seq <= interrupt.checkpoint_seq
            for message in reversed(messages or [])
        )
        if found is None and len(read) == _RECENT_CHECKPOINTS:
            found = latest_user_message(interrupt)  # older than the window: look further
        interrupt._latest_user_message = found  # type: ignore[attr-defined]


class RuleOut(Schema):
    """The decision rule's version that made a decision (no person did)."""

    name: str = Field(..., description="The rule's name.")
    version: int = Field(..., description="The version's number within its rule.")
    hash: str = Field(..., description="The version's hash, as it was when it decided.")


class ApprovalOut(Schema):
    reviewer: str = Field(..., description="Who answered (their username).")
    outcome: str = Field(
        ..., description="How: approved counts towards going ahead; anything else against."
    )
    note: str
    created_at: datetime

    @staticmethod
    def resolve_reviewer(obj: Approval) -> str:
        return str(obj.reviewer.get_username())


class AssigneeOut(Schema):
    user: str | None = Field(
        None, description="The user it is assigned to (their username), or null for a group."
    )
    group: str | None = Field(
        None, description="The group it is assigned to (its name), or null for a user."
    )
    source: str = Field(
        ...,
        description="Why: ``policy`` (its policy's assign_to), ``interrupt`` (the agent "
        "named them when it asked) or ``escalation``.",
    )
    assigned_at: datetime

    @staticmethod
    def resolve_user(obj: Assignment) -> str | None:
        return obj.user.get_username() if obj.user else None

    @staticmethod
    def resolve_group(obj: Assignment) -> str | None:
        return obj.group.name if obj.group else None

    @staticmethod
    def resolve_assigned_at(obj: Assignment) -> datetime:
        return obj.created_at


class InterruptOut(Schema):
    id: str
    thread_id: str
    agent: str
    node: str
    reason: str
    message: str
    summary: str = Field(
        "", description="What the agent wants, in one plain line (empty on old requests)."
    )
    value: Any = None
    response_schema: dict[str, Any] | None = None
    status: str
    created_at: datetime
    expires_at: datetime | None = None
    claimed_by: str | None = None
    requested_by: str | None = Field(
        None,
        description="Who asked: the username of the thread's owner (for an outside "
        "request, the agent's user); null for a thread the system started.",
    )
    user_message: str | None = Field(
        None, description="The latest user message before the request was raised."
    )
    actions: list[str] | None = Field(
        None,
        description=(
            "The answers this request allows, when it declares them: resume with "
            '{"type": "accept"}, {"type": "edit", "args": {...}}, {"type": "response", '
            '"args": "text"} or {"type": "ignore"}; any other type is refused (422).'
        ),
    )

    approvals_required: int = Field(
        1,
        description="How many distinct reviewers must approve before the run goes ahead "
        "(the request's policy).",
    )
    rejections_required: int = Field(
        1, description="How many distinct reviewers must decline before it is declined."
    )
    approvals: list[ApprovalOut] = Field(
        [],
        description="The answers recorded so far on a request that needs several "
        "reviewers, oldest first: who, how and when.",
    )
    assigned_to: list[AssigneeOut] = Field(
        [],
        description="The users and groups the request is routed to, oldest first (empty "
        "until the notifier has routed a new request, and for one no policy routes).",
    )
    reminded_at: datetime | None = Field(
        None, description="When the reminder before expiry went out, if it has."
    )
    escalated_at: datetime | None = Field(
        None, description="When the request was escalated to its policy's escalate_to group."
    )

    @staticmethod
    def resolve_approvals_required(obj: Interrupt) -> int:
        return policies.policy_of(obj).approvals_required

    @staticmethod
    def resolve_rejections_required(obj: Interrupt) -> int:
        return policies.policy_for(obj.agent, obj.reason).rejections_required

    @staticmethod
    def resolve_approvals(obj: Interrupt) -> list[Approval]:
        return list(obj.approvals.all())

    @staticmethod
    def resolve_assigned_to(obj: Interrupt) -> list[Assignment]:
        return list(obj.assignments.all())

    @staticmethod
    def resolve_reminded_at(obj: Interrupt) -> datetime | None:
        return _routed_at(obj, RoutingEvent.Action.REMINDED)

    @staticmethod
    def resolve_escalated_at(obj: Interrupt) -> datetime | None:
        return _routed_at(obj, RoutingEvent.Action.ESCALATED)

    @staticmethod
    def resolve_user_message(obj: Interrupt) -> str | None:
        return latest_user_message(obj)

    @staticmethod
    def resolve_actions(obj: Interrupt) -> list[str] | None:
        found = inbox.declared(obj.response_schema)
        return found.actions if found else None

    @staticmethod
    def resolve_thread_id(obj: Interrupt) -> str:
        return str(obj.thread_id)

    @staticmethod
    def resolve_requested_by(obj: Interrupt) -> str | None:
        owner = obj.thread.owner
        return owner.get_username() if owner else None

    @staticmethod
    def resolve_claimed_by(obj: Interrupt) -> str | None:
        return obj.claimed_by.get_username() if obj.claimed_by else None


def _routed_at(interrupt: Interrupt, action: str) -> datetime | None:
    # Prefetched (visible_interrupts); each happens once per request.
    return next((e.created_at for e in interrupt.routing_events.all() if e.action == action), None)


class ThreadOut(Schema):
    id: str
    agent: str
    status: str
    title: str
    created_at: datetime
    updated_at: datetime
    messages: list[dict[str, Any]]
    pending_interrupt: InterruptOut | None = None
