"""Websocket consumers: authorize on connect, join one group, forward what is published.

They never write and never render: services, the checkpointer and the worker publish
ready-to-use JSON (queue rows already rendered to HTML, once, at the sender) through
``portal.broadcast``, and each consumer passes it on to its browser.

A refused connection is accepted and then closed with a reason code, because a browser
only sees the code of a socket that was opened (a refused handshake is just "1006"):
4401 when nobody is logged in, 4403 when the user may not see what was asked for (a
thread that is not theirs, or the queue without the reviewer role). The client stops
reconnecting on these codes.
"""

from __future__ import annotations

import uuid
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal import access, broadcast, roles

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


def _can_see_thread(user: Any, thread_id: uuid.UUID) -> bool:
    # The same rule as the pages: access.visible_threads (own threads, or all for
    # reviewers, auditors and admins).
    return access.visible_threads(user).filter(pk=thread_id).exists()


def _can_watch_queue(user: Any) -> bool:
    return roles.can_decide(user) or bool(user.is_staff)


class _ForwardingConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    group: str | None = None

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def join(self, group: str) -> None:
        self.group = group
        # The embedded worker publishes from its own loop; tell broadcast where we listen.
        broadcast.bind_loop()
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch first closes stale database connections in its single
        # sync thread: one thread hop per message and per socket, so a broadcast to 200
        # open queues waited on 200 hops in a row (issue 6's fan-out benchmark). These
        # handlers never touch the database; connect's checks use database_sync_to_async,
        # which does the same cleanup itself.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Read-only: the browser talks to the server over HTTP; anything sent here is
        # ignored rather than acted on.
        return None

    def _user(self) -> Any:
        user = self.scope.get("user")
        return user if user is not None and user.is_authenticated else None


class ThreadConsumer(_ForwardingConsumer):
    """``/ws/threads/<uuid>/``: one thread's streamed chunks and status changes."""

    async def connect(self) -> None:
        user = self._user()
        if user is None:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return
        thread_id = self.scope["url_route"]["kwargs"]["thread_id"]
        if not await database_sync_to_async(_can_see_thread)(user, thread_id):
            await self.refuse(CLOSE_FORBIDDEN)
            return
        await self.join(broadcast.thread_group(thread_id))

    async def thread_chunk(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "chunk", "chunk": event["chunk"]})

    async def thread_status(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "status"})


class QueueConsumer(_ForwardingConsumer):
    """``/ws/queue/``: interrupts entering, changing (claims) and leaving the queue."""

    async def connect(self) -> None:
        user = self._user()
        if user is None:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(_can_watch_queue)(user):
            await self.refuse(CLOSE_FORBIDDEN)
            return
        await self.join(broadcast.QUEUE_GROUP)

    async def queue_changed(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "queue"})
