"""Requests (interrupts) with the decision form on their change page, votes, decisions,
and requests raised by agents outside the portal."""

from __future__ import annotations

import copy
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from portal.accounts import access, roles
from portal.admin.base import ReadOnlyAdmin, pretty, run_each, technical
from portal.errors import DecisionRefused
from portal.models import Approval, Decision, ExternalRequest, Interrupt
from portal.reviews import threads
from portal.reviews.expiry import interrupt_expire
from portal.reviews.external import request_state, with_collection
from portal.reviews.forms import DecisionForm
from portal.reviews.words import (
    agent_words,
    decided_by_words,
    decision_words,
    edits_in_words,
    reason_words,
    recorded_words,
    submitted_words,
)

TECHNICAL = ["request_id", "node_name", "pause_key", "tool_call", "checkpoint_number"]


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
    # The runtime's keys (the pause's key, node, checkpoint, tool call) are for whoever
    # debugs the runtime: folded in a technical section, named in words there too.
    fieldsets = [
        (None, {"fields": ["message_display", "summary", "thread", "agent_name", "reason_name"]}),
        ("What the agent sent", {"fields": ["payload"]}),
        (
            "Queue",
            {
                "fields": [
                    "status",
                    "created_at",
                    "expires_at",
                    "claimed_by",
                    "claimed_at",
                    "resolved_at",
                    "decided",
                ]
            },
        ),
        technical([*TECHNICAL, "schema"]),
    ]
    readonly_fields = [
        "thread",
        "agent_name",
        "reason_name",
        "status",
        "message_display",
        "summary",
        "payload",
        "schema",
        "created_at",
        "expires_at",
        "claimed_by",
        "claimed_at",
        "resolved_at",
        "decided",
        *TECHNICAL,
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
            lambda i: interrupt_expire(interrupt=i, user=request.user, door=Decision.Door.ADMIN),
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
            lambda i: threads.interrupt_withdraw(
                interrupt=i, user=request.user, door=Decision.Door.ADMIN
            ),
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

    @admin.display(description="Agent")
    def agent_name(self, obj: Interrupt) -> str:
        return agent_words(obj.agent)

    @admin.display(description="Reason")
    def reason_name(self, obj: Interrupt) -> str:
        return reason_words(obj.reason)

    @admin.display(description="Request id")
    def request_id(self, obj: Interrupt) -> str:
        return obj.id

    @admin.display(description="Node that asked")
    def node_name(self, obj: Interrupt) -> str:
        return obj.node

    @admin.display(description="The runtime's key for this pause")
    def pause_key(self, obj: Interrupt) -> str:
        return obj.key

    @admin.display(description="The tool call that waits")
    def tool_call(self, obj: Interrupt) -> str:
        return obj.tool_call_id or "—"

    @admin.display(description="Checkpoint that paused")
    def checkpoint_number(self, obj: Interrupt) -> int:
        return obj.checkpoint_seq

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
                decision = form.submit(request.user, door=Decision.Door.ADMIN)
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


# What a decision or a vote stored as it was (JSON, hashes): folded on their pages.
_HASHES = ["payload_hash", "prev_hash", "hash"]
_DECISION_FIELDS = [
    "in_words",
    "interrupt",
    "thread",
    "reviewer",
    "rule_version",
    "door",
    "created_at",
]
_DECISION_TECHNICAL = ["answer", "original", "executed", "rule_hash", *_HASHES]
_APPROVAL_FIELDS = ["outcome", "interrupt", "reviewer", "note", "door", "created_at"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Each reviewer's vote on a request that needs several; written once, never changed."""

    ordering = ["-id"]  # ids grow with time
    list_display = ["outcome", "reviewer", "interrupt", "door", "created_at"]
    list_filter = ["outcome", "door"]
    search_fields = ["interrupt__id", "reviewer__username", "note"]
    list_select_related = ["reviewer", "interrupt"]
    fieldsets = [(None, {"fields": tuple(_APPROVAL_FIELDS)}), technical(["answer", *_HASHES])]
    readonly_fields = [*_APPROVAL_FIELDS, "answer", *_HASHES]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Answer")
    def answer(self, obj: Approval) -> str:
        return pretty(obj.value)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    ordering = ["-created_at"]  # the decision_recent index
    # Three columns, so a phone reads them: who decided what, on which request, when.
    list_display = ["decided", "interrupt", "created_at"]
    list_display_links = ["decided"]
    list_filter = ["outcome"]
    search_fields = ["interrupt__id", "thread__id", "reviewer__username", "note"]
    list_select_related = ["reviewer", "interrupt", "thread", "rule_version__rule"]
    date_hierarchy = "created_at"
    fieldsets = [
        (None, {"fields": (*_DECISION_FIELDS, "note_display")}),
        technical(_DECISION_TECHNICAL),
    ]
    readonly_fields = [*_DECISION_FIELDS, "note_display", *_DECISION_TECHNICAL]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Decision", ordering="outcome")
    def decided(self, obj: Decision) -> str:
        who = decided_by_words(obj)
        return f"{decision_words(obj.outcome, withdrawn=obj.is_withdrawal())} · {who}"

    @admin.display(description="In words")
    def in_words(self, obj: Decision) -> str:
        """The outcome, what was answered, and an edit field by field, as the history
        writes them (the JSON is in the technical section)."""
        withdrawn = obj.is_withdrawal()
        names = obj.interrupt.call_names()
        edits = edits_in_words(obj.original_args, obj.executed_args, names)
        return format_html(
            "<strong>{}</strong>{}",
            submitted_words(obj.outcome, obj.value, withdrawn=withdrawn),
            format_html_join(
                "",
                '<br><span class="edit-changes">{}: {}</span>',
                ((e.tool, "; ".join(str(c) for c in e.changes)) for e in edits),
            ),
        )

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
    list_display = [
        "interrupt_link",
        "agent",
        "title",
        "source",
        "requester",
        "answer",
        "created_at",
    ]
    list_filter = [CollectionFilter, "source"]
    list_select_related = ["interrupt", "interrupt__thread", "requester"]
    search_fields = ["interrupt__id", "external_ref", "idempotency_key", "requester__username"]
    readonly_fields = (
        "interrupt_link",
        "agent",
        "title",
        "source",
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
