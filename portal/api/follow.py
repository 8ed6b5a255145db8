"""``GET /api/threads/{id}/events``: following a thread without polling, as server-sent events.

``follow_thread`` subscribes to the thread's and its user's channel-layer groups
(``portal.notify.broadcast``), says where the thread stands, then forwards each event as
``status``, ``chunk``, ``html`` or ``closed`` (``ThreadEvent``); like the consumers it only
subscribes and forwards. docs/architecture.md (api) describes the stream.
"""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router, Schema

from portal.accounts import access
from portal.api.errors import Problem
from portal.api.lookups import thread_or_404
from portal.api.schemas import THREAD_STATUSES
from portal.models import ApiToken, Thread
from portal.notify import broadcast

KEEPALIVE_SECONDS = 15.0

router = Router(tags=["threads"])


def sse(event: str, data: Any) -> str:
    """One server-sent event: ``data`` as JSON, or a string as it is, one line per line."""
    text = data if isinstance(data, str) else json.dumps(data, cls=DjangoJSONEncoder)
    # A reader ends a line at CR too (and an event at two): text from a thread must not.
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = "".join(f"data: {line}\n" for line in text.split("\n"))
    return f"event: {event}\n{lines}\n"


def _forward(message: dict[str, Any]) -> str | None:
    kind = message.get("type")
    if kind == broadcast.THREAD_CHUNK:
        return sse("chunk", {"chunk": message["chunk"]})
    if kind == broadcast.THREAD_STATUS:
        return sse("status", {k: v for k, v in message.items() if k != "type"})
    if kind == broadcast.THREAD_HTML:
        return sse("html", message["html"])
    return None


async def follow_thread(
    *,
    thread_id: object,
    user_id: object,
    refusal: Callable[[], str | None],
    snapshot: Callable[[], dict[str, Any]],
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[str]:
    """The thread's events as SSE text. ``refusal`` (sync, queries) says why the caller may
    no longer follow it (None: they may); ``snapshot`` (sync) reads the thread's status."""
    layer = get_channel_layer()
    if layer is None:
        yield sse("closed", {"detail": "Live updates are off: no channel layer is configured."})
        return
    channel = await layer.new_channel("follow.")
    groups = [broadcast.thread_group(thread_id), broadcast.user_group(user_id)]
    # The embedded worker publishes from its own loop; tell broadcast where we listen.
    broadcast.bind_loop()
    for group in groups:
        await layer.group_add(group, channel)
    # One receive at a time, never cancelled while the stream lives: channels-redis's
    # pub/sub layer unsubscribes a channel whose receive is cancelled, so a timeout on it
    # would drop what arrives before the next receive subscribes it again.
    receiving: asyncio.Future[Any] | None = None
    try:
        # Subscribed first, then read: a change made in between is both in the snapshot
        # and in the events, never in neither.
        yield sse("status", await database_sync_to_async(snapshot)())
        recheck_every = float(settings.PORTAL_WS_RECHECK_SECONDS)
        next_check = time.monotonic() + recheck_every
        while True:
            wait = max(0.0, min(keepalive, next_check - time.monotonic()))
            if receiving is None:
                receiving = asyncio.ensure_future(layer.receive(channel))
            done, _ = await asyncio.wait({receiving}, timeout=wait)
            message = None
            if done:
                message, receiving = receiving.result(), None
            check = message is not None and message.get("type") == broadcast.USER_REVOKE
            if check or time.monotonic() >= next_check:
                why = await database_sync_to_async(refusal)()
                if why is not None:
                    yield sse("closed", {"detail": why})
                    return
                next_check = time.monotonic() + recheck_every
            if message is None:
                yield ": keep-alive\n\n"
                continue
            frame = _forward(message)
            if frame is not None:
                yield frame
    finally:
        if receiving is not None:
            receiving.cancel()
        for group in groups:
            await layer.group_discard(group, channel)


# --- the endpoint ----------------------------------------------------------------------------


class ThreadStatusData(Schema):
    thread_id: str
    status: str = Field(..., description=THREAD_STATUSES)
    run_id: str | None = Field(None, description="The run that changed it (null: a snapshot).")
    run_status: str | None = None
    error: str = ""


class ChunkData(Schema):
    chunk: dict[str, Any] = Field(
        ...,
        description=(
            "A streamed chunk: event (state, message, error, updates), message, state, "
            "data, thread_id, run_id."
        ),
    )


class ClosedData(Schema):
    detail: str = Field(..., description="Why the stream ended.")


class ThreadEvent(Schema):
    """One server-sent event: its ``event:`` line and its ``data:`` (JSON, except for
    ``html``, which is the HTML the pages swap in)."""

    event: Literal["status", "chunk", "html", "closed"]
    data: ThreadStatusData | ChunkData | ClosedData | str


def _thread_status(thread_id: Any) -> dict[str, Any]:
    status = Thread.objects.filter(pk=thread_id).values_list("status", flat=True).first()
    return {
        "thread_id": str(thread_id),
        "status": status or "",
        "run_id": None,
        "run_status": None,
        "error": "",
    }


def _may_still_follow(token_id: int, thread_id: Any) -> str | None:
    """Why the token may no longer follow the thread (None: it may), read afresh."""
    row = ApiToken.objects.select_related("user").filter(pk=token_id).first()
    if row is None:
        return "This token was deleted."
    refusal = row.refusal()
    if refusal is not None:
        return refusal
    if ApiToken.Scope.READ not in (row.scopes or []):
        return "This token lacks the 'read' scope."
    if not access.visible_threads(row.user).filter(pk=thread_id).exists():
        return f"You can no longer see thread {thread_id}."
    return None


@router.get(
    "/{thread_id}/events",
    response={200: ThreadEvent, 404: Problem},
    openapi_extra={"x-event-stream": True},
)
async def thread_events(request: HttpRequest, thread_id: str) -> Any:
    """Follow a thread without polling: server-sent events (``text/event-stream``)
    carrying what its pages get live. First a ``status`` snapshot, then ``status`` when a
    run changes it, ``chunk`` for each streamed token or step, ``html`` for the pages'
    swaps (a finished message, a request claimed, released or decided), and ``closed``
    when the token may no longer follow (revoked, expired, access lost), after which the
    stream ends. A comment line every 15 s keeps it open through proxies."""
    thread = await sync_to_async(thread_or_404)(request, thread_id)
    token = request.api_token  # type: ignore[attr-defined]
    stream = follow_thread(
        thread_id=thread.pk,
        user_id=token.user_id,
        refusal=lambda: _may_still_follow(token.pk, thread.pk),
        snapshot=lambda: _thread_status(thread.pk),
    )
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy must pass each event on at once
    return response
