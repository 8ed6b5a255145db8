"""The reviewers' queue: pending interrupts, filtered, sorted by age, keyset-paginated.

A page costs the same few queries whether ten or a million interrupts are pending: rows
come from one ``LIMIT`` query that starts at the cursor (the last row's ``created_at``
and ``id``) on the partial index of pending rows, never from an OFFSET, and the count is
capped. The open page stays current over ``/ws/queue/`` (see static/portal/live.js).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from portal.accounts import roles
from portal.audit import history
from portal.models import Approval, Interrupt, paging
from portal.models.paging import Cursor
from portal.notify.assignments import assigned_to
from portal.reviews.checks import decision_forbidden
from portal.reviews.words import agent_words, reason_words, tool_words


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


PAGE_SIZE = 25
COUNT_CAP = 1000
SORTS = {"oldest": "Oldest first", "newest": "Newest first"}


def encode_cursor(item: Interrupt) -> str:
    return Cursor.of(item, "created_at").encode()


@dataclass
class QueuePage:
    items: list[Interrupt]
    next_cursor: str | None
    prev_cursor: str | None
    is_first: bool


def pending_queryset(
    *,
    agent: str = "",
    reason: str = "",
    tool: str = "",
    q: str = "",
    assigned_to_user: Any = None,
) -> QuerySet[Interrupt]:
    qs = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    if agent:
        qs = qs.filter(agent=agent)
    if reason:
        qs = qs.filter(reason=reason)
    if tool:
        qs = qs.filter(history.tool_q(tool))
    if q:
        qs = qs.filter(history.text_q(q))
    if assigned_to_user is not None:
        qs = qs.filter(assigned_to(assigned_to_user))
    return qs


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
    # The votes on requests that need several reviewers, for the whole page at once.
    votes = Approval.objects.select_related("reviewer").order_by("id")
    qs = qs.select_related("thread__owner", "claimed_by").prefetch_related(
        Prefetch("approvals", queryset=votes)
    )
    back = Cursor.decode(before)
    if back:
        # Walk the other way from the cursor, then put the rows back in display order.
        rows, more_before = paging.page(
            qs, back, field="created_at", descending=not newest_first, size=size
        )
        items = list(reversed(rows))
        return QueuePage(
            items=items,
            next_cursor=encode_cursor(items[-1]) if items else None,
            prev_cursor=encode_cursor(items[0]) if items and more_before else None,
            is_first=not more_before,
        )
    cursor = Cursor.decode(after)
    items, more = paging.page(qs, cursor, field="created_at", descending=newest_first, size=size)
    return QueuePage(
        items=items,
        next_cursor=encode_cursor(items[-1]) if more else None,
        prev_cursor=encode_cursor(items[0]) if cursor and items else None,
        is_first=cursor is None,
    )


@require_GET
@login_required
def queue(request: HtmxRequest) -> HttpResponse:
    if not roles.can_decide(request.user):
        raise PermissionDenied("The review queue is for reviewers.")
    agent = request.GET.get("agent", "")[:64]
    reason = request.GET.get("reason", "")[:64]
    tool = request.GET.get("tool", "")[:128]
    q = request.GET.get("q", "").strip()[:200]
    sort = request.GET.get("sort", "oldest")
    if sort not in SORTS:
        sort = "oldest"
    assigned = "me" if request.GET.get("assigned") == "me" else ""
    mine = request.user if assigned else None
    qs = pending_queryset(agent=agent, reason=reason, tool=tool, q=q, assigned_to_user=mine)
    page = queue_page(
        qs,
        newest_first=sort == "newest",
        after=request.GET.get("after"),
        before=request.GET.get("before"),
    )
    # Capped, so the page stays as cheap at a million pending rows as at ten.
    count = qs.order_by()[: COUNT_CAP + 1].count()
    filtered = bool(agent or reason or tool or q or assigned)
    total = pending_queryset().order_by()[: COUNT_CAP + 1].count() if filtered else count
    # The dropdowns, from the pending requests themselves (one bounded query), in words.
    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING).order_by("-created_at")
    known = history.choices_from(pending, {"agent": agent, "reason": reason, "tool": tool})
    context: dict[str, Any] = {
        "page": page,
        # Outside agents (portal/reviews/external.py) have no settings entry: they are
        # offered while one of their requests waits.
        "agents": [(a, agent_words(a)) for a in known["agents"]],
        "reasons": [(r, reason_words(r)) for r in known["reasons"]],
        "tools": [(t, tool_words(t)) for t in known["tools"]],
        "tool": tool,
        "q": q,
        "sorts": SORTS,
        "agent": agent,
        "reason": reason,
        "assigned": assigned,
        "sort": sort,
        "count": min(count, COUNT_CAP),
        "count_capped": count > COUNT_CAP,
        # Every pending request, whatever the filters: the tab title and the live count.
        "total": min(total, COUNT_CAP),
        "total_capped": total > COUNT_CAP,
        "filtered": filtered,
        # live.js re-fetches the table this often as a backstop for missed broadcasts.
        "resync_ms": settings.PORTAL_QUEUE_RESYNC_SECONDS * 1000,
        "filter_qs": urlencode(
            {
                k: v
                for k, v in (
                    ("agent", agent),
                    ("reason", reason),
                    ("tool", tool),
                    ("q", q),
                    ("assigned", assigned),
                )
                if v
            }
            | {"sort": sort}
        ),
    }
    template = "portal/queue.html"
    if request.htmx and not request.htmx.boosted:
        template += "#queue-table"
    return render(request, template, context)


# How many of the oldest pending requests "Next request" looks through for one this
# reviewer may decide (claimed by others, or theirs by separation of duties, are skipped).
NEXT_SCAN = 200


def next_for(user: Any, *, skip: str = "") -> Interrupt | None:
    """The oldest pending request ``user`` may decide now, other than ``skip``."""
    qs = pending_queryset().select_related("thread", "claimed_by").order_by("created_at", "id")
    for item in qs[:NEXT_SCAN]:
        if item.pk != skip and decision_forbidden(interrupt=item, user=user) is None:
            return item
    return None


@require_GET
@login_required
def queue_next(request: HttpRequest) -> HttpResponse:
    """ "Next request": the oldest pending request this reviewer may decide, or the queue
    with a word when none is left."""
    if not roles.can_decide(request.user):
        raise PermissionDenied("The review queue is for reviewers.")
    item = next_for(request.user, skip=request.GET.get("after", ""))
    if item is None:
        messages.info(request, "Nothing else is waiting for you: the queue is clear.")
        return redirect("queue")
    return redirect("interrupt_detail", interrupt_id=item.pk)


urlpatterns = [
    path("queue/", queue, name="queue"),
    path("queue/next", queue_next, name="queue_next"),
]
