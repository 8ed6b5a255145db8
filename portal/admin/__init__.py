"""The Django admin: a read-only window on the portal's tables, plus deciding interrupts
and a few bulk actions.

Services are the only writers, so nothing here edits a row directly. Threads, checkpoints,
runs and decisions are read-only; decisions cannot be added, changed or deleted even by a
superuser (they are the audit record). The writes are the decision form on an
interrupt's change page, which goes through ``portal.reviews.decisions.decision_submit`` with the
same form, validation and errors as the dashboard, and needs what the dashboard needs
(``roles.can_decide``, on a thread the user may see): the admin's view permission only
lets staff read; and the bulk actions, each through the service its page uses, offered
only to those who hold its permission: expire requests (``interrupt_expire``, which checks
what a decision would), withdraw requests (``interrupt_withdraw``, cancel_thread), cancel
threads (``thread_cancel``, cancel_thread) and retry failed threads (``thread_retry``,
retry_thread). Each selected row is done on its own; what was refused is listed with the
reason.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from portal.accounts import access, roles
from portal.accounts.tokens import api_token_delete
from portal.errors import DecisionRefused, Refused
from portal.models import (
    ApiToken,
    Approval,
    Assignment,
    AuditEvent,
    Checkpoint,
    Decision,
    Delivery,
    DeliveryAttempt,
    ExternalRequest,
    Interrupt,
    Notification,
    RoutingEvent,
    Run,
    Subscription,
    Thread,
)
from portal.notify import outbox
from portal.reviews import threads
from portal.reviews.expiry import interrupt_expire
from portal.reviews.external import request_state, with_collection
from portal.reviews.forms import DecisionForm
from portal.reviews.words import recorded_words


def pretty(value: Any) -> str:
    """JSON, indented and escaped, for a read-only admin field."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="portal-json">{}</pre>', text)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Viewable by staff with the view permission; nobody adds, edits or deletes."""

    class Media:
        css = {"all": ["portal/admin.css"]}  # lists that fit the screen

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def run_each(
    admin_view: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    rows: Any,
    act: Any,
    done: str,
) -> None:
    """Apply ``act(row)`` to each selected row, each in its own service call, and tell the
    user how many were ``done`` and why any others were refused."""
    count, refused = 0, []
    for row in rows:
        try:
            act(row)
        except (DecisionRefused, Refused) as exc:
            refused.append(f"{row}: {exc}")
        else:
            count += 1
    if count:
        admin_view.message_user(request, f"{done}: {count}.", messages.SUCCESS)
    if refused:
        admin_view.message_user(
            request, f"Refused ({len(refused)}): " + "; ".join(refused), messages.WARNING
        )


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.fields or []]


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["seq", "node", "status", "next_node", "interrupt_id", "created_at"]
    ordering = ["seq"]


class InterruptInline(ReadOnlyInline):
    model = Interrupt
    fields = ["id", "reason", "node", "status", "message", "created_at", "resolved_at"]
    ordering = ["created_at"]


class DecisionInline(ReadOnlyInline):
    model = Decision
    fields = ["interrupt", "outcome", "reviewer", "note", "created_at"]
    ordering = ["created_at"]


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    # Newest first (the primary key is a random UUID, so the admin's default order is none).
    ordering = ["-created_at"]
    list_display = ["__str__", "agent", "status", "owner", "updated_at"]
    list_filter = ["status", "agent"]
    search_fields = ["id", "title", "owner__username"]
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
            lambda t: threads.thread_cancel(thread=t, user=request.user),
            "Cancelled",
        )


