"""Requests: ``Interrupt``, the reviewers' queue, written in the same transaction as the
checkpoint that raised it; and what a request's payload says (its tool calls, its summary)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.interrupt import fallback_summary
from portal.models import together, waiting
from portal.models.threads import Thread


class ToolCall(NamedTuple):
    """A tool call a request asks about: the call's id, the tool's name, its arguments."""

    id: str
    name: str
    args: Any


def tool_calls_in(payload: Any) -> list[ToolCall]:
    """The tool calls a request's payload lists, as the runtime's tool approvals and
    breakpoints write them (``{"tool_calls": [{"id", "name", "arguments"}, ...]}``); none
    for any other payload. The payload is the agent's, so malformed entries are skipped."""
    calls = payload.get("tool_calls") if isinstance(payload, dict) else None
    if not isinstance(calls, list):
        return []
    return [
        ToolCall(str(call.get("id")), str(call.get("name") or ""), call.get("arguments"))
        for call in calls
        if isinstance(call, dict)
    ]


class Interrupt(models.Model):
    """A pending (or answered) request for a person: the reviewers' queue."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RESOLVED = "resolved", "Decided"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"

    id = models.CharField(max_length=64, primary_key=True)  # the runtime's interrupt id
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="interrupts")
    agent = models.CharField(max_length=64, blank=True)  # copied from the thread for filters
    key = models.CharField(max_length=200, blank=True)
    node = models.CharField(max_length=128, blank=True)
    value = models.JSONField(null=True, blank=True)
    message = models.TextField(blank=True)
    reason = models.CharField(max_length=64, default="input_required")
    response_schema = models.JSONField(null=True, blank=True)
    # None for interrupts raised outside a tool call.
    tool_call_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    # The name of the tool whose call raised it (an ``interrupt()`` inside a tool, or a
    # question about a call's outcome); empty otherwise. A tool approval names its calls
    # in ``value["tool_calls"]`` instead.
    tool = models.CharField(max_length=128, blank=True, default="", db_default="")
    # What the agent wants, in one plain line ("Refund $120.00 to order 1234"), beside the
    # message (the request's title). Empty for requests recorded before it existed.
    summary = models.CharField(max_length=200, blank=True, default="", db_default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # Indexed only where set (Meta): most requests are never claimed.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="claimed_interrupts",
        db_index=False,
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # A decision was recorded for it (``decided_as``): the history lists it and searches
    # it. A request that left the queue without one (its thread moved on) was not.
    decided = models.BooleanField(default=False, db_default=False)
    checkpoint_seq = models.PositiveIntegerField()
    # Set when a decision rule routed it to people: how many approvals it needs then
    # (at least its policy's), and the rule version that routed it.
    approvals_required = models.PositiveSmallIntegerField(null=True, blank=True)
    routed_by = models.ForeignKey(
        "portal.RuleVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="routed",
    )

    class Meta:
        verbose_name = "request"  # the glossary's word; "interrupt" is the runtime's
        permissions = [
            ("decide_interrupt", "Can decide interrupts"),
            ("claim_interrupt", "Can claim and release interrupts"),
            ("take_over_claim", "Can take over or release another reviewer's claim"),
        ]
        indexes = [
            models.Index(
                fields=["created_at", "id"],
                name="interrupt_pending_queue",
                condition=Q(status="pending"),
            ),
            models.Index(
                fields=["agent", "reason", "created_at"],
                name="interrupt_pending_filtered",
                condition=Q(status="pending"),
            ),
            # Requests a reviewer holds (the user's deletion clears them by this).
            models.Index(
                fields=["claimed_by"],
                name="interrupt_claimed",
                condition=Q(claimed_by__isnull=False),
            ),
            # Only requests that left the queue: a pending row (resolved_at NULL) costs
            # its pause no entry here (migration 0008).
            models.Index(
                fields=["-resolved_at"],
                name="interrupt_history",
                condition=Q(resolved_at__isnull=False),
            ),
            # The checkpointer looks up a thread's pending requests on every write.
            models.Index(
                fields=["thread"],
                name="interrupt_pending_thread",
                condition=Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        # What it asks, as the queue shows it: the id is a key, not a name.
        text = self.summary or self.message or self.id
        return text if len(text) <= 80 else text[:79] + "…"

    def decided_as(self, status: str, at: datetime) -> None:
        """Take this (row-locked, pending) request out of the queue with the decision its
        caller records in the same transaction: the only way a request is marked decided."""
        self.status, self.resolved_at, self.decided = status, at, True
        together.update(self, ["status", "resolved_at", "decided"])
        waiting.changed(waiting.interrupt_key(self.pk))

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def claim_ends_at(self) -> datetime | None:
        """When the current claim lapses (``PORTAL_CLAIM_EXPIRES_SECONDS`` after it was
        taken), or None when nobody holds one."""
        if self.claimed_by_id is None or self.claimed_at is None:
            return None
        return self.claimed_at + timedelta(seconds=settings.PORTAL_CLAIM_EXPIRES_SECONDS)

    def claim_holder(self, now: datetime | None = None) -> Any:
        """Who holds a claim that has not lapsed, or None: a lapsed claim blocks nobody,
        so a reviewer who walked away does not stop the queue."""
        if self.claimed_by_id is None:
            return None
        ends = self.claim_ends_at  # None: a claim recorded without its time never lapses
        if ends is not None and ends <= (now or timezone.now()):
            return None
        return self.claimed_by

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls this request asks to approve (none for a question, or for an
        ``interrupt()`` inside a tool: that one names its call in ``tool_call_id``)."""
        return tool_calls_in(self.value)

    def call_names(self) -> dict[str, str]:
        """Each tool call's id -> its tool's name: the calls it lists, or the one call an
        ``interrupt()`` inside a tool waits on."""
        names = {call.id: call.name for call in self.tool_calls}
        if self.tool_call_id and self.tool:
            names.setdefault(self.tool_call_id, self.tool)
        return names

    @property
    def summary_line(self) -> str:
        """The summary, when it says more than the message does ("" otherwise)."""
        return summary_beside(self.summary, self.message)


def summary_beside(summary: str | None, message: str | None) -> str:
    """``summary`` unless it only repeats ``message`` (its first line, give or take the
    question mark and case): shown beside a title, it must add something."""
    summary = (summary or "").strip()
    first = fallback_summary(message, "") if (message or "").strip() else ""
    if summary.rstrip(".?!…").casefold() == first.rstrip(".?!…").casefold():
        return ""
    return summary
