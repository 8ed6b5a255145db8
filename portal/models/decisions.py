"""Decisions and votes: ``Decision`` (one answer per request) and ``Approval`` (one
reviewer's vote on a request that needs several). Both are written once, never changed, and
hash-chained on insert (``portal.models.chain``)."""

from __future__ import annotations

from typing import Any, NoReturn

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.models.chain import APPROVALS, DECISIONS, Sealed, sealing
from portal.models.requests import Interrupt
from portal.models.threads import Thread


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


class Decision(Sealed, models.Model):
    """A person's (or the system's) answer to one interrupt. Written once."""

    class Outcome(models.TextChoices):
        """Each outcome with the one name every page, export and the admin show
        (``portal.reviews.words.OUTCOMES`` reads these labels; docs/glossary.md lists them)."""

        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EDITED = "edited", "Approved with edited arguments"
        EXPIRED = "expired", "Expired without a decision"
        CANCELLED = "cancelled", "Cancelled"
        # Answers to a request that declared its actions (agents.inbox): free text for
        # the agent instead of going ahead, or a dismissal. Neither lets the action run.
        RESPONDED = "responded", "Answered in words instead"
        IGNORED = "ignored", "Ignored"

    class Door(models.TextChoices):
        """Where the decision came in. Outside agents' frameworks (MCP, the OpenAI Agents
        SDK, LangGraph) reach the portal over the API and name themselves."""

        DASHBOARD = "dashboard"
        ADMIN = "admin"
        API = "api"
        SLACK = "slack"
        SYSTEM = "system"
        MCP = "mcp"
        OPENAI_AGENTS = "openai-agents"
        LANGGRAPH = "langgraph"
        RULE = "rule"  # a decision rule's version decided (``rule_version``), no person

    # OneToOne puts a unique constraint in the database: a second decision on the same
    # interrupt fails there even if two requests slip past the row lock.
    interrupt = models.OneToOneField(
        Interrupt, on_delete=models.PROTECT, related_name="decision", verbose_name="request"
    )
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
    # Empty on decisions recorded before doors were; in the hash chain once set.
    door = models.CharField(
        max_length=16, choices=Door.choices, blank=True, default="", db_default=""
    )
    # A decision rule's version that decided (door "rule"), with that version's hash as it
    # was when it decided: both in the hash chain when set.
    rule_version = models.ForeignKey(
        "portal.RuleVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="decisions",
    )
    rule_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    # A default, not auto_now_add, so the time is known before
    # the insert and the hash chain (portal/models/chain.py) can cover it.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Tamper evidence (a hash chain over decisions); filled in by a later change.
    payload_hash = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    objects = DecisionQuerySet.as_manager()

    class Meta:
        verbose_name = "decision"
        permissions = [
            ("view_history", "Can browse decision history"),
            ("export_history", "Can export decision history"),
            ("view_metrics", "Can see decision metrics"),
        ]
        indexes = [models.Index(fields=["-created_at"], name="decision_recent")]

    def __str__(self) -> str:
        return f"{self.get_outcome_display()}, {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(f"Decision {self.pk} cannot be saved again: {_IMMUTABLE}")
        # Chain the decision's hashes on insert (portal/models/chain.py).
        with sealing(self, chain=DECISIONS, using=kwargs.get("using")):
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


class Approval(Sealed, models.Model):
    """One reviewer's answer to a request whose policy needs several (``approvals_required``
    or ``rejections_required`` over 1): a vote towards the ``Decision``, written once.

    The vote that reaches a count records the decision and queues the resume in the same
    transaction (``portal.reviews.decisions.decision_submit``); earlier votes only wait. Each vote
    is in its own hash chain (``portal.models.chain``), like decisions are in theirs.
    """

    # No index of its own: the unique (interrupt, reviewer) constraint's index serves it.
    interrupt = models.ForeignKey(
        Interrupt,
        on_delete=models.PROTECT,
        related_name="approvals",
        db_index=False,
        verbose_name="request",
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals"
    )
    # How the answer reads, as a decision would record it: approved or edited go ahead,
    # anything else counts against.
    outcome = models.CharField(max_length=16, choices=Decision.Outcome.choices)
    value = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    # Where the vote came in, as a decision's door; empty on votes recorded before doors were.
    door = models.CharField(
        max_length=16, choices=Decision.Door.choices, blank=True, default="", db_default=""
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    payload_hash = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    objects = ApprovalQuerySet.as_manager()

    GOES_AHEAD = (Decision.Outcome.APPROVED, Decision.Outcome.EDITED)

    class Meta:
        verbose_name = "vote"  # the glossary's word: one reviewer's yes or no
        constraints = [
            # The last guard behind the row lock: one vote per reviewer per request.
            models.UniqueConstraint(
                fields=["interrupt", "reviewer"], name="approval_one_per_reviewer"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_outcome_display()}, {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(f"Approval {self.pk} cannot be saved again: {_IMMUTABLE}")
        with sealing(self, chain=APPROVALS, using=kwargs.get("using")):
            super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"Approval {self.pk} cannot be deleted: {_IMMUTABLE}")

    @property
    def approves(self) -> bool:
        return self.outcome in self.GOES_AHEAD


# A withdrawal's name on every page and export: the requester's, never a reviewer's no.
WITHDRAWN_WORDS = "Withdrawn by its requester"


def outcome_name(outcome: str, *, withdrawn: bool = False) -> str:
    """An outcome's one name (its label in ``Decision.Outcome``, docs/glossary.md), or the
    withdrawal's; "" for a code the model does not know."""
    if withdrawn:
        return WITHDRAWN_WORDS
    try:
        return str(Decision.Outcome(outcome).label)
    except ValueError:
        return ""


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
