"""The websocket consumers, through the real ASGI stack (origin check, session auth,
routing) with WebsocketCommunicator."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from portal.notify import broadcast
from tests.factories import make_interrupt, make_thread

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")  # browsers send both; the Origin check compares them


def _cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return (b"cookie", f"{name}={client.cookies[name].value}".encode())


async def _connect(application, path: str, user=None, origin=ORIGIN):
    headers = [HOST, origin]
    if user is not None:
        headers.append(await sync_to_async(_cookie)(user))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


async def _next_about(communicator, interrupt_id: str) -> str:
    # The queue group is shared: skip news about other requests (say, another test run
    # on the same Redis).
    while True:
        html = await communicator.receive_from(timeout=2)
        if f'id="q-{interrupt_id}"' in html:
            return html


async def _closed_with(communicator) -> int | None:
    message = await communicator.receive_output(timeout=2)
    assert message["type"] == "websocket.close"
    # Answer the close as a browser (and daphne) would. Left running, the consumer would
    # sit in the Redis layer's shielded receive, and the test's event loop could never
    # finish cancelling it.
    await communicator.disconnect()
    return message.get("code")


async def test_a_support_user_connects_to_their_own_thread(application, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, connected = await _connect(
        application, f"/ws/threads/{thread.pk}/", support_agent
    )
    assert connected
    assert await communicator.receive_nothing(timeout=0.1)
    await communicator.disconnect()


async def test_an_anonymous_connection_is_closed_with_4401(application, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    for path in (f"/ws/threads/{thread.pk}/", "/ws/queue/"):
        communicator, connected = await _connect(application, path)
        assert connected  # accepted only so the browser can read the reason code
        assert await _closed_with(communicator) == 4401


async def test_another_support_users_thread_is_closed_with_4403(
    application, support_agent, other_support_agent
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{thread.pk}/", other_support_agent)
    assert await _closed_with(communicator) == 4403


async def test_a_thread_that_does_not_exist_is_closed_with_4403(application, reviewer):
    path = "/ws/threads/00000000-0000-0000-0000-000000000000/"
    communicator, _ = await _connect(application, path, reviewer)
    assert await _closed_with(communicator) == 4403


async def test_reviewers_and_auditors_may_watch_any_thread(
    application, support_agent, reviewer, auditor
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    for user in (reviewer, auditor):
        communicator, connected = await _connect(application, f"/ws/threads/{thread.pk}/", user)
        assert connected
        assert await communicator.receive_nothing(timeout=0.1)
        await communicator.disconnect()


async def test_a_connection_from_a_foreign_origin_is_refused(application, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    _communicator, connected = await _connect(
        application,
        f"/ws/threads/{thread.pk}/",
        support_agent,
        origin=(b"origin", b"http://evil.example"),
    )
    assert not connected


async def test_a_published_chunk_reaches_the_threads_watchers(application, support_agent, reviewer):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    owner, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    watcher, _ = await _connect(application, f"/ws/threads/{thread.pk}/", reviewer)
    chunk = {
        "event": "message",
        "message": {"id": "msg_1", "role": "assistant", "content": "Hel"},
        "data": {"delta": "Hel"},
        "thread_id": str(thread.pk),
        "run_id": "r1",
        "timestamp": 1.0,
    }
    await broadcast.apublish_chunk(thread.pk, chunk)
    for communicator in (owner, watcher):
        assert await communicator.receive_json_from(timeout=2) == {"type": "chunk", "chunk": chunk}
        await communicator.disconnect()


async def test_a_finished_message_arrives_as_the_transcripts_own_partial(
    application, support_agent
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    message = {"id": "msg_1", "role": "assistant", "content": "Done <now>."}
    chunk = {"event": "message", "message": message, "data": {"complete": True}}
    await broadcast.apublish_chunk(thread.pk, chunk)
    html = await communicator.receive_from(timeout=2)
    # It replaces the bubble its tokens streamed into, or joins a transcript without one.
    assert '<div id="msg-msg_1" class="msg assistant" data-server="1" hx-swap-oob="true">' in html
    assert "beforeend:#transcript:not(:has([id=&quot;msg-msg_1&quot;])) [data-stream-into]" in html
    assert html.count("Done &lt;now&gt;.") == 2
    await communicator.disconnect()


async def test_a_chunk_published_from_the_embedded_workers_loop_arrives_promptly(
    application, support_agent
):
    """The demo's worker publishes from its own thread and event loop; with the in-memory
    layer the consumer's loop must still wake at once, not at its next timeout."""
    import asyncio
    import threading
    import time

    thread = await sync_to_async(make_thread)(owner=support_agent)
    owner, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    chunk = {
        "event": "message",
        "message": None,
        "data": {"delta": "Hi"},
        "thread_id": str(thread.pk),
        "run_id": "r1",
        "timestamp": 1.0,
    }
    worker = threading.Thread(
        target=lambda: asyncio.run(broadcast.apublish_chunk(thread.pk, chunk))
    )
    started = time.monotonic()
    worker.start()
    assert await owner.receive_json_from(timeout=3) == {"type": "chunk", "chunk": chunk}
    elapsed = time.monotonic() - started
    worker.join()
    await owner.disconnect()
    assert elapsed < 0.5, f"the update took {elapsed:.2f} s to arrive"


