"""Following a thread without polling: its channel-layer events as server-sent events.

``GET /api/threads/{id}/events`` (``portal.api``) streams what the thread's pages get over
their websocket, from the same groups and events (``portal.notify.broadcast``): it subscribes to
the thread's group and to its user's group, then says where the thread stands, then
forwards each event as it comes. Like the consumers it only subscribes and forwards.

The stream, one SSE event per broadcast event (``data`` is JSON unless it says otherwise):

- ``status``: ``{"thread_id", "status", "run_id", "run_status", "error"}``, first as a
  snapshot once subscribed (``run_id`` and ``run_status`` null), then each time a run
  changes the thread's status;
- ``chunk``: ``{"chunk": StreamChunk.to_dict()}``, each streamed token or step;
- ``html``: the out-of-band HTML swaps the pages apply (a finished transcript message, or
  what became of one of the thread's requests), as text over one ``data`` line each;
- ``closed``: ``{"detail"}`` when the token may no longer follow the thread (revoked,
  expired, its user deactivated or no longer allowed to see it); the stream then ends.

The right to follow is checked again on a ``user.revoke`` event and every
``PORTAL_WS_RECHECK_SECONDS``, as the websockets do. A comment line every
``KEEPALIVE_SECONDS`` keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from portal.notify import broadcast

KEEPALIVE_SECONDS = 15.0


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
