"""An open socket lives only as long as the session and the permission it was opened
with; the handshake's Origin must be this site's by scheme, host and port; an unknown
path is closed cleanly. Through the real ASGI stack with WebsocketCommunicator, on
whichever channel layer the run is configured with (in-memory, or Redis with REDIS_URL).
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test import Client

from portal.notify import broadcast
from portal.web.routing import origin_allowed
from tests.factories import make_thread

needs_db = pytest.mark.django_db(transaction=True)

HOST = (b"host", b"testserver")
ORIGIN = (b"origin", b"http://testserver")


async def _release_connection() -> None:
    # sync_to_async ran the ORM in its own thread; close that thread's connection so the
    # test database can be dropped at the end of the run.
    await sync_to_async(lambda: connection.close())()


def _login(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _cookie(client: Client) -> tuple[bytes, bytes]:
    name = settings.SESSION_COOKIE_NAME
    return (b"cookie", f"{name}={client.cookies[name].value}".encode())


async def _open(application: Any, path: str, client: Client) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, path, headers=[HOST, ORIGIN, _cookie(client)])
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await communicator.receive_nothing(timeout=0.2), "the socket was closed at once"
    return communicator


async def _closed_with(communicator: WebsocketCommunicator, wait: float = 3) -> int | None:
    message = await communicator.receive_output(timeout=wait)
    assert message["type"] == "websocket.close"
    await communicator.disconnect()  # as a browser answers a close
    return message.get("code")


@needs_db
async def test_logging_out_closes_the_sockets_of_that_session_and_no_other(application, reviewer):
    laptop, phone = await sync_to_async(_login)(reviewer), await sync_to_async(_login)(reviewer)
    on_laptop = await _open(application, "/ws/queue/", laptop)
    on_phone = await _open(application, "/ws/queue/", phone)

    response = await sync_to_async(laptop.post)("/logout/")
    assert response.status_code == 302

    assert await _closed_with(on_laptop) == 4401
    assert await on_phone.receive_nothing(timeout=0.3)
    await on_phone.disconnect()
    await _release_connection()


@needs_db
async def test_deactivating_a_user_closes_their_sockets(application, reviewer, support_agent):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    client = await sync_to_async(_login)(reviewer)
    queue = await _open(application, "/ws/queue/", client)
    watching = await _open(application, f"/ws/threads/{thread.pk}/", client)

    reviewer.is_active = False
    await sync_to_async(reviewer.save)()

    assert await _closed_with(queue) == 4401
    assert await _closed_with(watching) == 4401
    await _release_connection()


@needs_db
async def test_changing_the_password_closes_the_sockets_of_older_sessions(application, reviewer):
    client = await sync_to_async(_login)(reviewer)
    queue = await _open(application, "/ws/queue/", client)

    def change() -> None:
        reviewer.set_password("a-new-password-42")
        reviewer.save()

    await sync_to_async(change)()
    assert await _closed_with(queue) == 4401
    await _release_connection()


@needs_db
async def test_leaving_the_reviewer_group_closes_the_sockets_it_opened(
    application, reviewer, support_agent
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    client = await sync_to_async(_login)(reviewer)
    queue = await _open(application, "/ws/queue/", client)
    watching = await _open(application, f"/ws/threads/{thread.pk}/", client)

    await sync_to_async(lambda: reviewer.groups.clear())()

    assert await _closed_with(queue) == 4403
    assert await _closed_with(watching) == 4403
    await _release_connection()


@needs_db
async def test_a_group_losing_the_decide_permission_closes_its_members_queues(
    application, reviewer, second_reviewer, support_agent
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    queues = [
        await _open(application, "/ws/queue/", await sync_to_async(_login)(user))
        for user in (reviewer, second_reviewer)
    ]
    # The thread socket needs view_all_threads, which the group keeps: it stays open.
    watching = await _open(
        application, f"/ws/threads/{thread.pk}/", await sync_to_async(_login)(reviewer)
    )

    def take_decide_away() -> None:
        group = Group.objects.get(name="reviewer")
        group.permissions.remove(Permission.objects.get(codename="decide_interrupt"))

    await sync_to_async(take_decide_away)()

    for queue in queues:
        assert await _closed_with(queue) == 4403
    assert await watching.receive_nothing(timeout=0.3)
    await watching.disconnect()
    await _release_connection()


@needs_db
async def test_the_owner_of_a_thread_keeps_watching_it_after_a_change_that_takes_nothing_away(
    application, support_agent, roles
):
    thread = await sync_to_async(make_thread)(owner=support_agent)
    watching = await _open(
        application, f"/ws/threads/{thread.pk}/", await sync_to_async(_login)(support_agent)
    )
    await sync_to_async(lambda: support_agent.groups.add(roles["auditor"]))()
    assert await watching.receive_nothing(timeout=0.5)
    await watching.disconnect()
    await _release_connection()


@needs_db
async def test_a_change_made_without_signals_is_caught_by_the_periodic_check(
    application, reviewer, settings
):
    from django.contrib.auth import get_user_model

    settings.PORTAL_WS_RECHECK_SECONDS = 0.3
    queue = await _open(application, "/ws/queue/", await sync_to_async(_login)(reviewer))

    # A bulk update sends no signal, so no event tells the socket.
    await sync_to_async(
        lambda: get_user_model().objects.filter(pk=reviewer.pk).update(is_active=False)
    )()

    assert await _closed_with(queue, wait=3) == 4401
    await _release_connection()


@needs_db
async def test_an_unknown_websocket_path_is_closed_with_4404(application, reviewer):
    client = await sync_to_async(_login)(reviewer)
    communicator = WebsocketCommunicator(
        application, "/ws/nothing-here/", headers=[HOST, ORIGIN, _cookie(client)]
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await _closed_with(communicator) == 4404
    await _release_connection()


@pytest.mark.parametrize(
    "origin",
    [
        "https://testserver",  # another scheme
        "http://testserver:8001",  # another port
        "http://evil.example",  # another host
        "http://testserver.evil.example",
        "null",
    ],
)
@needs_db
async def test_a_handshake_from_another_origin_is_refused(application, reviewer, origin):
    client = await sync_to_async(_login)(reviewer)
    communicator = WebsocketCommunicator(
        application,
        "/ws/queue/",
        headers=[HOST, (b"origin", origin.encode()), _cookie(client)],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert not connected
    await _release_connection()


def _scope(origin: str | None, host: str | None = "portal.example.com", **extra: Any) -> dict:
    headers = []
    if host is not None:
        headers.append((b"host", host.encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "websocket", "headers": headers, **extra}


@pytest.mark.parametrize(
    ("origin", "scope", "allowed"),
    [
        ("http://portal.example.com", {}, True),
        ("http://portal.example.com:80", {}, True),  # the default port, written out
        ("https://portal.example.com", {}, False),  # a ws socket is opened from http
        ("https://portal.example.com", {"scheme": "wss"}, True),
        ("http://portal.example.com", {"scheme": "wss"}, False),
        ("http://portal.example.com:8000", {}, False),
        ("https://portal.example.com", {"proxied": "https"}, True),
        ("http://portal.example.com", {"proxied": "https"}, False),
        ("http://other.example.com", {}, False),
        ("http://portal.example.com", {"host": "portal.example.com:8000"}, False),
        ("http://portal.example.com:8000", {"host": "portal.example.com:8000"}, True),
        ("http://portal.example.com", {"host": None}, False),
        (None, {}, False),
        ("http://portal.example.com", {"host": "not-allowed.example.net"}, False),
        ("https://app.example.org", {}, True),  # CSRF_TRUSTED_ORIGINS
        ("https://app.example.org:8443", {}, False),
        ("http://app.example.org", {}, False),
        ("https://eu.tenants.example.org", {}, True),  # https://*.tenants.example.org
        ("http://eu.tenants.example.org", {}, False),
        ("https://tenants.example.org.evil.net", {}, False),
        ("https://portal.example.com:99999", {"scheme": "wss"}, False),  # not a port
    ],
)
def test_the_origin_rule_compares_scheme_host_and_port(settings, origin, scope, allowed):
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.org", "https://*.tenants.example.org"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    options = dict(scope)
    host = options.pop("host", "portal.example.com")
    proxied = options.pop("proxied", None)
    built = _scope(origin, host, **options)
    if proxied:
        built["headers"].append((b"x-forwarded-proto", proxied.encode()))
    assert origin_allowed(built) is allowed


@needs_db
@pytest.mark.parametrize("frame", [{"text_data": "{oops"}, {"bytes_data": b"\x00\x01"}])
async def test_a_frame_that_is_not_json_is_ignored_and_the_socket_stays(
    application, reviewer, frame
):
    # Frames from the browser are ignored; one that cannot be decoded used to kill the
    # consumer without its disconnect, leaving its re-check task and its groups behind.
    import asyncio

    from channels.layers import get_channel_layer

    client = await sync_to_async(_login)(reviewer)
    socket = await _open(application, "/ws/queue/", client)
    await socket.send_to(**frame)
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()
    await asyncio.sleep(0.1)

    rechecks = [t for t in asyncio.all_tasks() if "_recheck_every" in repr(t.get_coro())]
    assert rechecks == []
    layer = get_channel_layer()
    if hasattr(layer, "groups"):  # the in-memory layer: nobody is left in the queue's group
        assert not layer.groups.get(broadcast.QUEUE_GROUP)
    await _release_connection()
