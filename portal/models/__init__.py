"""The portal's tables.

A thread's history lives in ``Checkpoint`` rows, one per step, append-only: each holds only
the messages that step added, so writing costs the same at message ten and message ten
thousand. ``Thread.last_seq`` is the newest seq; writers move it with a conditional UPDATE
(``WHERE last_seq = <the seq they built on>``), which is how two workers are kept from
forking one thread.

``Interrupt`` is the reviewers' queue, an index over the checkpoints: its row is written in
the same transaction as the checkpoint that raised it. ``Decision`` is the answer, recorded
once per interrupt and never changed. ``Run`` is the durable work queue the worker drains.

Only ``portal.reviews.services``, the ORM checkpointer and the worker write to these tables.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, NoReturn

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from agents.interrupt import fallback_summary
from portal.audit import chains as audit
from portal.models import waiting

TITLE_MAX_CHARS = 80


class Thread(models.Model):
    """One conversation with one agent."""

    class Status(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        INTERRUPTED = "interrupted"
        DONE = "done"
        FAILED = "failed"
        # Stopped for good by a person (``services.thread_cancel``); nothing runs again.
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    # Null for threads started by the system (and threads the contract tests create).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="threads",
        # thread_owner_recent (owner, -updated_at) serves every lookup by owner; a second
        # index would only cost each checkpoint's UPDATE of the thread.
        db_index=False,
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The newest checkpoint's seq; 0 while the thread has none.
    last_seq = models.PositiveIntegerField(default=0)
    # Set once, by ``services.thread_cancel``. The checkpointer's compare-and-swap refuses
    # every write to a thread that has it, so a worker still holding one of its runs
    # cannot record a tool call, and a tool runs only after its call is recorded. A
    # column of its own, not the status, which workers rewrite as runs come and go.
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="cancelled_threads",
        db_index=False,  # thread_cancelled_by (Meta), only where set
    )

    class Meta:
        permissions = [
            ("start_thread", "Can start conversations"),
            ("view_all_threads", "Can see every thread"),
            ("retry_thread", "Can retry anyone's failed thread"),
            ("cancel_thread", "Can cancel anyone's thread"),
        ]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="thread_owner_recent"),
            models.Index(fields=["status", "-updated_at"], name="thread_status_recent"),
            models.Index(
                fields=["cancelled_by"],
                name="thread_cancelled_by",
                condition=Q(cancelled_by__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"{self.agent or 'thread'} {self.id}"

    def written_into_by(self, user: Any) -> bool:
        """Whether ``user`` wrote any human message into this thread: started it, or is
        the author of a run that carried messages (a follow-up)."""
        if user is None or user.pk is None:
            return False
        return self.owner_id == user.pk or self.runs.filter(author_id=user.pk).exists()

    @staticmethod
    def title_from(text: str) -> str:
        """A one-line title from a user message."""
        line = " ".join(text.split())
        if len(line) <= TITLE_MAX_CHARS:
            return line
        return line[: TITLE_MAX_CHARS - 1].rstrip() + "…"


def conversation(steps: Iterable[list[Any] | None]) -> list[Any]:
    """A thread's messages from its checkpoints' ``messages``, oldest step first: each
    checkpoint holds only the messages its step added, so the conversation is their
    concatenation."""
    return [message for added in steps for message in added or []]


# How many of a thread's newest steps a search reads before it reads on in chunks.
_FIRST_STEPS = 3


class CheckpointQuerySet(models.QuerySet["Checkpoint"]):
    def conversation(self) -> list[Any]:
        """The messages these checkpoints hold, in the order they were added."""
        return conversation(self.order_by("seq").values_list("messages", flat=True))

    def messages_newest_first(self) -> Iterator[Any]:
        """The messages these checkpoints hold, newest first, read a few steps at a time:
        a search for a recent message stops after a step or two however long the thread."""
        steps = self.order_by("-seq").values_list("seq", "messages")
        # The first steps in one plain query: most searches end there, and a server-side
        # cursor costs three round trips (declare, fetch, close) where this costs one.
        first = list(steps[:_FIRST_STEPS])
        for _seq, added in first:
            yield from reversed(added or [])
        if len(first) == _FIRST_STEPS:
            rest = steps.filter(seq__lt=first[-1][0]).iterator(chunk_size=20)
            for _seq, added in rest:
                yield from reversed(added or [])


class Checkpoint(models.Model):
    """One step of a thread: the messages it added and where the thread stands after it."""

    class Status(models.TextChoices):
        RUNNING = "running"
        INTERRUPTED = "interrupted"
        DONE = "done"

    # No index of its own: the unique (thread, seq) constraint's index serves it.
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="checkpoints", db_index=False
    )
    seq = models.PositiveIntegerField()
    # None and "" differ in the runtime (None: no node / the end), so these are nullable.
    node = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    status = models.CharField(max_length=16, choices=Status.choices)
    next_node = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    # Only the messages this step added; a thread's history is the concatenation.
    messages = models.JSONField(default=list, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    # The pending interrupt's fields when status is interrupted: the source of truth.
    interrupt = models.JSONField(null=True, blank=True)
    interrupt_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # Which run wrote this step; the worker reads it to recover a crashed run without
    # applying its input twice. RESTRICT: a run goes only together with its thread.
    run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.RESTRICT, related_name="checkpoints"
    )
    # When the step happened, as the runtime recorded it (steps written together keep
    # their own times).
    created_at = models.DateTimeField(default=timezone.now)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="checkpoint_thread_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.seq} {self.status}"


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
        PENDING = "pending"
        RESOLVED = "resolved"
        CANCELLED = "cancelled"
        EXPIRED = "expired"

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

    class Meta:
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
        return f"{self.id} ({self.status})"

    def decided_as(self, status: str, at: datetime) -> None:
        """Take this (row-locked, pending) request out of the queue with the decision its
        caller records in the same transaction: the only way a request is marked decided."""
        self.status, self.resolved_at, self.decided = status, at, True
        self.save(update_fields=["status", "resolved_at", "decided"])
        waiting.changed(waiting.interrupt_key(self.pk))

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls this request asks to approve (none for a question, or for an
        ``interrupt()`` inside a tool: that one names its call in ``tool_call_id``)."""
        return tool_calls_in(self.value)

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


