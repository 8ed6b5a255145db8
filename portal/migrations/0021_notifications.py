"""Notifications and routing: the outbox (Notification), its deliveries and their log,
subscriptions, and the assignments and routing record of requests."""

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("portal", "0024_audit_events_and_worker_heartbeats"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "channel",
                    models.CharField(
                        choices=[
                            ("email", "email"),
                            ("webhook", "signed webhook (JSON)"),
                            ("slack", "Slack-style incoming webhook"),
                        ],
                        max_length=16,
                    ),
                ),
                ("target", models.CharField(max_length=500)),
                ("secret", models.CharField(blank=True, max_length=200)),
                (
                    "status",
                    models.CharField(
                        choices=[("pending", "Pending"), ("sent", "Sent"), ("failed", "Failed")],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_error", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "deliveries",
            },
        ),
        migrations.CreateModel(
            name="DeliveryAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField()),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                ("ok", models.BooleanField()),
                ("status_code", models.PositiveIntegerField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                ("duration_ms", models.PositiveIntegerField(default=0)),
                (
                    "delivery",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="log",
                        to="portal.delivery",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Notification",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("kind", models.CharField(max_length=64)),
                ("payload", models.JSONField(blank=True, default=dict)),
                ("agent", models.CharField(blank=True, max_length=64)),
                ("reason", models.CharField(blank=True, max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("dispatched_at", models.DateTimeField(blank=True, null=True)),
                (
                    "interrupt",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notifications",
                        to="portal.interrupt",
                    ),
                ),
                (
                    "thread",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notifications",
                        to="portal.thread",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="delivery",
            name="notification",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="portal.notification",
            ),
        ),
        migrations.CreateModel(
            name="RoutingEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("assigned", "Assigned"),
                            ("reminded", "Reminded"),
                            ("escalated", "Escalated"),
                        ],
                        max_length=16,
                    ),
                ),
                ("detail", models.CharField(blank=True, max_length=300)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "interrupt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="routing_events",
                        to="portal.interrupt",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Subscription",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                (
                    "channel",
                    models.CharField(
                        choices=[
                            ("email", "email"),
                            ("webhook", "signed webhook (JSON)"),
                            ("slack", "Slack-style incoming webhook"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "target",
                    models.CharField(
                        blank=True,
                        help_text=(
                            "A URL for webhooks; email addresses separated by commas for email "
                            "(empty: the members of the group below who have an address)."
                        ),
                        max_length=500,
                    ),
                ),
                (
                    "secret",
                    models.CharField(
                        blank=True,
                        help_text=(
                            "Webhooks: the shared secret that signs each request "
                            "(Portal-Signature)."
                        ),
                        max_length=200,
                    ),
                ),
                (
                    "events",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="Event kinds to send (empty: every kind).",
                    ),
                ),
                (
                    "agent",
                    models.CharField(blank=True, help_text="Empty: any agent.", max_length=64),
                ),
                (
                    "reason",
                    models.CharField(blank=True, help_text="Empty: any reason.", max_length=64),
                ),
                ("active", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        help_text=(
                            "Only requests routed to this group (assigned, escalated or required "
                            "by policy). Empty: any request."
                        ),
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="portal_subscriptions",
                        to="auth.group",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="delivery",
            name="subscription",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="deliveries",
                to="portal.subscription",
            ),
        ),
        migrations.CreateModel(
            name="Assignment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("policy", "Policy"),
                            ("interrupt", "Interrupt"),
                            ("escalation", "Escalation"),
                        ],
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="assignments",
                        to="auth.group",
                    ),
                ),
                (
                    "interrupt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="assignments",
                        to="portal.interrupt",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="assignments",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("group__isnull", True), ("user__isnull", False)),
                            models.Q(("group__isnull", False), ("user__isnull", True)),
                            _connector="OR",
                        ),
                        name="assignment_user_or_group",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("user__isnull", False)),
                        fields=("interrupt", "user"),
                        name="assignment_once_per_user",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("group__isnull", False)),
                        fields=("interrupt", "group"),
                        name="assignment_once_per_group",
                    ),
                ],
            },
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("dispatched_at__isnull", True)),
                fields=["created_at"],
                name="notification_undispatched",
            ),
        ),
        migrations.AddConstraint(
            model_name="routingevent",
            constraint=models.UniqueConstraint(
                condition=models.Q(("action__in", ["reminded", "escalated"])),
                fields=("interrupt", "action"),
                name="routing_remind_escalate_once",
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["next_attempt_at"],
                name="delivery_due",
            ),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.UniqueConstraint(
                condition=models.Q(("subscription__isnull", False)),
                fields=("notification", "subscription"),
                name="delivery_once_per_subscription",
            ),
        ),
    ]
