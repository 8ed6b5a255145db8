"""Every channel-layer group and event type the portal uses, and publishing to them.

Writers (services, the checkpointer, the worker) announce here after their transaction
commits, with ids and statuses. The HTML an event carries comes from the renderer that
``portal.web.live`` registers at start-up (``set_renderer``), once per event, in this
module's announcer thread; without one, events go out without HTML. Publishing is best
effort: failures are logged and swallowed. The groups and events are listed in
docs/architecture.md (``## notify``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol, TypeVar

import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.core.signals import setting_changed
from django.db import close_old_connections, transaction
from django.dispatch import receiver

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_GROUP = "queue"

THREAD_CHUNK = "thread.chunk"
THREAD_STATUS = "thread.status"
THREAD_HTML = "thread.html"
QUEUE_CHANGED = "queue.changed"
USER_REVOKE = "user.revoke"


class Renderer(Protocol):
    """What turns events into HTML (``portal.web.live``): the same partials the pages use,
    as out-of-band swaps; each returns '' (or []) when it cannot render."""

    def render_interrupt_change(
        self, interrupt_id: str, *, by: Any = None, news: str = ""
    ) -> tuple[list[str], str]: ...

    def render_queue_gone(self, interrupt_id: str) -> str: ...

    async def render_transcript_message(
        self, transcript: LiveTranscript, message: dict[str, Any]
    ) -> str: ...


_renderer: Renderer | None = None


def set_renderer(renderer: Renderer | None) -> None:
    """Register what renders events (``PortalConfig.ready`` does, in every process)."""
    global _renderer
    _renderer = renderer


def thread_group(thread_id: object) -> str:
    """The group for one thread (group names allow letters, digits, '-', '_' and '.')."""
    return f"thread.{thread_id}"


def user_group(user_id: object) -> str:
    """The group of every socket one user has open."""
    return f"user.{user_id}"


# The in-memory channel layer (the embedded demo) is plain asyncio queues: a send made on
# another event loop (the embedded worker's) does not wake the loop the consumers wait on,
# so their updates would arrive only when something else woke it. Consumers register
# their loop with bind_loop() when they join a group; sends from elsewhere are handed to
# that loop. Redis needs none of this.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def bind_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Record the event loop consumers run on (call from a consumer's connect)."""
    global _consumer_loop
    _consumer_loop = loop or asyncio.get_running_loop()


async def agroup_send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        home = _consumer_loop
        if (
            isinstance(layer, InMemoryChannelLayer)
            and home is not None
            and home.is_running()
            and home is not asyncio.get_running_loop()
        ):
            sent = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), home)
            await asyncio.wrap_future(sent)
        else:
            await layer.group_send(group, message)
    except Exception:
        log.warning("broadcast to %s failed", group, exc_info=True)


# Sync publishes (on_commit callbacks) all run on one event loop in a daemon thread.
# async_to_sync would start a new loop in a new thread for every call, and channels-redis
# keeps its Redis connections per loop, so each publish would pay for a thread, a loop and
# a fresh connection before its message left; a long-lived loop keeps one connection open.
PUBLISH_TIMEOUT = 2.0  # seconds a sync caller waits for its publish before moving on
_publisher: asyncio.AbstractEventLoop | None = None
_publisher_lock = threading.Lock()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    global _publisher
    with _publisher_lock:
        if _publisher is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="broadcast", daemon=True).start()
            _publisher = loop
        return _publisher


def _forget_publisher() -> None:
    # A forked child has the parent's loop object but not its thread: start afresh.
    global _publisher, _publisher_lock
    _publisher, _publisher_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_publisher)


def group_send(group: str, message: dict[str, Any]) -> None:
    """Synchronous publish, for on_commit callbacks in sync code.

    Waits (up to ``PUBLISH_TIMEOUT``) until the message is handed to the layer, so one
    thread's publishes keep their order, except in a thread that runs an event loop:
    blocking it would stall that loop's consumers (and, with the in-memory layer, the
    send itself, which is handed to the consumers' loop)."""
    try:
        future = asyncio.run_coroutine_threadsafe(agroup_send(group, message), _publisher_loop())
    except Exception:
        log.warning("broadcast to %s failed", group, exc_info=True)
        return
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass  # a plain thread: wait
    try:
        future.result(timeout=PUBLISH_TIMEOUT)
    except TimeoutError:
        future.cancel()
        log.warning("broadcast to %s timed out after %s s", group, PUBLISH_TIMEOUT)


_PUBSUB_LAYER = "channels_redis.pubsub.RedisPubSubChannelLayer"
_numsub: Any = None  # (the Redis client, the layer's prefix) once known; False: cannot ask


@receiver(setting_changed)
def _forget_numsub(*, setting: str, **_: Any) -> None:
    global _numsub
    if setting == "CHANNEL_LAYERS":
        _numsub = None


