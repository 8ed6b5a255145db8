"""Notifications and routing: subscriptions (written through the outbox's services), the
outbox and its delivery log, assignments and routing events (read-only)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.admin.base import ReadOnlyAdmin, ReadOnlyInline, pretty
from portal.models import (
    Assignment,
    Delivery,
    DeliveryAttempt,
    Notification,
    RoutingEvent,
    Subscription,
)
from portal.notify import outbox


class SubscriptionForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Subscription
        fields = [
            "name",
            "channel",
            "target",
            "secret",
            "events",
            "agent",
            "reason",
            "group",
            "active",
        ]
        # Never rendered back: the page's HTML would carry the signing secret to every
        # browser cache and screenshot of it. Blank on a change keeps the current one.
        widgets = {"secret": forms.PasswordInput(render_value=False)}
        help_texts = {
            "events": "A JSON list of: " + ", ".join(outbox.KINDS) + ". [] is all.",
            "secret": "Leave blank when changing a subscription to keep its current secret.",
        }

    def clean_secret(self) -> str:
        secret = str(self.cleaned_data.get("secret") or "")
        if not secret and self.instance.pk:
            return str(self.instance.secret)
        return secret

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            outbox.check_subscription(
                channel=data.get("channel", ""),
                target=data.get("target", ""),
                secret=data.get("secret", ""),
                events=data.get("events"),
                has_group=data.get("group") is not None,
            )
        except outbox.TargetError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Who is told about what. Saved and deleted through ``portal.notify.outbox``'s services."""

    class Media:
        css = {"all": ["portal/admin.css"]}

    form = SubscriptionForm
    list_display = ["name", "channel", "target", "events", "agent", "reason", "group", "active"]
    list_filter = ["channel", "active", "group"]
    search_fields = ["name", "target", "agent", "reason"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        outbox.subscription_save(subscription=obj, user=request.user)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        outbox.subscription_delete(subscription=obj, user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            outbox.subscription_delete(subscription=obj, user=request.user)


class DeliveryInline(ReadOnlyInline):
    model = Delivery
    fields = ["channel", "target", "status", "attempts", "next_attempt_at", "last_error"]
    ordering = ["created_at"]


class DeliveryAttemptInline(ReadOnlyInline):
    model = DeliveryAttempt
    fields = ["number", "at", "ok", "status_code", "error", "duration_ms"]
    ordering = ["number"]
    show_change_link = False


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    ordering = ["-created_at"]
    list_display = ["kind", "agent", "reason", "interrupt", "created_at", "dispatched_at"]
    list_filter = ["kind", "agent"]
    search_fields = ["id", "interrupt__id", "thread__id"]
    readonly_fields = [
        "id",
        "kind",
        "agent",
        "reason",
        "interrupt",
        "thread",
        "created_at",
        "dispatched_at",
        "payload_display",
    ]
    fields = list(readonly_fields)
    inlines = [DeliveryInline]

    @admin.display(description="Payload")
    def payload_display(self, obj: Notification) -> str:
        return pretty(obj.payload)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: each delivery's status, attempts and last error, and every try."""

    ordering = ["-created_at"]
    list_display = [
        "notification",
        "channel",
        "target",
        "status",
        "attempts",
        "next_attempt_at",
        "sent_at",
        "last_error",
    ]
    list_filter = ["status", "channel"]
    search_fields = ["id", "target", "notification__id"]
    exclude = ["secret"]  # a webhook's signing secret is not for every admin reader
    readonly_fields = [
        "id",
        "notification",
        "subscription",
        "channel",
        "target",
        "status",
        "attempts",
        "next_attempt_at",
        "last_error",
        "created_at",
        "sent_at",
    ]
    inlines = [DeliveryAttemptInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).select_related("notification")


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    ordering = ["-created_at"]
    list_display = ["interrupt", "user", "group", "source", "created_at"]
    list_filter = ["source", "group"]
    search_fields = ["interrupt__id", "user__username", "group__name"]
    readonly_fields = ["interrupt", "user", "group", "source", "created_at"]


@admin.register(RoutingEvent)
class RoutingEventAdmin(ReadOnlyAdmin):
    """The record of every assignment, reminder and escalation."""

    ordering = ["-created_at"]
    list_display = ["interrupt", "action", "user", "group", "detail", "created_at"]
    list_filter = ["action"]
    search_fields = ["interrupt__id", "user__username", "group__name"]
    readonly_fields = ["interrupt", "action", "user", "group", "detail", "created_at"]
