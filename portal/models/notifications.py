"""Notifications and routing: the outbox (``Notification``), its fan-out into
``Delivery`` rows per ``Subscription`` with every try a ``DeliveryAttempt``, and the
routing of requests to people (``Assignment``, ``RoutingEvent``). See docs/architecture.md."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.models.requests import Interrupt
from portal.models.threads import Thread


class Subscription(models.Model):
    """Who is told about which events: a channel and target, narrowed by event kind,
    agent, reason and the group a request is routed to. Managed in the admin."""

    class Channel(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "signed webhook (JSON)"
        SLACK = "slack", "Slack-style incoming webhook"
        # A Slack app's bot posts to a channel (the target: its id), with buttons.
        SLACK_APP = "slack_app", "Slack channel, with buttons (Slack app)"
        # A delivery only: a reply to a Slack interaction, posted to its response_url.
        SLACK_RESPONSE = "slack_response", "reply to a Slack interaction"

    name = models.CharField(max_length=100)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(
        max_length=500,
        blank=True,
        help_text="A URL for webhooks; email addresses separated by commas for email "
        "(empty: the members of the group below who have an address); a channel id "
        "(C0123ABCD) for a Slack channel.",
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
        RULE = "rule"  # a decision rule routed it (``Interrupt.routed_by``)

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


def outbox_backlog() -> dict[str, int]:
    """Counts the admin and metrics show: notifications not fanned out, deliveries due."""
    return {
        "undispatched": Notification.objects.filter(dispatched_at__isnull=True).count(),
        "pending": Delivery.objects.filter(status=Delivery.Status.PENDING).count(),
        "failed": Delivery.objects.filter(status=Delivery.Status.FAILED).count(),
    }