def _numsub_client() -> Any:
    global _numsub
    if _numsub is None:
        _numsub = False
        config: dict[str, Any] = settings.CHANNEL_LAYERS.get("default", {})
        options: dict[str, Any] = config.get("CONFIG", {})
        hosts = options.get("hosts") or []
        # Only the pub/sub layer subscribes each group's channel (the core layer keeps
        # groups in sorted sets); a sharded one puts each group on one of several servers.
        if config.get("BACKEND") == _PUBSUB_LAYER and len(hosts) == 1:
            host = hosts[0]
            address = host.get("address") if isinstance(host, dict) else host
            if isinstance(address, str):
                client = redis.Redis.from_url(address, socket_timeout=PUBLISH_TIMEOUT)
                _numsub = (client, options.get("prefix", "asgi"))
    return _numsub


def listening(*groups: str) -> list[bool]:
    """For each group, whether any socket (in any process) may be subscribed to it now.

    True when it cannot tell: rendering for nobody only costs time. A socket that
    subscribes just after this said no catches up on its own (it re-fetches its view once
    open), as it does after any publish it missed."""
    layer = get_channel_layer()
    if layer is None:
        return [False for _ in groups]
    if isinstance(layer, InMemoryChannelLayer):
        return [bool(layer.groups.get(group)) for group in groups]
    if not isinstance(layer, RedisPubSubChannelLayer):
        return [True for _ in groups]
    try:
        found = _numsub_client()
        if not found:
            return [True for _ in groups]
        client, prefix = found
        counts = dict(client.pubsub_numsub(*(f"{prefix}__group__{g}" for g in groups)))
        return [counts.get(f"{prefix}__group__{g}".encode(), 1) > 0 for g in groups]
    except Exception:
        log.warning("could not ask who listens to %s", groups, exc_info=True)
        return [True for _ in groups]


def publish_thread_status(
    thread_id: object,
    status: str,
    *,
    run_id: object = None,
    run_status: str | None = None,
    error: str = "",
) -> None:
    """A run changed the thread's status. Watchers fetch their own view of the
    transcript (what it offers depends on who looks: a link to review, a withdraw form)."""
    group_send(thread_group(thread_id), _status_event(thread_id, status, run_id, run_status, error))


async def apublish_thread_status(
    thread_id: object,
    status: str,
    *,
    run_id: object = None,
    run_status: str | None = None,
    error: str = "",
) -> None:
    """``publish_thread_status`` on the caller's event loop (a worker's own)."""
    event = _status_event(thread_id, status, run_id, run_status, error)
    await agroup_send(thread_group(thread_id), event)


def _status_event(
    thread_id: object, status: str, run_id: object, run_status: str | None, error: str
) -> dict[str, Any]:
    return {
        "type": THREAD_STATUS,
        "thread_id": str(thread_id),
        "status": status,
        "run_id": str(run_id) if run_id else None,
        "run_status": run_status,
        "error": error,
    }


async def apublish_chunk(
    thread_id: object, chunk: dict[str, Any], transcript: LiveTranscript | None = None
) -> None:
    """One streamed chunk (``StreamChunk.to_dict()``) to the thread's watchers. A message
    that is complete goes as its transcript partial (replacing the bubble its tokens
    streamed into; ``transcript``: the run's, to read the thread once a run); everything
    else goes as JSON, which live.js draws token by token."""
    group = thread_group(thread_id)
    message, data = chunk.get("message"), chunk.get("data") or {}
    if chunk.get("event") == "message" and isinstance(message, dict) and data.get("complete"):
        html = await (transcript or LiveTranscript(thread_id)).render(message)
        if html:
            await agroup_send(group, {"type": THREAD_HTML, "html": html})
            return
    await agroup_send(group, {"type": THREAD_CHUNK, "chunk": chunk})


class LiveTranscript:
    """One run's finished messages, rendered as the thread's page renders them. What they
    read besides themselves (``page``: the thread, who answered each tool call's request)
    is read once, by the renderer, for the first message: the answers a run's tool results
    report were given before the run began."""

    def __init__(self, thread_id: object) -> None:
        self.thread_id = thread_id
        self.page: dict[str, Any] | None = None

    async def render(self, message: dict[str, Any]) -> str:
        """``message`` as out-of-band swaps ('' when there is nothing to show, or it cannot
        be rendered)."""
        renderer = _renderer
        return "" if renderer is None else await renderer.render_transcript_message(self, message)


def queue_changed(
    *,
    interrupt_id: str,
    thread_id: object,
    agent: str,
    reason: str,
    status: str,
    html: str | list[str],
) -> dict[str, Any]:
    """The ``queue.changed`` event: an interrupt entered (status "pending"), changed in,
    or left the reviewers' queue. ``html`` is the out-of-band swaps that show it (one
    websocket frame each), rendered once by the renderer, not once per watcher; when a
    caller has none for a request that left, it is the swap that removes its row."""
    if not html and status != "pending" and _renderer is not None:
        html = _renderer.render_queue_gone(interrupt_id)
    return {
        "type": QUEUE_CHANGED,
        "interrupt_id": interrupt_id,
        "thread_id": str(thread_id),
        "agent": agent,
        "reason": reason,
        "status": status,
        "html": html,
    }


