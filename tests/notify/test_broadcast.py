"""Publishing from sync code (``broadcast.group_send``, used by on_commit callbacks): one
long-lived event loop for every call, so the channel layer keeps one connection."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest
from django.conf import settings

from portal.notify import broadcast


class RecordingLayer:
    """A stand-in channel layer: notes each message and the loop that sent it."""

    def __init__(self, hang: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any], asyncio.AbstractEventLoop]] = []
        self.hang = hang
        self.cancelled = threading.Event()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        self.sent.append((group, message, asyncio.get_running_loop()))


@pytest.fixture
def layer(monkeypatch: pytest.MonkeyPatch) -> RecordingLayer:
    recording = RecordingLayer()
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: recording)
    return recording


def test_repeated_sync_publishes_share_one_running_loop(layer: RecordingLayer) -> None:
    for n in range(3):
        broadcast.group_send("queue", {"type": "queue.changed", "n": n})

    assert [message["n"] for _, message, _ in layer.sent] == [0, 1, 2]
    loops = {loop for _, _, loop in layer.sent}
    assert len(loops) == 1
    assert next(iter(loops)).is_running()  # not a loop made (and closed) for one call


def test_a_publish_from_a_thread_with_no_event_loop_arrives(layer: RecordingLayer) -> None:
    worker = threading.Thread(target=broadcast.publish_thread_status, args=("t1", "done"))
    worker.start()
    worker.join(5)

    assert [(group, message["status"]) for group, message, _ in layer.sent] == [
        ("thread.t1", "done")
    ]


def test_a_hung_layer_holds_a_sync_caller_only_until_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hung = RecordingLayer(hang=True)
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: hung)
    monkeypatch.setattr(broadcast, "PUBLISH_TIMEOUT", 0.2)

    started = time.monotonic()
    broadcast.group_send("queue", {"type": "queue.changed"})

    assert time.monotonic() - started < 2
    assert hung.cancelled.wait(2), "the abandoned publish was left running"


def test_a_forked_child_publishes_on_a_loop_of_its_own(layer: RecordingLayer) -> None:
    broadcast.group_send("queue", {"type": "queue.changed"})  # the parent's loop exists
    pid = os.fork()
    if pid == 0:  # the child: the parent's loop thread did not survive the fork
        try:
            broadcast.group_send("queue", {"type": "queue.changed", "child": True})
            os._exit(0 if any(m.get("child") for _, m, _ in layer.sent) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


async def test_a_sync_publish_inside_a_running_loop_neither_blocks_nor_is_lost(
    settings: Any,
) -> None:
    """Sync code called straight from a coroutine must not wait on its publish: with the
    in-memory layer the send is handed to this very loop, so waiting would stall it."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    try:
        memory = channel_layers["default"]
        broadcast.bind_loop()
        channel = await memory.new_channel()
        await memory.group_add(broadcast.QUEUE_GROUP, channel)

        started = time.monotonic()
        broadcast.group_send(broadcast.QUEUE_GROUP, {"type": "queue.changed", "n": 1})
        assert time.monotonic() - started < 0.5

        message = await asyncio.wait_for(memory.receive(channel), timeout=2)
        assert message["n"] == 1
    finally:
        channel_layers.backends.clear()


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a Redis channel layer)")
def test_repeated_sync_publishes_reuse_one_redis_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from redis.asyncio.connection import Connection

    broadcast.group_send("queue", {"type": "queue.changed"})  # opens the connection once
    connects: list[object] = []
    original = Connection._connect

    async def counting_connect(self: Connection) -> None:
        connects.append(self)
        await original(self)

    monkeypatch.setattr(Connection, "_connect", counting_connect)
    for _ in range(10):
        broadcast.group_send("queue", {"type": "queue.changed"})

    assert connects == []


# --- deployments sharing one Redis server ----------------------------------------------
# Two portals: their own databases, REDIS_URLs that differ only in the database number,
# which Redis pub/sub ignores. Each side is a real process with its own settings.
LISTEN = """
import asyncio, json, os, sys
import django
django.setup()
from channels.layers import get_channel_layer
from portal.notify.broadcast import QUEUE_GROUP

async def main():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(QUEUE_GROUP, channel)
    print("ready", flush=True)
    heard = []
    while "last" not in heard:
        message = await asyncio.wait_for(layer.receive(channel), timeout=90)
        heard.append(message["sender"])
    print(json.dumps(heard), flush=True)

asyncio.run(main())
"""
# The layer itself, not broadcast.group_send: that gives up after a short timeout (best
# effort), which a busy test machine can exceed on a fresh connection.
PUBLISH = """
import sys
import django
django.setup()
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from portal.notify.broadcast import QUEUE_GROUP
message = {"type": "queue.changed", "sender": sys.argv[1]}
async_to_sync(get_channel_layer().group_send)(QUEUE_GROUP, message)
"""


