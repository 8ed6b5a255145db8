"""Every channel-layer group and event type the portal uses, in one place.

Writers (services, the checkpointer, the worker) publish here after their transaction
commits; consumers subscribe to the same names and forward. Publishing is best effort:
a channel layer that is down costs live updates, never a run or a decision, so failures
are logged and swallowed.

Groups and events:

- ``thread_group(thread_id)``: everything about one thread.
  ``thread.chunk`` ``{"chunk": StreamChunk.to_dict()}`` for each streamed chunk;
  ``thread.status`` ``{"thread_id", "status", "run_id", "run_status", "error"}`` when a
  run changes the thread's status.
- ``QUEUE_GROUP``: the reviewers' queue.
  ``queue.changed`` ``{"interrupt_id", "thread_id", "agent", "reason", "status"}`` when an
  interrupt is added (status "pending") or leaves the queue (resolved/cancelled/expired).
  It also carries ``html``: the queue row, rendered once by the publisher while the
  interrupt is pending (empty otherwise); see ``publish_queue_row`` for claims.
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
from functools import partial
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

QUEUE_GROUP = "queue"

THREAD_CHUNK = "thread.chunk"
THREAD_STATUS = "thread.status"
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
# keeps its Redis connections per loop, so each publish paid for a thread, a loop and a
# fresh connection (about 7 ms on the benchmark machine) before its message left; a
# long-lived loop keeps one connection open. Issue 6's fan-out benchmark measures this.
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


async def apublish_chunk(thread_id: object, chunk: dict[str, Any]) -> None:
    """One streamed chunk (``StreamChunk.to_dict()``) to the thread's watchers."""
    await agroup_send(thread_group(thread_id), {"type": THREAD_CHUNK, "chunk": chunk})


def publish_thread_status(
    thread_id: object,
    status: str,
    *,
    run_id: object = None,
    run_status: str | None = None,
    error: str = "",
) -> None:
    group_send(
        thread_group(thread_id),
        {
            "type": THREAD_STATUS,
            "thread_id": str(thread_id),
            "status": status,
            "run_id": str(run_id) if run_id else None,
            "run_status": run_status,
            "error": error,
        },
    )


def queue_changed(
    *, interrupt_id: str, thread_id: object, agent: str, reason: str, status: str, html: str
) -> dict[str, Any]:
    """The ``queue.changed`` event: an interrupt entered (status "pending") or left the
    reviewers' queue. ``html`` is its row, rendered once by the publisher ('' unless
    pending), not once per watcher."""
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
    *, interrupt_id: str, thread_id: object, agent: str, reason: str, status: str
) -> None:
    """An interrupt entered (status "pending") or left the reviewers' queue."""
    html = render_queue_row(interrupt_id) if status == "pending" else ""
    group_send(
        QUEUE_GROUP,
        queue_changed(
            interrupt_id=interrupt_id,
            thread_id=thread_id,
            agent=agent,
            reason=reason,
            status=status,
            html=html,
        ),
    )


def queue_change_on_commit(interrupt: Any) -> None:
    """Announce ``interrupt``'s current status to every open queue once the transaction
    commits (a rollback announces nothing). Leaving the queue carries the new status; a
    claim change re-announces "pending"."""
    transaction.on_commit(
        partial(
            publish_queue_change,
            interrupt_id=interrupt.pk,
            thread_id=interrupt.thread_id,
            agent=interrupt.agent,
            reason=interrupt.reason,
            status=interrupt.status,
        ),
        robust=True,
    )


# --- live portal (issue 6): rendered queue rows ----------------------------------------
# Queue watchers get the row as HTML, rendered once by the publisher and forwarded as is
# by every QueueConsumer (a decision reaching 200 open queues renders one row, not 200).


def render_queue_row(interrupt_id: str) -> str:
    """The queue row of a pending interrupt ('' once it has left the queue)."""
    from portal.models import Interrupt

    try:
        item = (
            Interrupt.objects.select_related("thread__owner", "claimed_by")
            .filter(pk=interrupt_id, status=Interrupt.Status.PENDING)
            .first()
        )
        return render_queue_item(item) if item is not None else ""
    except Exception:
        # Watchers then re-fetch the queue instead (live.js does when a pending event
        # arrives without a row); the change itself is still announced.
        log.warning("rendering the queue row of %s failed", interrupt_id, exc_info=True)
        return ""


def render_queue_item(item: Any) -> str:
    """The queue row of ``item``, a pending ``Interrupt`` with its thread (and claimant)
    at hand: rendering it queries nothing, so an event loop may call it."""
    from portal.templatetags.portal_live import queue_row

    return queue_row(item)


def publish_queue_row(*, interrupt_id: str) -> None:
    """A pending interrupt changed in place (claimed or released): every open queue
    replaces its row. Call it from ``transaction.on_commit``. An interrupt that is no
    longer pending is announced as gone."""
    from portal.models import Interrupt

    row = Interrupt.objects.filter(pk=interrupt_id).values("thread_id", "agent", "reason").first()
    if row is None:
        return
    html = render_queue_row(interrupt_id)
    group_send(
        QUEUE_GROUP,
        queue_changed(
            interrupt_id=interrupt_id,
            thread_id=row["thread_id"],
            agent=row["agent"],
            reason=row["reason"],
            status="pending" if html else "gone",
            html=html,
        ),
    )


# --- end live portal ------------------------------------------------------------------


def publish_user_revoke(user_ids: Any, *, session_key: str | None = None) -> None:
    """Tell the open sockets of ``user_ids`` to check their right to stay open (see
    ``user_group``). Call it after the change committed (``transaction.on_commit``)."""
    for user_id in dict.fromkeys(user_ids):
        group_send(user_group(user_id), {"type": USER_REVOKE, "session_key": session_key})