def publish_queue_change(
    *,
    interrupt_id: str,
    thread_id: object,
    agent: str,
    reason: str,
    status: str,
    by: Any = None,
    news: str = "",
) -> None:
    """An interrupt entered, changed in (a claim) or left the queue: every open queue
    and every page about it shows so. Call it after the change committed. ``by`` is who
    acted, when the interrupt's row does not say (a release); ``news``, what happened,
    when neither does (a vote on a request that needs several reviewers)."""
    queue_open, page_open = listening(QUEUE_GROUP, thread_group(thread_id))
    if not (queue_open or page_open):
        # Nothing to render for: a page that opens its socket later fetches its own view
        # once it is subscribed (live.js catches up on open).
        return
    renderer = _renderer
    queue_html, page_html = (
        renderer.render_interrupt_change(interrupt_id, by=by, news=news)
        if renderer is not None
        else ([], "")
    )
    if queue_open:
        group_send(
            QUEUE_GROUP,
            queue_changed(
                interrupt_id=interrupt_id,
                thread_id=thread_id,
                agent=agent,
                reason=reason,
                status=status,
                html=queue_html,
            ),
        )
    if page_html and page_open:
        group_send(thread_group(thread_id), {"type": THREAD_HTML, "html": page_html})


async def apublish_queue_change(**change: Any) -> None:
    """``publish_queue_change`` for async callers: the rendering queries, so it runs in a
    thread."""
    await asyncio.to_thread(publish_queue_change, **change)


async def apublish_queue_changes(changes: list[dict[str, Any]]) -> None:
    """``publish_queue_change`` for each of ``changes``, committed, from an async writer
    (a worker's checkpointer): in a thread of its own, since the rendering queries."""
    await announcing(_announce, changes)


_announcing_thread: list[ThreadPoolExecutor] = []  # one per process (see _announcer)
os.register_at_fork(after_in_child=_announcing_thread.clear)  # its thread stays behind


def _announcer() -> ThreadPoolExecutor:
    if not _announcing_thread:
        _announcing_thread.append(ThreadPoolExecutor(1, thread_name_prefix="announce"))
    return _announcing_thread[0]


def _looked_after(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    # In the announcer's thread, whose database connection is looked after as a
    # request's is (closed when too old or broken).
    def call() -> T:
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()

    return call


async def announcing(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the announcer's thread (where events are rendered)."""
    return await asyncio.get_running_loop().run_in_executor(_announcer(), _looked_after(fn, *args))


def _announce(changes: list[dict[str, Any]]) -> None:
    for change in changes:
        publish_queue_change(**change)


def _announce_quietly(changes: list[dict[str, Any]]) -> None:
    try:
        _announce(changes)
    except Exception:  # best effort, as every publish: the committed change stands
        log.warning("announcing %s failed", changes, exc_info=True)


def announce_later(changes: list[dict[str, Any]]) -> None:
    """Hand ``changes`` (committed) to the announcer's thread and return at once: the
    committing thread (a request's) neither asks who listens, nor renders, nor waits for
    the channel layer. One thread keeps a process's events in their order."""
    _announcer().submit(_looked_after(_announce_quietly, changes))


def announced(timeout: float = PUBLISH_TIMEOUT) -> None:
    """Wait until what was handed to the announcer before this call has gone out."""
    _announcer().submit(lambda: None).result(timeout)


def queue_change_on_commit(interrupt: Any, *, by: Any = None, news: str = "") -> None:
    """Announce ``interrupt``'s current status once the transaction commits (a rollback
    announces nothing), from the announcer's thread. Leaving the queue carries the new
    status; a claim change re-announces "pending". ``by``: who acted, when the row does
    not say (a release); ``news``: the sentence to say, when that is not "claimed" or
    "released" (a vote)."""
    change = {
        "interrupt_id": interrupt.pk,
        "thread_id": interrupt.thread_id,
        "agent": interrupt.agent,
        "reason": interrupt.reason,
        "status": interrupt.status,
        "by": by,
        "news": news,
    }
    transaction.on_commit(partial(announce_later, [change]), robust=True)


def publish_user_revoke(user_ids: Any, *, session_key: str | None = None) -> None:
    """Tell the open sockets of ``user_ids`` to check their right to stay open (see
    ``user_group``). Call it after the change committed (``transaction.on_commit``)."""
    for user_id in dict.fromkeys(user_ids):
        group_send(user_group(user_id), {"type": USER_REVOKE, "session_key": session_key})
