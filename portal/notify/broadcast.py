"""Every channel-layer group and event type the portal uses, in one place.

Writers (services, the checkpointer, the worker) publish here after their transaction
commits, with ids and statuses; the rendering happens here, once per event, from the same
template partials the pages use. Consumers (and the API's event stream, ``portal.api.follow``)
subscribe to the same names and forward.
Publishing is best effort: a channel layer that is down costs live updates, never a run
or a decision, so failures are logged and swallowed.

Groups and events:

- ``thread_group(thread_id)``: everything about one thread and its requests.
  ``thread.chunk`` ``{"chunk": StreamChunk.to_dict()}`` for each streamed token or step;
  ``thread.html`` ``{"html"}``: out-of-band swaps, rendered once by the publisher from
  the partials the pages use: a finished transcript message, or what became of one of
  the thread's requests (claimed, released, decided, expired, withdrawn);
  ``thread.status`` ``{"thread_id", "status", "run_id", "run_status", "error"}`` when a
  run changes the thread's status (each page then fetches its own view).
- ``QUEUE_GROUP``: the reviewers' queue.
  ``queue.changed`` ``{"interrupt_id", "thread_id", "agent", "reason", "status", "html"}``
  when an interrupt is added (status "pending"), claimed or released ("pending" again),
  or leaves the queue (resolved/cancelled/expired). ``html`` is the out-of-band swaps
  that show it: its row (replaced where shown, added where it belongs), the number
  pending, and a sentence for screen readers.
- ``user_group(user_id)``: every socket one user has open, whatever it watches.
  ``user.revoke`` ``{"session_key"}`` when the user's right to their sockets may have
  changed (logout, deactivation, password, groups or permissions): each socket checks
  its session and permission again and closes if they no longer hold; with a
  ``session_key`` (a logout) the sockets of that session close at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.core.signals import setting_changed
from django.db import close_old_connections, transaction
from django.dispatch import receiver
from django.template.loader import render_to_string

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_GROUP = "queue"

THREAD_CHUNK = "thread.chunk"
THREAD_STATUS = "thread.status"
THREAD_HTML = "thread.html"
QUEUE_CHANGED = "queue.changed"
USER_REVOKE = "user.revoke"


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
    """One run's finished messages, rendered as the thread's page renders them: with the
    thread (its owner's name on their messages) and who answered each tool call's request
    (a declined result names the reviewer). Both are read once, for the first message
    rendered: the answers a run's tool results report were given before the run began."""

    def __init__(self, thread_id: object) -> None:
        self.thread_id = thread_id
        self._page: dict[str, Any] | None = None

    async def render(self, message: dict[str, Any]) -> str:
        """``message`` as out-of-band swaps ('' when there is nothing to show, or it cannot
        be rendered)."""
        from portal.web.threads import display_message

        if message.get("role") == "system" or not message.get("id"):
            return ""
        if self._page is None:
            # Not on the run's connection (nor in a caller's transaction around the run).
            self._page = await _announcing(_read_page, self.thread_id)
        try:
            m = display_message(message, self._page["decided"])
            return render_to_string(
                "portal/partials/transcript_message_live.html",
                {"m": m, "thread": self._page["thread"]},
            )
        except Exception:
            log.warning("rendering message %s failed", message.get("id"), exc_info=True)
            return ""


def _read_page(thread_id: object) -> dict[str, Any]:
    """``views.threads.live_transcript_context``, or none (read once per run: a failure is
    not retried for each message)."""
    from portal.web.threads import live_transcript_context

    try:
        return live_transcript_context(thread_id)
    except Exception:
        log.warning("reading thread %s for its live transcript failed", thread_id, exc_info=True)
        return {"thread": None, "decided": {}}


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
    websocket frame each), rendered once by the publisher, not once per watcher; when a
    caller has none for a request that left, it is the swap that removes its row."""
    if not html and status != "pending":
        html = render_to_string("portal/partials/queue_change.html", {"gone": interrupt_id})
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
    queue_html, page_html = render_interrupt_change(interrupt_id, by=by, news=news)
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
    await _announcing(_announce, changes)


_announcing_thread: list[ThreadPoolExecutor] = []  # one per process (see _announcer)
os.register_at_fork(after_in_child=_announcing_thread.clear)  # its thread stays behind


def _announcer() -> ThreadPoolExecutor:
    if not _announcing_thread:
        _announcing_thread.append(ThreadPoolExecutor(1, thread_name_prefix="announce"))
    return _announcing_thread[0]


async def _announcing(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the announcer's thread, whose database connection is looked after
    as a request's is (closed when too old or broken)."""

    def call() -> T:
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()

    return await asyncio.get_running_loop().run_in_executor(_announcer(), call)


def _announce(changes: list[dict[str, Any]]) -> None:
    for change in changes:
        publish_queue_change(**change)


def queue_change_on_commit(interrupt: Any, *, by: Any = None, news: str = "") -> None:
    """Announce ``interrupt``'s current status once the transaction commits (a rollback
    announces nothing). Leaving the queue carries the new status; a claim change
    re-announces "pending". ``by``: who acted, when the row does not say (a release);
    ``news``: the sentence to say, when that is not "claimed" or "released" (a vote)."""
    transaction.on_commit(
        partial(
            publish_queue_change,
            interrupt_id=interrupt.pk,
            thread_id=interrupt.thread_id,
            agent=interrupt.agent,
            reason=interrupt.reason,
            status=interrupt.status,
            by=by,
            news=news,
        ),
        robust=True,
    )


# --- rendering: the partials the pages use, as out-of-band swaps ------------------------


def render_interrupt_change(
    interrupt_id: str, *, by: Any = None, news: str = ""
) -> tuple[list[str], str]:
    """What an interrupt's change looks like, read after commit: the swaps for the open
    queues, and those for the open pages about it ('' when they cannot be rendered: the
    queues then catch up when they next re-fetch)."""
    from portal.models import Decision, Interrupt

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
    from portal.models import Interrupt
    from portal.web.queue import COUNT_CAP

    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING).order_by()
    return min(pending[: COUNT_CAP + 1].count(), COUNT_CAP)


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


def publish_user_revoke(user_ids: Any, *, session_key: str | None = None) -> None:
    """Tell the open sockets of ``user_ids`` to check their right to stay open (see
    ``user_group``). Call it after the change committed (``transaction.on_commit``)."""
    for user_id in dict.fromkeys(user_ids):
        group_send(user_group(user_id), {"type": USER_REVOKE, "session_key": session_key})
