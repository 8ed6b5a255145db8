"""Threads, their runs and checkpoints: read-only, with bulk retry and cancel."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.accounts import roles
from portal.admin.base import ReadOnlyAdmin, ReadOnlyInline, pretty, run_each, technical
from portal.models import Checkpoint, Decision, Interrupt, Run, Thread
from portal.reviews import threads


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["seq", "node", "status", "next_node", "interrupt_id", "created_at"]
    ordering = ["seq"]
    classes = ["collapse"]  # the runtime's own record: folded


class InterruptInline(ReadOnlyInline):
    model = Interrupt
    fields = ["message", "reason", "status", "created_at", "resolved_at"]
    ordering = ["created_at"]


class DecisionInline(ReadOnlyInline):
    model = Decision
    fields = ["outcome", "reviewer", "note", "created_at"]
    ordering = ["created_at"]


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    # Newest first (the primary key is a random UUID, so the admin's default order is none).
    ordering = ["-created_at"]
    list_display = ["__str__", "agent", "status", "owner", "updated_at"]
    list_filter = ["status", "agent"]
    search_fields = ["id", "title", "owner__username"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "title",
                    "agent",
                    "status",
                    "owner",
                    "created_at",
                    "updated_at",
                    "cancelled_at",
                    "cancelled_by",
                ]
            },
        ),
        technical(["id", "last_seq"]),
    ]
    readonly_fields = [
        "id",
        "agent",
        "status",
        "owner",
        "title",
        "created_at",
        "updated_at",
        "last_seq",
        "cancelled_at",
        "cancelled_by",
    ]
    inlines = [CheckpointInline, InterruptInline, DecisionInline]
    actions = ["retry_threads", "cancel_threads"]

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return roles.can_retry_threads(request.user)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return roles.can_cancel_threads(request.user)

    @admin.action(description="Retry the selected failed threads", permissions=["retry"])
    def retry_threads(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        run_each(
            self,
            request,
            queryset,
            lambda t: threads.thread_retry(thread=t, user=request.user),
            "Retried from their last checkpoint",
        )

    @admin.action(description="Cancel the selected threads", permissions=["cancel"])
    def cancel_threads(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        run_each(
            self,
            request,
            queryset,
            lambda t: threads.thread_cancel(thread=t, user=request.user, door=Decision.Door.ADMIN),
            "Cancelled",
        )


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    ordering = ["-created_at"]  # the id is a random UUID
    list_display = ["id", "thread", "kind", "status", "attempts", "created_at", "finished_at"]
    list_filter = ["status", "kind"]
    search_fields = ["id", "thread__id"]
    readonly_fields = [
        "id",
        "thread",
        "kind",
        "status",
        "input_display",
        "attempts",
        "lease_owner",
        "lease_expires_at",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]
    exclude = ["input"]

    @admin.display(description="Input")
    def input_display(self, obj: Run) -> str:
        return pretty(obj.input)


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    ordering = ["-id"]  # ids grow with time: newest first, by the primary key
    list_display = ["thread", "seq", "node", "status", "next_node", "created_at"]
    list_filter = ["status"]
    search_fields = ["thread__id", "interrupt_id"]
    readonly_fields = [
        "thread",
        "seq",
        "node",
        "status",
        "next_node",
        "messages_display",
        "meta_display",
        "interrupt_display",
        "interrupt_id",
        "run",
        "created_at",
    ]
    exclude = ["messages", "meta", "interrupt"]

    @admin.display(description="Messages added")
    def messages_display(self, obj: Checkpoint) -> str:
        return pretty(obj.messages)

    @admin.display(description="Meta")
    def meta_display(self, obj: Checkpoint) -> str:
        return pretty(obj.meta)

    @admin.display(description="Interrupt")
    def interrupt_display(self, obj: Checkpoint) -> str:
        return pretty(obj.interrupt)