@admin.register(Interrupt)
class InterruptAdmin(ReadOnlyAdmin):
    # Newest first, by the arrivals index (the id is random, so the default order is none).
    ordering = ["-created_at"]
    # The message says what the request is; the id (random, and searchable) would take
    # a sixth of the row.
    list_display = [
        "short_message",
        "agent",
        "reason",
        "status",
        "claimed_by",
        "created_at",
        "expires_at",
    ]
    list_display_links = ["short_message"]
    list_filter = ["status", "agent", "reason"]
    search_fields = ["id", "message", "summary", "thread__id", "thread__title", "node"]
    list_select_related = ["claimed_by"]
    date_hierarchy = "created_at"
    change_form_template = "admin/portal/interrupt/change_form.html"
    fieldsets = [
        (None, {"fields": ["id", "thread", "agent", "reason", "node", "key", "status"]}),
        (
            "What the agent asks",
            {"fields": ["message_display", "summary", "payload", "schema", "tool_call_id"]},
        ),
        (
            "Queue",
            {
                "fields": [
                    "created_at",
                    "expires_at",
                    "claimed_by",
                    "claimed_at",
                    "resolved_at",
                    "decided",
                    "checkpoint_seq",
                ]
            },
        ),
    ]
    readonly_fields = [
        "id",
        "thread",
        "agent",
        "reason",
        "node",
        "key",
        "status",
        "message_display",
        "summary",
        "payload",
        "schema",
        "tool_call_id",
        "created_at",
        "expires_at",
        "claimed_by",
        "claimed_at",
        "resolved_at",
        "decided",
        "checkpoint_seq",
    ]

    actions = ["expire_requests", "withdraw_requests"]

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return roles.can_decide(request.user)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return roles.can_cancel_threads(request.user)

    @admin.action(
        description="Expire the selected requests now (the runs resume with a decline)",
        permissions=["decide"],
    )
    def expire_requests(self, request: HttpRequest, queryset: QuerySet[Interrupt]) -> None:
        run_each(
            self,
            request,
            queryset.select_related("thread"),
            lambda i: interrupt_expire(interrupt=i, user=request.user),
            "Expired",
        )

    @admin.action(
        description="Withdraw the selected requests (the runs resume without an answer)",
        permissions=["cancel"],
    )
    def withdraw_requests(self, request: HttpRequest, queryset: QuerySet[Interrupt]) -> None:
        run_each(
            self,
            request,
            queryset,
            lambda i: threads.interrupt_withdraw(interrupt=i, user=request.user),
            "Withdrawn",
        )

    @admin.display(description="Request")
    def short_message(self, obj: Interrupt) -> str:
        text = obj.message or obj.id  # the link to the page needs some text
        text = text if len(text) <= 80 else text[:79] + "…"
        # The summary in the same cell, under the message: one more column would not fit.
        if obj.summary_line:
            return format_html('{}<span class="portal-summary">{}</span>', text, obj.summary_line)
        return text

    @admin.display(description="Message")
    def message_display(self, obj: Interrupt) -> str:
        return format_html('<pre class="portal-json">{}</pre>', obj.message or "")

    @admin.display(description="Payload")
    def payload(self, obj: Interrupt) -> str:
        return pretty(obj.value)

    @admin.display(description="Response schema")
    def schema(self, obj: Interrupt) -> str:
        return pretty(obj.response_schema)

    def get_urls(self) -> list[URLPattern]:
        decide = path(
            "<path:object_id>/decide/",
            self.admin_site.admin_view(self.decide_view),
            name="portal_interrupt_decide",
        )
        return [decide, *super().get_urls()]

    def _decision_context(
        self, request: HttpRequest, interrupt: Interrupt, form: DecisionForm | None
    ) -> dict[str, Any]:
        decision = Decision.objects.select_related("reviewer").filter(interrupt=interrupt).first()
        if form is None and interrupt.is_pending and _may_decide_here(request, interrupt):
            form = DecisionForm(interrupt=interrupt)
        return {
            "interrupt": interrupt,
            "decision": decision,
            "decision_form": form if interrupt.is_pending else None,
            # Admin URLs quote primary keys ("_" is its escape character).
            "decide_url": reverse("admin:portal_interrupt_decide", args=[quote(interrupt.pk)]),
        }

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        interrupt = Interrupt.objects.filter(pk=unquote(object_id)).first()
        context = dict(extra_context or {})
        if interrupt is not None and "decision_form" not in context:
            context.update(self._decision_context(request, interrupt, None))
        return super().change_view(request, object_id, form_url, extra_context=context)

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST only: the decision form of the change page."""
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        interrupt = get_object_or_404(
            Interrupt.objects.select_related("thread", "claimed_by"), pk=unquote(object_id)
        )
        if not self.has_view_permission(request, interrupt):
            return HttpResponse("You cannot see this interrupt.", status=403)
        if not roles.can_decide(request.user):
            return HttpResponse(
                "Deciding needs the decide permission (portal.decide_interrupt); the "
                "admin's view permission only lets you read this request.",
                status=403,
                content_type="text/plain; charset=utf-8",
            )
        if not access.can_see_thread(request.user, interrupt.thread):
            return HttpResponse(
                "Deciding a request in someone else's thread needs the permission to read "
                "every thread (portal.view_all_threads), as on the dashboard; the admin's "
                "view permission only lets you read this request.",
                status=403,
                content_type="text/plain; charset=utf-8",
            )
        form = DecisionForm(request.POST, interrupt=interrupt)
        status = 422
        if form.is_valid():
            try:
                decision = form.submit(request.user)
            except DecisionRefused as refusal:
                form.show_refusal(refusal)
                status = refusal.status_code
                interrupt.refresh_from_db()
            else:
                self.message_user(request, recorded_words(decision), messages.SUCCESS)
                change = reverse("admin:portal_interrupt_change", args=[quote(interrupt.pk)])
                return HttpResponseRedirect(change)
        # Show the change page again, as a GET, with the bound form and its errors.
        page_request = copy.copy(request)
        page_request.method = "GET"
        context = self._decision_context(request, interrupt, form)
        if not interrupt.is_pending:
            # Someone else decided meanwhile: say so where the form was.
            context["decision_refusal"] = form.non_field_errors()
        response = self.change_view(page_request, quote(interrupt.pk), extra_context=context)
        response.status_code = status
        return response


def _may_decide_here(request: HttpRequest, interrupt: Interrupt) -> bool:
    """The dashboard's rule: the decide permission, on a thread the user may see."""
    return roles.can_decide(request.user) and access.can_see_thread(request.user, interrupt.thread)


