"""Live rendering: what an event looks like on the pages that watch it.

``portal.notify.broadcast`` announces events by id and status; this module, registered as
its renderer at start-up (``PortalConfig.ready``), turns each into HTML once, after
commit, in broadcast's announcer thread, from the same template partials the pages use
(as out-of-band swaps). More in docs/architecture.md (``## web``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.template.loader import render_to_string

from portal.models import Decision, Interrupt
from portal.notify import broadcast
from portal.web import queue, threads

log = logging.getLogger(__name__)


# --- the transcript: a run's finished messages -------------------------------------------


async def render_transcript_message(
    transcript: broadcast.LiveTranscript, message: dict[str, Any]
) -> str:
    """``message`` as the thread's page shows it, as out-of-band swaps ('' when there is
    nothing to show, or it cannot be rendered): with the thread (its owner's name on their
    messages) and who answered each tool call's request (a declined result names the
    reviewer), read once per run into ``transcript.page``."""
    if message.get("role") == "system" or not message.get("id"):
        return ""
    if transcript.page is None:
        # Not on the run's connection (nor in a caller's transaction around the run).
        transcript.page = await broadcast.announcing(_read_page, transcript.thread_id)
    page = transcript.page
    try:
        m = threads.display_message(message, page["decided"])
        return render_to_string(
            "portal/partials/transcript_message_live.html", {"m": m, "thread": page["thread"]}
        )
    except Exception:
        log.warning("rendering message %s failed", message.get("id"), exc_info=True)
        return ""


def _read_page(thread_id: object) -> dict[str, Any]:
    """``threads.live_transcript_context``, or none (read once per run: a failure is not
    retried for each message)."""
    try:
        return threads.live_transcript_context(thread_id)
    except Exception:
        log.warning("reading thread %s for its live transcript failed", thread_id, exc_info=True)
        return {"thread": None, "decided": {}}


# --- requests: the queue's rows and the pages about them ---------------------------------


def render_interrupt_change(
    interrupt_id: str, *, by: Any = None, news: str = ""
) -> tuple[list[str], str]:
    """What an interrupt's change looks like, read after commit: the swaps for the open
    queues, and those for the open pages about it ('' when they cannot be rendered: the
    queues then catch up when they next re-fetch)."""
    try:
        item = (
            Interrupt.objects.select_related("thread__owner", "claimed_by")
            .filter(pk=interrupt_id)
            .first()
        )
        if item is None:
            return [], ""
        pending = item.status == Interrupt.Status.PENDING
        decision = (
            None
            if pending
            else Decision.objects.select_related("reviewer").filter(interrupt=item).first()
        )
        news = news or _news(item, by)
        context = {
            "item": item if pending else None,
            "gone": "" if pending else item.pk,
            "pending_count": pending_count(),
            "news": news,
        }
        return _queue_frames(context), render_interrupt_page(item, decision, news)
    except Exception:
        log.warning("rendering the change of %s failed", interrupt_id, exc_info=True)
        return [], ""


def render_interrupt_page(item: Any, decision: Any, news: str = "") -> str:
    """The swaps that show an open page of ``item`` what became of it (``decision``, or
    None while pending or when withdrawn); ``news`` says who did what."""
    return render_to_string(
        "portal/partials/interrupt_change.html",
        {"interrupt": item, "decision": decision, "news": news or _news(item, None), "oob": True},
    )


def render_queue_gone(interrupt_id: str) -> str:
    """The swap that removes a request's row from the open queues."""
    return render_to_string("portal/partials/queue_change.html", {"gone": interrupt_id})


def _news(item: Any, by: Any) -> str:
    """Who did what to ``item``, in a sentence."""
    message = item.message or "a request"
    if getattr(item, "status", "pending") != "pending":
        return f"{item.get_status_display()}: “{message}”"
    if item.claimed_by is not None:
        return f"{item.claimed_by.get_username()} claimed “{message}”"
    if by is not None:
        return f"{by.get_username()} released “{message}”"
    return f"New request from {item.agent or 'an agent'}: “{message}”"


def pending_count() -> int:
    """How many requests wait for a decision (capped as the queue page caps it)."""
    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING).order_by()
    return min(pending[: queue.COUNT_CAP + 1].count(), queue.COUNT_CAP)


def _queue_frames(context: dict[str, Any]) -> list[str]:
    # The row first, on its own: it replaces the row a page shows. The rest adds it
    # where a page does not show it, and says so.
    rest = render_to_string("portal/partials/queue_change.html", context)
    if context.get("item") is None:
        return [rest]
    row = render_to_string("portal/queue.html#queue-row", {**context, "oob": True})
    return [row, rest]


def render_queue_row(interrupt_id: str) -> list[str]:
    """The queue's swaps for an interrupt's current state ([] if it cannot be rendered)."""
    return render_interrupt_change(interrupt_id)[0]


def render_queue_item(item: Any) -> str:
    """The queue's swaps for ``item``, a pending ``Interrupt`` that just entered the queue
    (or as much of one as its row shows) with its thread and claimant at hand: no page
    shows it yet, so they only add its row. It queries nothing."""
    return render_to_string(
        "portal/partials/queue_change.html", {"item": item, "news": _news(item, None)}
    )
