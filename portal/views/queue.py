"""The reviewers' queue: pending interrupts, filtered, sorted by age, keyset-paginated.

A page costs the same few queries whether ten or a million interrupts are pending: rows
come from one ``LIMIT`` query that starts at the cursor (the last row's ``created_at``
and ``id``) on the partial index of pending rows, never from an OFFSET, and the count is
capped. The open page stays current over ``/ws/queue/`` (see static/portal/live.js).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from portal import roles
from portal.models import Approval, Interrupt


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


PAGE_SIZE = 25
COUNT_CAP = 1000
# The reasons the runtime raises; a reason outside this list still filters correctly.
KNOWN_REASONS = [
    "tool_approval",
    "transfer_approval",
    "breakpoint",
    "input_required",
    "uncertain_outcome",
]
SORTS = {"oldest": "Oldest first", "newest": "Newest first"}


def encode_cursor(item: Interrupt) -> str:
    return f"{item.created_at.isoformat()}~{item.pk}"


def decode_cursor(raw: str | None) -> tuple[datetime, str] | None:
    if not raw or "~" not in raw:
        return None
    when, _, pk = raw.partition("~")
    try:
        parsed = parse_datetime(when)
    except ValueError:
        return None
    if parsed is None or not pk:
        return None
    return parsed, pk


@dataclass
class QueuePage:
    items: list[Interrupt]
    next_cursor: str | None
    prev_cursor: str | None
    is_first: bool


def pending_queryset(*, agent: str = "", reason: str = "") -> QuerySet[Interrupt]:
    qs = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    if agent:
        qs = qs.filter(agent=agent)
    if reason:
        qs = qs.filter(reason=reason)
    return qs


def _after(cursor: tuple[datetime, str], *, ascending: bool) -> Q:
    # (created_at, id) strictly after the cursor in the given direction. The plain
    # created_at bound lets the index range start at the cursor instead of scanning up to it.
    when, pk = cursor
    if ascending:
        return Q(created_at__gte=when) & (Q(created_at__gt=when) | Q(id__gt=pk))
    return Q(created_at__lte=when) & (Q(created_at__lt=when) | Q(id__lt=pk))


def queue_page(
    qs: QuerySet[Interrupt],
    *,
    newest_first: bool = False,
    after: str | None = None,
    before: str | None = None,
    size: int = PAGE_SIZE,
) -> QueuePage:
    """One page of ``qs`` in age order, starting after ``after`` (or ending before
    ``before``); a single query."""
    order = ["-created_at", "-id"] if newest_first else ["created_at", "id"]
    back = decode_cursor(before)
    cursor = None if back else decode_cursor(after)
    # The votes on requests that need several reviewers, for the whole page at once.
    votes = Approval.objects.select_related("reviewer").order_by("id")
    qs = qs.select_related("thread__owner", "claimed_by").prefetch_related(
        Prefetch("approvals", queryset=votes)
    )
    if back:
        # Walk the other way from the cursor, then put the rows back in display order.
        reverse = [f.lstrip("-") if f.startswith("-") else f"-{f}" for f in order]
        rows = list(qs.filter(_after(back, ascending=newest_first)).order_by(*reverse)[: size + 1])
        has_more_before = len(rows) > size
        items = list(reversed(rows[:size]))
        return QueuePage(
            items=items,
            next_cursor=encode_cursor(items[-1]) if items else None,
            prev_cursor=encode_cursor(items[0]) if items and has_more_before else None,
            is_first=not has_more_before,
        )
    if cursor:
        qs = qs.filter(_after(cursor, ascending=not newest_first))
    rows = list(qs.order_by(*order)[: size + 1])
    items = rows[:size]
    return QueuePage(
        items=items,
        next_cursor=encode_cursor(items[-1]) if len(rows) > size else None,
        prev_cursor=encode_cursor(items[0]) if cursor and items else None,
        is_first=cursor is None,
    )


@require_GET
@login_required
def queue(request: HtmxRequest) -> HttpResponse:
    if not roles.can_decide(request.user):
        raise PermissionDenied("The review queue is for reviewers.")
    agents = sorted(settings.PORTAL_AGENTS)
    agent = request.GET.get("agent", "")
    reason = request.GET.get("reason", "")
    sort = request.GET.get("sort", "oldest")
    if sort not in SORTS:
        sort = "oldest"
    qs = pending_queryset(agent=agent, reason=reason)
    page = queue_page(
        qs,
        newest_first=sort == "newest",
        after=request.GET.get("after"),
        before=request.GET.get("before"),
    )
    # Capped, so the page stays as cheap at a million pending rows as at ten.
    count = qs.order_by()[: COUNT_CAP + 1].count()
    total = pending_queryset().order_by()[: COUNT_CAP + 1].count() if agent or reason else count
    reasons = KNOWN_REASONS + ([reason] if reason and reason not in KNOWN_REASONS else [])
    context: dict[str, Any] = {
        "page": page,
        "agents": agents,
        "reasons": reasons,
        "sorts": SORTS,
        "agent": agent,
        "reason": reason,
        "sort": sort,
        "count": min(count, COUNT_CAP),
        "count_capped": count > COUNT_CAP,
        # Every pending request, whatever the filters: the tab title and the live count.
        "total": min(total, COUNT_CAP),
        "total_capped": total > COUNT_CAP,
        "filtered": bool(agent or reason),
        # live.js re-fetches the table this often as a backstop for missed broadcasts.
        "resync_ms": settings.PORTAL_QUEUE_RESYNC_SECONDS * 1000,
        "filter_qs": urlencode(
            {k: v for k, v in (("agent", agent), ("reason", reason)) if v} | {"sort": sort}
        ),
    }
    template = "portal/queue.html"
    if request.htmx and not request.htmx.boosted:
        template += "#queue-table"
    return render(request, template, context)


urlpatterns = [path("queue/", queue, name="queue")]