_DECISION_FIELDS: list[str] = [
    "interrupt",
    "thread",
    "reviewer",
    "outcome",
    "note_display",
    "answer",
    "original",
    "executed",
    "created_at",
    "payload_hash",
    "prev_hash",
    "hash",
]


_APPROVAL_FIELDS: list[str] = [
    "interrupt",
    "reviewer",
    "outcome",
    "note",
    "answer",
    "created_at",
    "payload_hash",
    "prev_hash",
    "hash",
]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Each reviewer's vote on a request that needs several; written once, never changed."""

    ordering = ["-id"]  # ids grow with time
    list_display = ["interrupt", "outcome", "reviewer", "created_at"]
    list_filter = ["outcome"]
    search_fields = ["interrupt__id", "reviewer__username", "note"]
    list_select_related = ["reviewer", "interrupt"]
    fields = tuple(_APPROVAL_FIELDS)
    readonly_fields = _APPROVAL_FIELDS

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Answer")
    def answer(self, obj: Approval) -> str:
        return pretty(obj.value)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    ordering = ["-created_at"]  # the decision_recent index
    list_display = ["interrupt", "outcome", "reviewer", "thread", "created_at"]
    list_filter = ["outcome"]
    search_fields = ["interrupt__id", "thread__id", "reviewer__username", "note"]
    list_select_related = ["reviewer", "interrupt", "thread"]
    date_hierarchy = "created_at"
    fields = tuple(_DECISION_FIELDS)
    readonly_fields = _DECISION_FIELDS

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Note")
    def note_display(self, obj: Decision) -> str:
        return format_html('<pre class="portal-json">{}</pre>', obj.note or "")

    @admin.display(description="Answer")
    def answer(self, obj: Decision) -> str:
        return pretty(obj.value)

    @admin.display(description="Original arguments")
    def original(self, obj: Decision) -> str:
        return pretty(obj.original_args)

    @admin.display(description="Executed arguments")
    def executed(self, obj: Decision) -> str:
        return pretty(obj.executed_args)


