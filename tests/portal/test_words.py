"""Pages speak in words: no node names, call ids, snake_case reasons or raw JSON where a
reviewer or a support agent reads."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.factories import make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


class _Visible(HTMLParser):
    # Text a reader sees without opening anything: <details> (the raw payload, folded
    # away for those who want it) and scripts are left out, and so are attributes.
    def __init__(self) -> None:
        super().__init__()
        self.hidden = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("details", "script", "title"):
            self.hidden += 1

    def handle_endtag(self, tag):
        if tag in ("details", "script", "title"):
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Visible()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def test_a_tool_approval_page_names_the_tool_in_words_and_shows_no_call_id_or_node(
    client, reviewer
):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    client.force_login(reviewer)

    text = visible_text(
        client.get(reverse("interrupt_detail", args=[interrupt.pk])).content.decode()
    )

    assert "Transfer funds" in text
    assert call_id not in text
    assert "transfer_funds" not in text
    assert "tool_approval" not in text
    assert "TOOL" not in text
    assert "Tool approval" in text


def test_the_queue_and_the_thread_page_show_reasons_in_words(client, reviewer, support_agent):
    interrupt = make_interrupt(owner=support_agent, reason="input_required")
    client.force_login(reviewer)

    queue = visible_text(client.get(reverse("queue")).content.decode())
    thread = visible_text(
        client.get(reverse("thread_detail", args=[interrupt.thread_id])).content.decode()
    )

    for text in (queue, thread):
        assert "input_required" not in text and "tool_approval" not in text
        assert "Question" in text
    assert "TOOL" not in thread and "MAIN" not in thread