class ImmutableRecordError(Exception):
    """Raised on any attempt to change or remove a recorded decision."""


_IMMUTABLE = (
    "decisions are an audit record: they are written once and never updated or deleted "
    "(record a new decision on a new interrupt instead)"
)


class DecisionQuerySet(models.QuerySet["Decision"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"Decision.objects.update() refused: {_IMMUTABLE}")

    def delete(self) -> NoReturn:
        raise ImmutableRecordError(f"Decision.objects.delete() refused: {_IMMUTABLE}")

    # bulk_update goes through update(), so it is refused as well.


class Decision(models.Model):
    """A person's (or the system's) answer to one interrupt. Written once."""

    class Outcome(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"
        EDITED = "edited"
        EXPIRED = "expired"
        CANCELLED = "cancelled"
        # Answers to a request that declared its actions (agents.inbox): free text for
        # the agent instead of going ahead, or a dismissal. Neither lets the action run.
        RESPONDED = "responded"
        IGNORED = "ignored"

    # OneToOne puts a unique constraint in the database: a second decision on the same
    # interrupt fails there even if two requests slip past the row lock.
    interrupt = models.OneToOneField(Interrupt, on_delete=models.PROTECT, related_name="decision")
    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="decisions")
    # Null means the system decided (an expiry, a cancellation by the owner's tooling).
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="decisions",
    )
    value = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    original_args = models.JSONField(null=True, blank=True)
    executed_args = models.JSONField(null=True, blank=True)
    # A default, not auto_now_add, so the time is known before
    # the insert and the hash chain (portal/audit/chains.py) can cover it.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Tamper evidence (a hash chain over decisions); filled in by a later change.
    payload_hash = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    objects = DecisionQuerySet.as_manager()

    class Meta:
        permissions = [
            ("view_history", "Can browse decision history"),
            ("export_history", "Can export decision history"),
            ("view_metrics", "Can see decision metrics"),
        ]
        indexes = [models.Index(fields=["-created_at"], name="decision_recent")]

    def __str__(self) -> str:
        return f"{self.outcome} on {self.interrupt_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(f"Decision {self.pk} cannot be saved again: {_IMMUTABLE}")
        # Chain the decision's hashes on insert (portal/audit/chains.py).
        with audit.sealing(self, chain=audit.DECISIONS, using=kwargs.get("using")):
            super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"Decision {self.pk} cannot be deleted: {_IMMUTABLE}")

    def is_withdrawal(self, thread: Thread | None = None) -> bool:
        """Cancelled by the person who started the thread: they took their request back,
        which is no reviewer's decision (``WITHDRAWN`` says the same in a query)."""
        owner_id = (thread or self.thread).owner_id
        return (
            self.outcome == self.Outcome.CANCELLED
            and self.reviewer_id is not None
            and self.reviewer_id == owner_id
        )


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"Approval.objects.update() refused: {_IMMUTABLE}")

    def delete(self) -> NoReturn:
        raise ImmutableRecordError(f"Approval.objects.delete() refused: {_IMMUTABLE}")


