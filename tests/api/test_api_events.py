"""Following a thread over the API: server-sent events through the real ASGI stack, on
real channel layers (in-memory, and Redis when ``REDIS_URL`` is set), fed by the same
publishers the pages' websockets hear."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import ApplicationCommunicator
from django.conf import settings as django_settings

from portal.accounts.tokens import api_token_create, api_tokens_revoke
from portal.models import Thread
from portal.notify import broadcast
from portal.reviews.claims import interrupt_claim
from tests.factories import make_interrupt, make_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["memory", "redis"])
def layer(request, settings):
    """A real channel layer of each kind, with a channel prefix of this test's own."""
    if request.param == "redis":
        if not django_settings.REDIS_URL:
            pytest.skip("needs REDIS_URL (a Redis channel layer)")
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {
                    "hosts": [{"address": django_settings.REDIS_URL}],
                    "prefix": f"test-follow-{uuid.uuid4().hex[:8]}",
                },
            }
        }
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield request.param
    channel_layers.backends.clear()


def parse_event(block: str) -> tuple[str, Any] | None:
    """One server-sent event's lines as (name, data); None for a comment (a keep-alive)."""
    lines = block.split("\n")
    if all(line.startswith(":") for line in lines):
        return None
    name = next(line[7:] for line in lines if line.startswith("event: "))
    data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
    return name, (data if name == "html" else json.loads(data))


