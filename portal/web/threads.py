"""Threads: the list a user may see, one thread's transcript and timeline, and the
transcript fragment the live pages re-fetch to catch up (rebuilt from the checkpoints)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from agents.state import Message
from portal.accounts import access, roles
from portal.audit import history
from portal.models import Checkpoint, Decision, Interrupt, Run, Thread, paging
from portal.models.paging import Cursor
from portal.reviews.words import (
    Decided,
    agent_words,
    call_words,
    decided_by_words,
    ending_words,
    result_words,
)


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


PAGE_SIZE = 30
TIMELINE_LIMIT = 200


def display_message(
    data: dict[str, Any], decided: dict[str, Decided] | None = None
) -> dict[str, Any]:
    """A stored message as the transcript partials show it: tool calls parsed and put in
    words, and a tool's JSON result as a sentence (``decided``: who answered the request
    each tool call waited on, by call id; see ``decisions_by_call``)."""
    message = Message.from_dict(data)
    content = message.content
    if message.role == "tool" and isinstance(content, str):
        by = (decided or {}).get(message.tool_call_id or "")
        content = result_words(content, message.name, by)
    return {
        "id": message.id,
        "role": message.role,
        "content": content,
        "name": message.name,
        "tool_calls": [
            {"id": call_id, "name": name, "args": args, "words": call_words(name, args)}
            for call_id, name, args in message.tool_call_arguments()
        ],
    }


def decisions_by_call(thread: Thread) -> dict[str, Decided]:
    """Who answered each request of ``thread`` that a tool call waited on, by call id."""
    out: dict[str, Decided] = {}
    decisions = Decision.objects.filter(thread=thread).select_related(
        "reviewer", "interrupt", "rule_version__rule"
    )
    for decision in decisions:
        request = decision.interrupt
        ids = [call.id for call in request.tool_calls]
        if request.tool_call_id:
            ids.append(request.tool_call_id)
        entry = Decided(
            who=decided_by_words(decision),
            outcome=decision.outcome,
            withdrawn=decision.is_withdrawal(thread),
        )
        out.update(dict.fromkeys(ids, entry))
    return out


def live_transcript_context(thread_id: Any) -> dict[str, Any]:
    """What a transcript message reads besides itself (its owner, who answered its tool
    calls), for messages rendered outside a page (``live.render_transcript_message``)."""
    thread = Thread.objects.select_related("owner").get(pk=thread_id)
    return {"thread": thread, "decided": decisions_by_call(thread)}


def transcript(thread: Thread, messages: Iterable[Any]) -> list[dict[str, Any]]:
    """``messages`` of ``thread`` as the transcript partials show them: the system prompt
    left out, each through ``display_message``."""
    decided = decisions_by_call(thread)
    return [
        display_message(m, decided)
        for m in messages
        if isinstance(m, dict) and m.get("role") != "system"
    ]


def _ended(thread: Thread) -> dict[str, Any] | None:
    """How the latest request of a finished ``thread`` ended (the status tag says it, so
    the live list reads as a reload does), or None when none was decided."""
    latest = Decision.objects.filter(thread=thread).order_by("-created_at", "-pk").first()
    if latest is None:
        return None
    withdrawn = latest.is_withdrawal(thread)
    words = ending_words(latest.outcome, latest.note, withdrawn=withdrawn)
    return {"outcome": latest.outcome, "words": words, "withdrawn": withdrawn}


def transcript_context(thread: Thread, *, after_seq: int = 0) -> dict[str, Any]:
    """What the transcript partial shows: the conversation rebuilt from the checkpoints
    (``after_seq`` keeps only the steps after that one), the pending request if paused,
    and whether a run is under way."""
    steps = Checkpoint.objects.filter(thread=thread, seq__gt=after_seq)
    messages = transcript(thread, steps.conversation())
    pending = None
    if thread.status == Thread.Status.INTERRUPTED:
        pending = (
            Interrupt.objects.filter(thread=thread, status=Interrupt.Status.PENDING)
            .order_by("-created_at")
            .first()
        )
    last_run = Run.objects.filter(thread=thread).order_by("-created_at").first()
    # A pending request means a person is awaited, even in the moment between the pause's
    # write and the worker marking its run finished.
    working = thread.status == Thread.Status.RUNNING or (
        pending is None
        and last_run is not None
        and last_run.status in (Run.Status.QUEUED, Run.Status.RUNNING)
    )
    can_reply = thread.status == Thread.Status.DONE and not working
    return {
        "ended": _ended(thread) if thread.status == Thread.Status.DONE else None,
        "thread": thread,
        "transcript_messages": messages,
        "pending": pending,
        "last_run": last_run,
        "working": working,
        "can_reply": can_reply,
        "reply_why": "" if can_reply else _why_no_reply(thread, pending, working),
        # Something left to stop (threads.thread_cancel refuses the rest).
        "cancellable": thread.status != Thread.Status.CANCELLED
        and (thread.status != Thread.Status.DONE or working),
    }


def _why_no_reply(thread: Thread, pending: Interrupt | None, working: bool) -> str:
    """What the chat's closed composer waits for, in the owner's words."""
    if thread.status == Thread.Status.CANCELLED:
        return "This conversation was cancelled; start a new chat to go on."
    if pending is not None:
        return "You can write again once a reviewer has answered the request above."
    if thread.status == Thread.Status.FAILED and not working:
        return "The agent stopped on an error: you can write again once it is retried."
    return "You can write again once the agent has finished this turn."


def _timeline(thread: Thread) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for cp in Checkpoint.objects.filter(thread=thread).order_by("-seq")[:TIMELINE_LIMIT]:
        events.append({"kind": "checkpoint", "at": cp.created_at, "obj": cp})
    for it in Interrupt.objects.filter(thread=thread).order_by("-created_at")[:TIMELINE_LIMIT]:
        events.append({"kind": "interrupt", "at": it.created_at, "obj": it})
    decisions = Decision.objects.filter(thread=thread).select_related(
        "reviewer", "thread", "rule_version__rule"
    )
    for d in decisions.order_by("-created_at")[:TIMELINE_LIMIT]:
        events.append({"kind": "decision", "at": d.created_at, "obj": d})
    for run in Run.objects.filter(thread=thread).order_by("-created_at")[:TIMELINE_LIMIT]:
        events.append({"kind": "run", "at": run.created_at, "obj": run})
    order = {"run": 0, "checkpoint": 1, "interrupt": 2, "decision": 3}
    events.sort(key=lambda e: (e["at"], order[e["kind"]]))
    return events


@require_GET
@login_required
def threads(request: HttpRequest) -> HttpResponse:
    qs = access.visible_threads(request.user).select_related("owner")
    status = request.GET.get("status", "")
    if status in Thread.Status.values:
        qs = qs.filter(status=status)
    else:
        status = ""
    agent = request.GET.get("agent", "")[:64]
    if agent:
        qs = qs.filter(agent=agent)
    q = request.GET.get("q", "").strip()[:200]
    if q:
        # The title is the customer's first words; the search reads all of theirs.
        qs = qs.filter(Q(title__icontains=q) | Q(pk__in=history.customer_said(q)))
    filters = {k: v for k, v in (("status", status), ("agent", agent), ("q", q)) if v}
    cursor = Cursor.decode(request.GET.get("after"), uuid.UUID)
    items, more = paging.page(qs, cursor, field="updated_at", descending=True, size=PAGE_SIZE)
    next_cursor = Cursor.of(items[-1], "updated_at").encode() if more else None
    agents = set(settings.PORTAL_AGENTS) | ({agent} if agent else set())
    context = {
        "items": items,
        "status": status,
        "statuses": Thread.Status.values,
        "agent": agent,
        "agents": [(a, agent_words(a)) for a in sorted(agents)],
        "q": q,
        "filters_qs": urlencode(filters),
        "filtered": bool(filters),
        "next_qs": urlencode(filters | {"after": next_cursor}) if next_cursor else "",
        "paged": cursor is not None,
        "sees_all": roles.can_view_all(request.user),
    }
    return render(request, "portal/threads.html", context)


@require_GET
@login_required
def thread_detail(request: HtmxRequest, thread_id: str) -> HttpResponse:
    thread = access.get_thread_for_user(request, thread_id)
    context = transcript_context(thread)
    context["timeline"] = _timeline(thread)
    template = "portal/thread.html"
    if request.htmx and not request.htmx.boosted:
        template += "#thread-live"
    return render(request, template, context)


@require_GET
@login_required
def thread_transcript_hx(request: HttpRequest, thread_id: str) -> HttpResponse:
    """The transcript alone, for live pages catching up after a drop or a pause.
    ``?after=<seq>`` shows only what happened after that checkpoint (the interrupt page
    follows the run its decision resumed)."""
    thread = access.get_thread_for_user(request, thread_id)
    try:
        after = max(0, int(request.GET.get("after", 0)))
    except ValueError:
        after = 0
    return render(
        request, "portal/partials/transcript.html", transcript_context(thread, after_seq=after)
    )


urlpatterns = [
    path("threads/", threads, name="threads"),
    path("threads/<str:thread_id>/", thread_detail, name="thread_detail"),
    path("threads/<str:thread_id>/transcript/", thread_transcript_hx, name="thread_transcript_hx"),
]