class Approval(models.Model):
    """One reviewer's answer to a request whose policy needs several (``approvals_required``
    or ``rejections_required`` over 1): a vote towards the ``Decision``, written once.

    The vote that reaches a count records the decision and queues the resume in the same
    transaction (``portal.reviews.decisions.decision_submit``); earlier votes only wait. Each vote
    is in its own hash chain (``portal.audit.chains``), like decisions are in theirs.
    """

    # No index of its own: the unique (interrupt, reviewer) constraint's index serves it.
    interrupt = models.ForeignKey(
        Interrupt, on_delete=models.PROTECT, related_name="approvals", db_index=False
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals"
    )
    # How the answer reads, as a decision would record it: approved or edited go ahead,
    # anything else counts against.
    outcome = models.CharField(max_length=16, choices=Decision.Outcome.choices)
    value = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    payload_hash = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    objects = ApprovalQuerySet.as_manager()

    GOES_AHEAD = (Decision.Outcome.APPROVED, Decision.Outcome.EDITED)

    class Meta:
        constraints = [
            # The last guard behind the row lock: one vote per reviewer per request.
            models.UniqueConstraint(
                fields=["interrupt", "reviewer"], name="approval_one_per_reviewer"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} by {self.reviewer_id} on {self.interrupt_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(f"Approval {self.pk} cannot be saved again: {_IMMUTABLE}")
        with audit.sealing(self, chain=audit.APPROVALS, using=kwargs.get("using")):
            super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"Approval {self.pk} cannot be deleted: {_IMMUTABLE}")

    @property
    def approves(self) -> bool:
        return self.outcome in self.GOES_AHEAD


class Run(models.Model):
    """One unit of work for the worker: start, resume or continue a thread."""

    class Kind(models.TextChoices):
        START = "start"
        RESUME = "resume"
        CONTINUE = "continue"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        INTERRUPTED = "interrupted"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        # Its thread was cancelled before it finished: never claimed again, and a worker
        # still running it can record neither a step nor its outcome.
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    input = models.JSONField(default=dict, blank=True)
    # Who wrote the human messages this run carries (a start or a follow-up); null for
    # resumes, whose input is a decision, and for threads started by the system.
    # Separation of duties reads it (Thread.written_into_by).
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="authored_runs",
        db_index=False,  # run_author (Meta), only where set
    )
    attempts = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["created_at"], name="run_queued", condition=Q(status="queued")),
            models.Index(
                fields=["lease_expires_at"], name="run_leased", condition=Q(status="running")
            ),
            models.Index(fields=["thread", "-created_at"], name="run_thread_recent"),
            # A user's deletion clears their authorship by this; resumes have no author
            # and cost it nothing.
            models.Index(fields=["author"], name="run_author", condition=Q(author__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} run {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (
            self.Status.INTERRUPTED,
            self.Status.SUCCEEDED,
            self.Status.FAILED,
            self.Status.CANCELLED,
        )


# --- API tokens (decisions helper: JSON API auth) ----------------------------------------
def password_fingerprint(user: Any) -> str:
    """A keyed hash of the user's password hash: it changes whenever the password does
    (however it was changed), and reveals nothing about it."""
    return salted_hmac(
        "portal.ApiToken.password", str(user.password or ""), algorithm="sha256"
    ).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored: the token itself is
    shown once, by ``manage.py create_api_token``, and cannot be recovered.

    A token carries scopes (what it may do), may expire, and is revoked for good when its
    user is deactivated or changes password. ``password_fingerprint`` also refuses it
    after a password change that bypassed ``save()`` (a queryset update, a raw SQL fix).
    """

    class Scope(models.TextChoices):
        READ = "read", "read: list and read requests and threads"
        START = "start", "start: start, retry and cancel threads; withdraw their requests"
        DECIDE = "decide", "decide: claim, release and answer requests"
        REQUEST = "request", "request: raise approval requests as an external agent"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list, help_text="Any of: read, start, decide, request.")
    # The key the portal signs this token's external requests' webhooks with (HMAC, so it
    # is kept as it is); made with a token carrying the "request" scope, shown once.
    webhook_secret = models.CharField(max_length=64, blank=True, editable=False, default="")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never.")
    password_fingerprint = models.CharField(max_length=64, editable=False, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # To within a minute (portal.api.TOKEN_LAST_USED_RESOLUTION): a token used now shows a
    # time at most that old.
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name or 'token'} ({self.user})"

    def refusal(self, now: datetime | None = None) -> str | None:
        """Why this token may not be used now (None when it may)."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            why = f": {self.revoked_reason}" if self.revoked_reason else ""
            return f"This token was revoked at {self.revoked_at:%Y-%m-%d %H:%M:%S} UTC{why}."
        if not self.user.is_active:
            return "This token's user is deactivated."
        if not constant_time_compare(self.password_fingerprint, password_fingerprint(self.user)):
            return "This token was revoked: its user's password changed after it was created."
        if self.expires_at is not None and self.expires_at <= now:
            return (
                f"This token expired at {self.expires_at:%Y-%m-%d %H:%M:%S} UTC; "
                "create a new one with manage.py create_api_token."
            )
        return None


def api_tokens_revoke(*, user: Any, reason: str, by: Any = None) -> int:
    """Revoke every live token of ``user`` for good, recording each in the audit trail
    (``by``: who did it; None for the system); returns how many."""
    with transaction.atomic():
        # Row locks: two revocations at once (a deactivation and a password change saved
        # together) would otherwise both record the same token as revoked by them.
        live = list(
            ApiToken.objects.select_for_update()
            .filter(user=user, revoked_at__isnull=True)
            .values_list("pk", "name")
        )
        if not live:
            return 0
        ApiToken.objects.filter(pk__in=[pk for pk, _ in live]).update(
            revoked_at=timezone.now(), revoked_reason=reason
        )
        for pk, name in live:
            audit_record(
                action=AuditEvent.Action.TOKEN_REVOKE,
                actor=by,
                target=("apitoken", pk),
                detail={"user": user.get_username(), "name": name, "reason": reason},
            )
    return len(live)


def api_token_delete(*, token: ApiToken, by: Any) -> None:
    """Delete a token (the admin's way to revoke one), recording who did it."""
    with transaction.atomic():
        audit_record(
            action=AuditEvent.Action.TOKEN_REVOKE,
            actor=by,
            target=token,
            detail={
                "user": token.user.get_username(),
                "name": token.name,
                "reason": "deleted in the admin",
            },
        )
        token.delete()


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def _note_password_rehash(sender: Any, instance: Any, update_fields: Any = None, **_: Any) -> None:
    # Django re-hashes a password on login when its hasher settings changed (set_password,
    # then _password cleared, then save(update_fields=["password"])): the same password, so
    # tokens made under the old hash stay valid. Only those: remember the old hash.
    if update_fields and "password" in update_fields and getattr(instance, "_password", 0) is None:
        old = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
        instance._portal_rehashed_from = old


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def _revoke_tokens_on_user_change(sender: Any, instance: Any, **_: Any) -> None:
    if not instance.is_active:
        api_tokens_revoke(user=instance, reason="its user was deactivated")
    elif getattr(instance, "_password", None) is not None:  # set_password(), then save()
        api_tokens_revoke(user=instance, reason="its user's password changed")
    else:
        old = instance.__dict__.pop("_portal_rehashed_from", None)
        if old is not None and old != instance.password:
            before = password_fingerprint(type(instance)(password=old))
            ApiToken.objects.filter(user=instance, password_fingerprint=before).update(
                password_fingerprint=password_fingerprint(instance)
            )


# --- end API tokens ----------------------------------------------------------------------


class ExternalRequest(models.Model):
    """An approval request raised over the API by an agent that runs outside the portal.

    It is an ordinary ``Interrupt`` on a ``Thread`` of its own, written through the
    checkpointer like any pause, so the queue, history, metrics, policies and the decision
    service treat it like any other. What differs lives here: who raised it and how the
    answer goes back (a signed webhook to ``callback_url``, or the requester's long-poll).
    The thread has no graph: its decision closes it instead of queueing a resume
    (``portal.reviews.external.external_request_close``).
    """

    interrupt = models.OneToOneField(
        Interrupt, primary_key=True, on_delete=models.CASCADE, related_name="external"
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="external_requests",
        db_index=False,  # external_request_idempotency (Meta) serves lookups by requester
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Empty: the requester sent none. Otherwise unique per requester (Meta): the same key
    # twice finds the first request, even when both arrive at once.
    idempotency_key = models.CharField(max_length=200, blank=True)
    # sha256 of the fields that made the request: a reused key with other fields is refused.
    fingerprint = models.CharField(max_length=64, editable=False)
    external_ref = models.CharField(max_length=200, blank=True)
    callback_url = models.URLField(max_length=500, blank=True)
    # The requesting token's webhook secret when the request was made, so a later change
    # of the token does not leave an answer unsigned.
    callback_secret = models.CharField(max_length=64, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the answer reached the agent: its long-poll read it, or its webhook was taken.
    collected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [("raise_request", "Can raise approval requests as an external agent")]
        constraints = [
            models.UniqueConstraint(
                fields=["requester", "idempotency_key"],
                name="external_request_idempotency",
                condition=~Q(idempotency_key=""),
            ),
        ]

    def __str__(self) -> str:
        return f"external request {self.interrupt_id}"


# Decisions that are withdrawals (see ``Decision.is_withdrawal``), for queries that leave
# them out of what reviewers decided: ``.alias(withdrawn=WITHDRAWN).filter(withdrawn=False)``.
# A Case, not an exclude(): a thread with no owner compares as NULL, which exclude() would
# drop along with the withdrawals.
WITHDRAWN = models.Case(
    models.When(
        models.Q(
            outcome=Decision.Outcome.CANCELLED,
            reviewer__isnull=False,
            reviewer_id=models.F("thread__owner_id"),
        ),
        then=models.Value(True),
    ),
    default=models.Value(False),
    output_field=models.BooleanField(),
)


# --- notifications and routing --------------------------------------------------------
# ``Notification`` is the outbox: a row written in the same transaction as the event it
# announces (portal/notify/outbox.py), so an event that happened is never lost and one that was
# rolled back is never sent. The notifier (``manage.py run_notifier``) fans each one out
# into ``Delivery`` rows, one per matching ``Subscription`` (or the one target its writer
# named), and sends those with retries; every try is a ``DeliveryAttempt``.


class Subscription(models.Model):
    """Who is told about which events: a channel and target, narrowed by event kind,
    agent, reason and the group a request is routed to. Managed in the admin."""

    class Channel(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "signed webhook (JSON)"
        SLACK = "slack", "Slack-style incoming webhook"

    name = models.CharField(max_length=100)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(
        max_length=500,
        blank=True,
        help_text="A URL for webhooks; email addresses separated by commas for email "
        "(empty: the members of the group below who have an address).",
    )
    secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="Webhooks: the shared secret that signs each request (Portal-Signature).",
    )
    events = models.JSONField(
        default=list, blank=True, help_text="Event kinds to send (empty: every kind)."
    )
    agent = models.CharField(max_length=64, blank=True, help_text="Empty: any agent.")
    reason = models.CharField(max_length=64, blank=True, help_text="Empty: any reason.")
    group = models.ForeignKey(
        "auth.Group",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="portal_subscriptions",
        help_text="Only requests routed to this group (assigned, escalated or required by "
        "policy). Empty: any request.",
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.channel})"


class Notification(models.Model):
    """One event to announce (the outbox). Its id is the event id receivers dedupe by."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=64)
    payload = models.JSONField(default=dict, blank=True)
    agent = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    interrupt = models.ForeignKey(
        Interrupt, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Set when its deliveries were written: until then the notifier still owes a fan-out.
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["created_at"],
                name="notification_undispatched",
                condition=Q(dispatched_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class Delivery(models.Model):
    """One notification to one target, retried with backoff until it is sent or given up."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # every attempt failed: given up

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    subscription = models.ForeignKey(
        Subscription, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    channel = models.CharField(max_length=16, choices=Subscription.Channel.choices)
    target = models.CharField(max_length=500)
    # Copied when the delivery is written, so a retry signs as the first try did.
    secret = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # When it is due. Claiming a delivery moves this past the send's timeout (the lease):
    # a notifier that dies mid-send leaves it due again then, never lost.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            # A fan-out that runs twice (a notifier died after writing, before marking the
            # notification dispatched) writes each subscription's delivery once.
            models.UniqueConstraint(
                fields=["notification", "subscription"],
                name="delivery_once_per_subscription",
                condition=Q(subscription__isnull=False),
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], name="delivery_due", condition=Q(status="pending")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at sending a delivery: the delivery log the admin shows."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"attempt {self.number} ({'ok' if self.ok else 'failed'})"


class Assignment(models.Model):
    """A request routed to a user or a group (one of the two)."""

    class Source(models.TextChoices):
        POLICY = "policy"
        INTERRUPT = "interrupt"  # the agent named its reviewers when it asked
        ESCALATION = "escalation"

    interrupt = models.ForeignKey(Interrupt, on_delete=models.CASCADE, related_name="assignments")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="assignments",
    )
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="assignments"
    )
    source = models.CharField(max_length=16, choices=Source.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="assignment_user_or_group",
            ),
            models.UniqueConstraint(
                fields=["interrupt", "user"],
                name="assignment_once_per_user",
                condition=Q(user__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["interrupt", "group"],
                name="assignment_once_per_group",
                condition=Q(group__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt_id} -> {self.user or self.group}"


class RoutingEvent(models.Model):
    """The record of every assignment, reminder and escalation."""

    class Action(models.TextChoices):
        ASSIGNED = "assigned"
        REMINDED = "reminded"
        ESCALATED = "escalated"

    interrupt = models.ForeignKey(
        Interrupt, on_delete=models.CASCADE, related_name="routing_events"
    )
    action = models.CharField(max_length=16, choices=Action.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    detail = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # The reminder and the escalation happen once per request, however many
            # notifiers sweep at the same moment.
            models.UniqueConstraint(
                fields=["interrupt", "action"],
                name="routing_remind_escalate_once",
                condition=Q(action__in=["reminded", "escalated"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.interrupt_id}"


# --- end notifications and routing ----------------------------------------------------


# --- audit trail of actions ---------------------------------------------------------------
_APPEND_ONLY_EVENTS = (
    "audit events are a record: they are appended once and never updated or deleted "
    "(record a new event instead)"
)


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent.objects.update() refused: {_APPEND_ONLY_EVENTS}")

    def delete(self) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent.objects.delete() refused: {_APPEND_ONLY_EVENTS}")


class AuditEvent(models.Model):
    """One action someone (or the system) took: a claim, a login, a token revoked...

    Append-only and hash-chained like ``Decision`` (its own chain, ``audit.EVENTS``).
    Recorded with ``audit_record`` inside the transaction of the action it records, so an
    action that rolled back leaves no event and an event names nothing that did not happen.
    """

    class Action(models.TextChoices):
        CLAIM = "interrupt.claim", "claimed a request"
        RELEASE = "interrupt.release", "released a claim"
        WITHDRAW = "interrupt.withdraw", "withdrew a request"
        CANCEL = "interrupt.cancel", "cancelled a request"
        LOGIN = "login", "logged in"
        LOGIN_FAILED = "login.failed", "failed to log in"
        LOGOUT = "logout", "logged out"
        TOKEN_CREATE = "api_token.create", "created an API token"
        TOKEN_REVOKE = "api_token.revoke", "revoked an API token"
        ASSIGN = "interrupt.assign", "assigned a request"
        REMIND = "interrupt.remind", "sent a reminder about a request"
        ESCALATE = "interrupt.escalate", "escalated a request"
        SUBSCRIPTION_CREATE = "subscription.create", "created a notification subscription"
        SUBSCRIPTION_CHANGE = "subscription.change", "changed a notification subscription"
        SUBSCRIPTION_DELETE = "subscription.delete", "deleted a notification subscription"
        EXPIRE = "interrupt.expire", "expired a request"
        THREAD_RETRY = "thread.retry", "retried a thread"
        THREAD_CANCEL = "thread.cancel", "cancelled a thread"

    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Not a choices field on purpose: other parts add their actions (assignments,
    # cancellations, retries, subscriptions) without a migration each.
    action = models.CharField(max_length=64)
    # Who acted. No database constraint and nothing done on delete: the record outlives
    # the account, and ``actor_name`` keeps who it was. Null: the system, or nobody known
    # (a failed login).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # auditevent_actor (Meta) serves lookups by who acted
        related_name="+",
    )
    actor_name = models.CharField(max_length=150, blank=True)
    # What it was done to: a kind ("interrupt", "thread", "api_token", "user") and its id.
    target_type = models.CharField(max_length=32, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        permissions = [("view_audit_trail", "Can browse the audit trail of actions")]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="auditevent_recent"),
            models.Index(fields=["action", "-created_at"], name="auditevent_action"),
            models.Index(fields=["target_type", "target_id"], name="auditevent_target"),
            models.Index(fields=["actor_name", "-created_at"], name="auditevent_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name or 'system'} at {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(
                f"AuditEvent {self.pk} cannot be saved again: {_APPEND_ONLY_EVENTS}"
            )
        with audit.sealing(self, chain=audit.EVENTS, using=kwargs.get("using")):
            super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent {self.pk} cannot be deleted: {_APPEND_ONLY_EVENTS}")


# Longest canonical ``detail`` accepted: an event says what happened, it is not a store.
MAX_AUDIT_DETAIL_CHARS = 4000


def audit_record(
    *,
    action: str,
    actor: Any = None,
    target: Any = None,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the audit trail; call it inside the transaction of the action.

    ``actor``: the user who acted (None or an anonymous user: the system, or nobody known).
    ``target``: a model instance, a ``(kind, id)`` pair, or None. ``detail``: small JSON
    data about the action, never a secret (``ValueError`` over ``MAX_AUDIT_DETAIL_CHARS``).
    """
    # Stored as its canonical JSON reads back (times as UTC text, ids as text), so the
    # hash computed now is the one recomputed from the row later.
    text = audit.canonical(dict(detail or {}))
    if len(text) > MAX_AUDIT_DETAIL_CHARS:
        raise ValueError(
            f"audit detail for {action!r} is over {MAX_AUDIT_DETAIL_CHARS} characters of "
            "JSON; record identifiers, not contents"
        )
    person = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    if target is None:
        target_type, target_id = "", ""
    elif isinstance(target, tuple):
        target_type, target_id = str(target[0]), str(target[1])
    else:
        target_type, target_id = target._meta.model_name, str(target.pk)
    event = AuditEvent(
        action=action,
        actor_id=person.pk if person is not None else None,
        actor_name=person.get_username() if person is not None else "",
        target_type=target_type,
        target_id=target_id,
        detail=json.loads(text),
    )
    event.save()
    return event


class WorkerHeartbeat(models.Model):
    """The last time each running loop (a run worker or a notifier) went round (health and
    metrics read it).

    Not a record: a loop deletes its row when it stops in order; a killed one's row stays
    behind, ageing, which is what a health check should see."""

    class Kind(models.TextChoices):
        WORKER = "worker", "run worker"
        NOTIFIER = "notifier", "notifier"

    name = models.CharField(max_length=128, primary_key=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.WORKER)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.beat_at:%Y-%m-%d %H:%M:%S}"
