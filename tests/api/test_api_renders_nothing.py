"""What an API approval's request does not do on its own thread: render HTML. The live
updates it causes are rendered after commit in the announcer's thread (issue 32)."""

from __future__ import annotations

import json
import threading

import pytest
from asgiref.sync import async_to_sync
from django.test.signals import template_rendered

from portal.accounts.tokens import api_token_create
from portal.notify import broadcast
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def open_queue(settings):
    """An in-memory channel layer with a socket on the queue, so changes get rendered."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    layer = channel_layers["default"]
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(broadcast.QUEUE_GROUP, channel)
    yield layer, channel
    channel_layers.backends.clear()


def test_an_api_approval_renders_no_template_in_its_request_thread(client, reviewer, open_queue):
    layer, channel = open_queue
    token = api_token_create(user=reviewer, name="t")[1]
    interrupt = make_interrupt()
    rendered: list[tuple[int, str]] = []

    def on_render(sender, template, **kwargs):
        rendered.append((threading.get_ident(), template.name))

    template_rendered.connect(on_render)
    try:
        body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
        response = client.post(
            f"/api/threads/{interrupt.thread.pk}/resume",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        in_request = [name for thread, name in rendered if thread == threading.get_ident()]
        broadcast.announced()
    finally:
        template_rendered.disconnect(on_render)

    assert response.status_code == 202, response.content
    assert in_request == []
    # Rendered all the same, once, elsewhere: the open queue hears of it with its swaps.
    assert rendered, "the change was never rendered"
    event = async_to_sync(layer.receive)(channel)
    assert event["type"] == broadcast.QUEUE_CHANGED and event["html"]
