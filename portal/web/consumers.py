"""Websocket consumers: authorize on connect, join one group, forward what is published.

They never write and never render: ``portal.web.live`` renders each event once, for
``portal.notify.broadcast``, and each consumer passes it on to its browser as it is.
A refused socket is opened, then closed with 4401, 4403 or 4404; a socket follows the
session it was opened with (``user.revoke``, ``PORTAL_WS_RECHECK_SECONDS``). More in
docs/architecture.md (``## web``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from importlib import import_module
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth
from django.http import HttpRequest

from portal.accounts import access, roles
from portal.notify import broadcast

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_UNVERIFIED = 1011  # the check itself failed: the client reconnects and checks anew


def session_user(scope: dict[str, Any]) -> Any:
    """The user the socket's session belongs to now, read afresh (None when the session
    ended, its user was deactivated or changed password). Django's own ``get_user`` does
    the checking, so a socket ends where a page request would be logged out."""
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    if not key:
        return None
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = auth.get_user(request)
    return user if user.is_authenticated else None


class _ForwardingConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    group: str | None = None
    user_pk: Any = None
    _rechecks: asyncio.Task[None] | None = None

    def allowed(self, user: Any) -> bool:
        """Whether ``user`` may have this socket open (runs in a sync thread)."""
        raise NotImplementedError

    async def connect(self) -> None:
        user = self._user()
        if user is None:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(self.allowed)(user):
            await self.refuse(CLOSE_FORBIDDEN)
            return
        self.user_pk = user.pk
        await self.join(self.group_name())

    def group_name(self) -> str:
        raise NotImplementedError

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def join(self, group: str) -> None:
        self.group = group
        # The embedded worker publishes from its own loop; tell broadcast where we listen.
        broadcast.bind_loop()
        await self.channel_layer.group_add(group, self.channel_name)
        await self.channel_layer.group_add(broadcast.user_group(self.user_pk), self.channel_name)
        await self.accept()
        self._rechecks = asyncio.create_task(
            self._recheck_every(settings.PORTAL_WS_RECHECK_SECONDS)
        )

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch first closes stale database connections in its single
        # sync thread: one thread hop per message and per socket, so a broadcast to many
        # open queues would wait on as many hops in a row. These
        # handlers never touch the database; connect's checks and the re-checks use
        # database_sync_to_async, which does the same cleanup itself.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        if self._rechecks is not None:
            self._rechecks.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(
                broadcast.user_group(self.user_pk), self.channel_name
            )

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        # Read-only: the browser talks to the server over HTTP; anything sent here, JSON
        # or not, is ignored rather than acted on (or decoded, which could fail).
        return None

    def _user(self) -> Any:
        user = self.scope.get("user")
        return user if user is not None and user.is_authenticated else None

    # --- following the session ----------------------------------------------------------

    def _verdict(self) -> int | None:
        """The close code this socket deserves now (None: it may stay open)."""
        user = session_user(self.scope)
        if user is None or user.pk != self.user_pk:
            return CLOSE_UNAUTHENTICATED
        return None if self.allowed(user) else CLOSE_FORBIDDEN

    async def recheck(self) -> bool:
        """Check the session and permission again; close and return False if they no
        longer hold (or cannot be checked)."""
        try:
            code = await database_sync_to_async(self._verdict)()
        except Exception:
            log.warning("re-checking a socket of user %s failed", self.user_pk, exc_info=True)
            code = CLOSE_UNVERIFIED
        if code is None:
            return True
        await self.close(code=code)
        return False

    async def _recheck_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            if not await self.recheck():
                return

    async def user_revoke(self, event: dict[str, Any]) -> None:
        ended = event.get("session_key")
        if ended and ended == getattr(self.scope.get("session"), "session_key", None):
            await self.close(code=CLOSE_UNAUTHENTICATED)  # this very session logged out
            return
        await self.recheck()


class ThreadConsumer(_ForwardingConsumer):
    """``/ws/threads/<uuid>/``: one thread's streamed chunks and status changes."""

    def allowed(self, user: Any) -> bool:
        # The same rule as the pages: access.visible_threads (own threads, or all of them
        # with the view_all_threads permission).
        thread_id: uuid.UUID = self.scope["url_route"]["kwargs"]["thread_id"]
        return access.visible_threads(user).filter(pk=thread_id).exists()

    def group_name(self) -> str:
        return broadcast.thread_group(self.scope["url_route"]["kwargs"]["thread_id"])

    async def thread_chunk(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "chunk", "chunk": event["chunk"]})

    async def thread_status(self, event: dict[str, Any]) -> None:
        await self.send_json({**event, "type": "status"})

    async def thread_html(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])


class QueueConsumer(_ForwardingConsumer):
    """``/ws/queue/``: interrupts entering, changing (claims) and leaving the queue."""

    def allowed(self, user: Any) -> bool:
        return roles.can_decide(user)

    def group_name(self) -> str:
        return broadcast.QUEUE_GROUP

    async def queue_changed(self, event: dict[str, Any]) -> None:
        html = event.get("html") or []
        for frame in [html] if isinstance(html, str) else html:
            await self.send(text_data=frame)


class NotFoundConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Any other path: opened only to be closed with 4404, instead of an error."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