def _deployment_env(database: str, redis_db: int, **extra: str) -> dict[str, str]:
    from urllib.parse import urlsplit

    redis = urlsplit(settings.REDIS_URL)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "TEST_DB_SUFFIX", "SQLITE_PATH")
        and not k.startswith("PORTAL_")
    }
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        # Settings only: neither side ever connects to its database.
        "DATABASE_URL": f"postgres://portal@127.0.0.1:5432/{database}",
        "REDIS_URL": f"{redis.scheme}://{redis.netloc}/{redis_db}",
        "PORTAL_NO_WORKER": "1",
        **extra,
    }


def _hear_while_publishing(listener: dict[str, str], *publishers: tuple[dict[str, str], str]):
    import json
    import subprocess
    import sys

    from tests.processes import ROOT

    proc = subprocess.Popen(
        [sys.executable, "-c", LISTEN], cwd=ROOT, env=listener, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        for env, sender in publishers:
            subprocess.run(
                [sys.executable, "-c", PUBLISH, sender], cwd=ROOT, env=env, check=True, timeout=60
            )
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "the listener heard nothing in time"
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a Redis channel layer)")
def test_two_deployments_on_one_redis_server_do_not_hear_each_others_queue_events():
    portal_a = _deployment_env("portal_a", 13)
    portal_b = _deployment_env("portal_b", 14)

    heard = _hear_while_publishing(
        portal_a, (portal_b, "b"), (portal_a, "a"), (portal_b, "b"), (portal_a, "last")
    )

    # Each publish finished before the next began, so b's would have arrived before a's.
    assert heard == ["a", "last"]


@pytest.mark.slow
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a Redis channel layer)")
def test_deployments_given_the_same_channel_prefix_share_their_events():
    """The override: two databases that are one portal (say, after a move) keep talking."""
    portal_a = _deployment_env("portal_a", 13, PORTAL_CHANNEL_PREFIX="acme-portal.")
    moved = _deployment_env("portal_moved", 13, PORTAL_CHANNEL_PREFIX="acme-portal.")

    assert _hear_while_publishing(portal_a, (moved, "moved"), (portal_a, "last")) == [
        "moved",
        "last",
    ]


# --- rendering only for someone ------------------------------------------------------------


def _change(interrupt: Any) -> dict[str, Any]:
    return {
        "interrupt_id": interrupt.pk,
        "thread_id": interrupt.thread_id,
        "agent": interrupt.agent,
        "reason": interrupt.reason,
        "status": "resolved",
    }


@pytest.fixture
def memory_layer(settings: Any) -> Any:
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield channel_layers["default"]
    channel_layers.backends.clear()


@pytest.mark.django_db
def test_a_change_no_socket_watches_is_neither_rendered_nor_sent(
    memory_layer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import make_interrupt

    interrupt = make_interrupt()
    sent: list[str] = []
    monkeypatch.setattr(broadcast, "group_send", lambda group, message: sent.append(group))

    with CaptureQueriesContext(connection) as queries:
        broadcast.publish_queue_change(**_change(interrupt))

    assert sent == []
    assert len(queries) == 0


@pytest.mark.django_db
def test_an_open_queue_gets_the_change_rendered_and_a_page_nobody_opened_does_not(
    memory_layer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asgiref.sync import async_to_sync

    from tests.factories import make_interrupt

    interrupt = make_interrupt()
    channel = async_to_sync(memory_layer.new_channel)()
    async_to_sync(memory_layer.group_add)(broadcast.QUEUE_GROUP, channel)
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(broadcast, "group_send", lambda g, m: sent.append((g, m)))

    broadcast.publish_queue_change(**_change(interrupt))

    assert [group for group, _ in sent] == [broadcast.QUEUE_GROUP]
    assert sent[0][1]["html"]  # the swaps that take the request out of the open queue


@pytest.mark.skipif(
    settings.CHANNEL_LAYERS["default"]["BACKEND"]
    != "channels_redis.pubsub.RedisPubSubChannelLayer",
    reason="needs REDIS_URL (the Redis pub/sub channel layer)",
)
async def test_with_redis_a_group_counts_as_watched_while_a_socket_is_subscribed() -> None:
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    group = f"thread.watched-{os.getpid()}"
    ask = sync_to_async(broadcast.listening)
    assert await ask(group) == [False]
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        assert await ask(group, "thread.nobody") == [True, False]
    finally:
        await layer.group_discard(group, channel)
    assert await ask(group) == [False]