class Stream:
    """One GET of an event stream through the ASGI application, read event by event."""

    def __init__(self, application: Any, path: str, token: str | None) -> None:
        headers = [(b"host", b"testserver")]
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 50000),
        }
        self.communicator = ApplicationCommunicator(application, scope)
        self.buffer = ""
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.finished = False

    async def open(self) -> Stream:
        await self.communicator.send_input({"type": "http.request", "body": b""})
        start = await self.communicator.receive_output(timeout=10)
        assert start["type"] == "http.response.start"
        self.status, self.headers = start["status"], dict(start["headers"])
        return self

    async def body(self) -> bytes:
        """The whole body of a response that is not a stream (a refusal)."""
        chunks = []
        while True:
            message = await self.communicator.receive_output(timeout=10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(chunks)

    async def event(self, wait: float = 5) -> tuple[str, Any]:
        """The next event (comment lines skipped), as (name, data)."""
        while "\n\n" not in self.buffer:
            assert not self.finished, "the stream ended"
            message = await self.communicator.receive_output(timeout=wait)
            self.buffer += message.get("body", b"").decode()
            self.finished = not message.get("more_body")
        block, self.buffer = self.buffer.split("\n\n", 1)
        event = parse_event(block)
        return event if event is not None else await self.event(wait)

    async def next_named(self, name: str) -> Any:
        while True:
            got, data = await self.event()
            if got == name:
                return data

    async def close(self) -> None:
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(timeout=5)


async def follow(application, thread, token) -> Stream:
    stream = await Stream(application, f"/api/threads/{thread.pk}/events", token).open()
    return stream


def _token(user, *scopes: str) -> str:
    return api_token_create(user=user, scopes=scopes or ("read",))[1]


async def test_a_token_follows_a_thread_status_chunks_and_swaps(
    application, layer, support_agent, reviewer
):
    interrupt = await sync_to_async(make_interrupt)(owner=support_agent)
    thread = interrupt.thread
    token = await sync_to_async(_token)(support_agent)

    stream = await follow(application, thread, token)
    assert stream.status == 200
    assert stream.headers[b"Content-Type"] == b"text/event-stream"
    name, snapshot = await stream.event()
    assert (name, snapshot["status"]) == ("status", "interrupted")
    assert snapshot["thread_id"] == str(thread.pk) and snapshot["run_id"] is None

    # What the pages hear: a streamed chunk, a run's status change, a claim's swap.
    await broadcast.apublish_chunk(thread.pk, {"event": "message", "data": {"token": "Hi"}})
    assert (await stream.next_named("chunk"))["chunk"]["data"] == {"token": "Hi"}
    await sync_to_async(broadcast.publish_thread_status)(
        thread.pk, "running", run_id="r-1", run_status="running"
    )
    status = await stream.next_named("status")
    assert (status["status"], status["run_id"], status["run_status"]) == (
        "running",
        "r-1",
        "running",
    )
    await sync_to_async(interrupt_claim)(interrupt=interrupt, user=reviewer)
    html = await stream.next_named("html")
    assert reviewer.username in html and "hx-swap-oob" in html

    await stream.close()


async def test_a_stream_ends_when_its_token_is_revoked(application, layer, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()  # the snapshot: subscribed

    def revoke() -> None:
        api_tokens_revoke(user=support_agent, reason="lost laptop")
        broadcast.publish_user_revoke([support_agent.pk])

    await sync_to_async(revoke)()

    closed = await stream.next_named("closed")
    assert "revoked" in closed["detail"] and "lost laptop" in closed["detail"]
    message = await stream.communicator.receive_output(timeout=5)
    assert message["type"] == "http.response.body" and not message.get("more_body")  # ended
    await stream.communicator.wait(timeout=5)


async def test_a_stream_rechecks_its_token_without_any_event(
    application, layer, support_agent, settings
):
    settings.PORTAL_WS_RECHECK_SECONDS = 0.3
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()

    # Revoked without telling anyone (a queryset update, no signal).
    await sync_to_async(api_tokens_revoke)(user=support_agent, reason="rotated")

    assert "rotated" in (await stream.next_named("closed"))["detail"]
    await stream.communicator.wait(timeout=5)


async def test_a_closed_stream_leaves_its_groups(application, layer, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()

    await stream.close()

    if layer == "memory":
        memory = channel_layers["default"]
        assert not memory.groups.get(broadcast.thread_group(thread.pk))
        assert not memory.groups.get(broadcast.user_group(support_agent.pk))


async def test_a_stream_of_someone_elses_thread_is_refused_as_json(
    application, layer, support_agent, other_support_agent
):
    thread = await sync_to_async(make_thread)(owner=other_support_agent)
    token = await sync_to_async(_token)(support_agent)

    stream = await follow(application, thread, token)

    assert stream.status == 404
    assert json.loads(await stream.body())["detail"] == f"No thread {thread.pk} that you can see."


async def test_a_stream_needs_the_read_scope(application, layer, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent, "start")

    stream = await follow(application, thread, token)

    assert stream.status == 403
    assert "'read' scope" in json.loads(await stream.body())["detail"]


async def test_a_stream_without_a_token_is_refused_with_401(application, layer, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)

    stream = await follow(application, thread, None)

    assert stream.status == 401
    assert "Bearer" in json.loads(await stream.body())["detail"]


async def test_events_published_before_the_stream_opened_are_in_its_snapshot(
    application, layer, support_agent
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)

    await sync_to_async(Thread.objects.filter(pk=thread.pk).update)(status=Thread.Status.DONE)

    stream = await follow(application, thread, token)

    assert (await stream.event())[1]["status"] == "done"
    await asyncio.wait_for(stream.close(), timeout=10)


async def test_a_stream_still_hears_events_after_idle_rechecks(
    application, layer, support_agent, settings
):
    # Each recheck ends a wait on the layer; the pub/sub layer unsubscribes a channel whose
    # receive is cancelled, so waiting must not cancel it.
    settings.PORTAL_WS_RECHECK_SECONDS = 0.1
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()
    await asyncio.sleep(0.6)

    await broadcast.apublish_chunk(thread.pk, {"event": "message", "data": {"token": "late"}})

    assert (await stream.next_named("chunk"))["chunk"]["data"] == {"token": "late"}
    await stream.close()


async def test_a_stream_ends_when_its_user_may_no_longer_see_the_thread(
    application, layer, support_agent, reviewer
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(reviewer)
    stream = await follow(application, thread, token)
    await stream.event()

    # Taken out of the reviewers: the signal tells the user's streams to check again.
    await sync_to_async(reviewer.groups.clear)()

    closed = await stream.next_named("closed")
    assert closed["detail"] == f"You can no longer see thread {thread.pk}."
    await stream.communicator.wait(timeout=5)


async def test_a_carriage_return_in_a_thread_cannot_forge_an_event(
    application, layer, support_agent
):
    # An event-stream reader ends a line at a bare CR too, and an event at two of them:
    # text a model or a user wrote must not start events of its own.
    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()  # the thread as it stands
    text = 'hi\r\revent: closed\rdata: {"detail": "forged"}\r\r'
    await broadcast.apublish_chunk(
        thread.pk,
        {
            "event": "message",
            "data": {"complete": True},
            "message": {"id": "m-1", "role": "assistant", "content": text},
        },
    )
    raw = ""
    while "</div>" not in raw or not raw.endswith("\n\n"):
        raw += (await stream.communicator.receive_output(timeout=5)).get("body", b"").decode()
    await stream.close()

    assert "\r" not in raw
    assert [line for line in raw.split("\n") if line.startswith("event:")] == ["event: html"]


async def test_a_stream_ends_when_its_token_is_deleted_in_the_admin(
    application, layer, support_agent, admin_user
):
    from portal.accounts.tokens import api_token_delete
    from portal.models import ApiToken

    thread = await sync_to_async(make_thread)(owner=support_agent)
    token = await sync_to_async(_token)(support_agent)
    stream = await follow(application, thread, token)
    await stream.event()

    def delete() -> None:
        api_token_delete(token=ApiToken.objects.get(user=support_agent), by=admin_user)

    await sync_to_async(delete)()
    name, data = await stream.event()
    assert name == "closed", (name, data)
    await stream.close()