async def test_a_chunk_of_another_thread_is_not_forwarded(application, support_agent):
    mine = await sync_to_async(make_thread)(owner=support_agent)
    other = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{mine.pk}/", support_agent)
    await broadcast.apublish_chunk(other.pk, {"event": "message", "data": {"delta": "x"}})
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_a_status_change_is_forwarded(application, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    await sync_to_async(broadcast.publish_thread_status)(thread.pk, "done", run_status="succeeded")
    message = await communicator.receive_json_from(timeout=2)
    assert message["type"] == "status"
    assert message["status"] == "done"
    await communicator.disconnect()


async def test_the_queue_feed_is_only_for_reviewers(application, support_agent, auditor):
    for user in (support_agent, auditor):
        communicator, _ = await _connect(application, "/ws/queue/", user)
        assert await _closed_with(communicator) == 4403


async def test_a_new_interrupt_reaches_every_open_queue_as_one_rendered_row(
    application, reviewer, second_reviewer
):
    queues = [
        (await _connect(application, "/ws/queue/", u))[0] for u in (reviewer, second_reviewer)
    ]
    interrupt = await sync_to_async(make_interrupt)(message="Approve <b>this</b>?")
    for communicator in queues:
        # Out-of-band swaps: the row replaces its copy where shown, or joins the list.
        replace = await _next_about(communicator, interrupt.pk)
        assert replace.strip().startswith(f'<tr id="q-{interrupt.pk}" class="queue-row"')
        assert 'hx-swap-oob="true"' in replace
        html = await communicator.receive_from(timeout=2)
        assert 'hx-swap-oob="beforeend:#queue-table[data-sort=oldest]' in html
        assert "Approve &lt;b&gt;this&lt;/b&gt;?" in html  # escaped once, at the sender
        assert '<span id="pending-count" hx-swap-oob="true">1</span>' in html
        await communicator.disconnect()


async def test_a_claim_and_a_decision_reach_the_open_queue(application, reviewer, second_reviewer):
    from portal.reviews.claims import interrupt_claim
    from tests.factories import make_decision

    interrupt = await sync_to_async(make_interrupt)()
    communicator, _ = await _connect(application, "/ws/queue/", second_reviewer)
    await sync_to_async(interrupt_claim)(interrupt=interrupt, user=reviewer)
    claimed = await _next_about(communicator, interrupt.pk)
    assert 'data-claimant="rita-reviewer"' in claimed
    await sync_to_async(make_decision)(interrupt=interrupt, reviewer=reviewer)
    gone = await _next_about(communicator, interrupt.pk)
    while "delete" not in gone:  # the rest of the claim's frames
        gone = await _next_about(communicator, interrupt.pk)
    assert f'<tr id="q-{interrupt.pk}" hx-swap-oob="delete"></tr>' in gone
    assert '<span id="pending-count" hx-swap-oob="true">0</span>' in gone
    await communicator.disconnect()


async def test_a_decision_reaches_every_open_page_about_it_saying_who_decided(
    application, reviewer, second_reviewer
):
    from tests.factories import make_decision

    interrupt = await sync_to_async(make_interrupt)()
    path = f"/ws/threads/{interrupt.thread_id}/"
    communicator, _ = await _connect(application, path, second_reviewer)
    await sync_to_async(make_decision)(interrupt=interrupt, reviewer=reviewer)
    html = await communicator.receive_from(timeout=2)
    assert f'hx-swap-oob="outerHTML:#decision-news[data-interrupt=&quot;{interrupt.pk}&quot;]"' in (
        html
    )
    assert 'id="decision-result"' in html
    assert "rita-reviewer" in html
    assert ">resolved</span>" in html  # the status tag
    await communicator.disconnect()


async def test_an_expiry_reaches_every_open_page_about_it(application, reviewer):
    from datetime import timedelta

    from django.utils import timezone

    from portal.models import Interrupt
    from portal.reviews.expiry import interrupts_expire

    interrupt = await sync_to_async(make_interrupt)()
    past = timezone.now() - timedelta(seconds=1)
    await sync_to_async(Interrupt.objects.filter(pk=interrupt.pk).update)(expires_at=past)
    path = f"/ws/threads/{interrupt.thread_id}/"
    communicator, _ = await _connect(application, path, reviewer)
    await sync_to_async(interrupts_expire)()
    html = await communicator.receive_from(timeout=2)
    assert "#decision-news" in html
    assert "Expired" in html
    assert ">expired</span>" in html
    await communicator.disconnect()


async def test_a_release_says_who_released_it(application, reviewer, second_reviewer):
    from portal.reviews.claims import interrupt_claim, interrupt_unclaim

    interrupt = await sync_to_async(make_interrupt)()
    await sync_to_async(interrupt_claim)(interrupt=interrupt, user=reviewer)
    communicator, _ = await _connect(application, "/ws/queue/", second_reviewer)
    await sync_to_async(interrupt_unclaim)(interrupt=interrupt, user=reviewer)
    await _next_about(communicator, interrupt.pk)  # the row
    html = await communicator.receive_from(timeout=2)
    assert "rita-reviewer released" in html
    await communicator.disconnect()


async def test_forwarding_does_not_hop_to_the_sync_thread_per_message(
    application, reviewer, monkeypatch
):
    """Channels closes stale database connections, in its one sync thread, before every
    handler it dispatches: a thread hop per message and per socket, which made a broadcast
    to 200 open queues wait on 200 hops in a row. Forwarding never touches the database,
    so the consumers skip it."""
    import channels.db

    cleanups: list[int] = []
    monkeypatch.setattr(channels.db, "close_old_connections", lambda: cleanups.append(1))
    communicator, _ = await _connect(application, "/ws/queue/", reviewer)
    after_connect = len(cleanups)
    for n in range(3):
        await broadcast.agroup_send(
            broadcast.QUEUE_GROUP,
            broadcast.queue_changed(
                interrupt_id=f"hop-{n}", thread_id="t", agent="", reason="", status="gone", html=""
            ),
        )
    for n in range(3):
        assert "delete" in await _next_about(communicator, f"hop-{n}")
    assert len(cleanups) == after_connect
    await communicator.disconnect()


def test_the_server_process_freezes_what_start_up_built(application):
    """Full garbage collections walked every object Django's start-up made, with every
    socket of the process waiting; portal.asgi freezes them once the application is
    built."""
    import gc

    assert gc.get_freeze_count() > 10_000


async def test_what_the_browser_sends_is_ignored(application, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    await communicator.send_json_to({"type": "decide", "approved": True})
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


@pytest.mark.slow
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (the Redis channel layer)")
async def test_an_idle_connection_survives_the_redis_layers_reads(application, support_agent):
    # channels-redis's RedisChannelLayer blocked 5 s per read, and with redis-py 8's
    # default 5 s socket timeout an idle consumer crashed (close 1011) instead of waiting
    # for the next message. The pub/sub layer reads differently; idle must still be fine.
    thread = await sync_to_async(make_thread)(owner=support_agent)
    communicator, _ = await _connect(application, f"/ws/threads/{thread.pk}/", support_agent)
    assert await communicator.receive_nothing(timeout=12)
    await broadcast.apublish_chunk(thread.pk, {"event": "updates", "data": {"status": "done"}})
    message = await communicator.receive_json_from(timeout=5)
    assert message["type"] == "chunk"
    await communicator.disconnect()
