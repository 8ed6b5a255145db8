"""Threads and their steps: ``Thread``, its append-only ``Checkpoint`` rows, and ``Run``,
the durable work queue the worker drains. See docs/architecture.md, "models"."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

TITLE_MAX_CHARS = 80


class Thread(models.Model):
    """One conversation with one agent."""

    class Status(models.TextChoices):
        IDLE = "idle", "Idle"
        RUNNING = "running", "Running"
        # Paused on a request (the runtime's interrupt) until a person answers it.
        INTERRUPTED = "interrupted", "Waiting for approval"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        # Stopped for good by a person (``services.thread_cancel``); nothing runs again.
        CANCELLED = "cancelled", "Cancelled"

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
        if self.owner_id == user.pk:
            return True
        # Read with the row that brought this thread, when its query asked (see
        # ``wrote_runs``): the answer for that user, without a query of its own.
        known: dict[Any, bool] = self.__dict__.get("_authors_known", {})
        if user.pk in known:
            return known[user.pk]
        return self.runs.filter(author_id=user.pk).exists()

    def authors_known(self, user_id: Any, wrote: bool) -> None:
        """Note whether ``user_id`` authored a run of this thread, as read by a query that
        brought the thread (``written_into_by`` then answers without one)."""
        self.__dict__.setdefault("_authors_known", {})[user_id] = bool(wrote)

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