_EVENT_FIELDS = [
    "created_at",
    "action",
    "actor_name",
    "actor_id",
    "target_type",
    "target_id",
    "detail_display",
    "prev_hash",
    "hash",
]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """The audit trail of actions, read-only (auditors also have it under History)."""

    ordering = ["-created_at", "-id"]  # the auditevent_recent index
    list_display = ["created_at", "action", "actor_name", "target_type", "target_id"]
    list_filter = ["action"]
    search_fields = ["=actor_name", "=target_id", "action"]
    date_hierarchy = "created_at"
    fields = tuple(_EVENT_FIELDS)
    readonly_fields = _EVENT_FIELDS

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Detail")
    def detail_display(self, obj: AuditEvent) -> str:
        return pretty(obj.detail)


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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Tokens are created with ``manage.py create_api_token``; here they can be read and
    deleted (which revokes them)."""

    class Media:
        css = {"all": ["portal/admin.css"]}

    ordering = ["-created_at"]

    list_display = [
        "name",
        "user",
        "scopes",
        "expires_at",
        "revoked_at",
        "created_at",
        "last_used_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username"]
    readonly_fields = [
        "user",
        "name",
        "scopes",
        "expires_at",
        "revoked_at",
        "revoked_reason",
        "token_hash",
        "created_at",
        "last_used_at",
    ]
    exclude = ["password_fingerprint"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return super().get_queryset(request).select_related("user")

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        api_token_delete(token=obj, by=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_delete(token=token, by=request.user)


class CollectionFilter(admin.SimpleListFilter):
    """Where an external request's answer stands: a decided request whose agent never
    read its answer (nor took its webhook) is one an operator should look at."""

    title = "answer"
    parameter_name = "answer"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("pending", "waiting for a decision"),
            ("uncollected", "decided, not collected"),
            ("collected", "collected"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        pending = Interrupt.Status.PENDING
        if self.value() == "pending":
            return queryset.filter(interrupt__status=pending)
        if self.value() == "uncollected":
            return queryset.exclude(interrupt__status=pending).filter(
                collected_at__isnull=True, delivered=False
            )
        if self.value() == "collected":
            return queryset.filter(Q(collected_at__isnull=False) | Q(delivered=True))
        return queryset


@admin.register(ExternalRequest)
class ExternalRequestAdmin(ReadOnlyAdmin):
    """Requests raised by agents outside the portal, and whether their answers reached
    them. The request itself (payload, decision form) is on its interrupt's page."""

    ordering = ["-created_at"]
    list_display = ["interrupt_link", "agent", "title", "requester", "answer", "created_at"]
    list_filter = [CollectionFilter]
    list_select_related = ["interrupt", "interrupt__thread", "requester"]
    search_fields = ["interrupt__id", "external_ref", "idempotency_key", "requester__username"]
    readonly_fields = (
        "interrupt_link",
        "agent",
        "title",
        "requester",
        "token",
        "external_ref",
        "idempotency_key",
        "callback_url",
        "created_at",
        "answer",
        "collected_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ExternalRequest]:
        return with_collection(super().get_queryset(request))

    @admin.display(description="Request")
    def interrupt_link(self, obj: ExternalRequest) -> str:
        url = reverse("admin:portal_interrupt_change", args=[quote(obj.interrupt_id)])
        return format_html('<a href="{}">{}</a>', url, obj.interrupt_id)

    @admin.display(description="Agent")
    def agent(self, obj: ExternalRequest) -> str:
        return obj.interrupt.agent

    @admin.display(description="Title")
    def title(self, obj: ExternalRequest) -> str:
        return obj.interrupt.thread.title

    @admin.display(description="Answer")
    def answer(self, obj: ExternalRequest) -> str:
        if obj.interrupt.status == Interrupt.Status.PENDING:
            return "waiting for a decision"
        state = request_state(obj.interrupt)
        if obj.collected_at is not None:
            return f"{state}, collected {obj.collected_at:%Y-%m-%d %H:%M} UTC"
        if getattr(obj, "delivered", False):
            return f"{state}, collected by its webhook"
        return f"{state}, not collected"


# --- notifications and routing -----------------------------------------------------------


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
