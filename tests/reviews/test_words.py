"""Pages speak in words: no node names, call ids, snake_case reasons or raw JSON where a
reviewer or a support agent reads."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Message
from portal.runs.checkpointer import DjangoCheckpointer
from tests.factories import make_decision, make_interrupt, make_tool_approval

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


def _resumed_with(thread, *messages: Message) -> None:
    thread.refresh_from_db()
    DjangoCheckpointer().put_sync(
        str(thread.pk),
        CheckpointWrite(
            status=ThreadStatus.DONE,
            next_node=None,
            new_messages=[m.to_dict() for m in messages],
            node="TOOL",
        ),
        parent_seq=thread.last_seq,
    )


def test_the_history_decision_page_speaks_in_words_and_keeps_the_raw_json_folded_away(
    client, auditor, reviewer
):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    decision = make_decision(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"type": "edit", "args": {call_id: {"amount": 4000.0, "recipient": "Alice"}}},
    )
    _resumed_with(
        interrupt.thread,
        Message(
            role="tool",
            content='{"status": "declined", "reason": "over the daily limit"}',
            tool_call_id=call_id,
            name="transfer_funds",
        ),
        Message(
            role="assistant",
            content="Trying a smaller one.",
            tools_calls=[
                {
                    "id": "call_second",
                    "type": "function",
                    "function": {"name": "transfer_funds", "arguments": '{"amount": 10.0}'},
                }
            ],
        ),
    )
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()
    text = visible_text(html)

    assert "transfer_funds" not in text
    assert call_id not in text and "call_second" not in text
    assert "tool_approval" not in text and "TOOL" not in text
    assert '"type"' not in text and '"recipient"' not in text  # no raw JSON in view
    assert "Transfer funds (amount: $5,000.00, recipient: Alice)" in text  # what was asked
    assert "Transfer funds (amount: $4,000.00, recipient: Alice)" in text  # what ran
    assert "Approved with edited arguments" in text
    assert "amount: $5,000.00 → $4,000.00" in text  # the edit, field by field
    # What the agent did next reads in words too, folded under its heading.
    unfolded = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "Transfer funds declined by rita-reviewer: over the daily limit." in unfolded
    assert "Asks to run Transfer funds (amount: $10.00)" in unfolded
    # Auditors still find everything as it was stored, one click away.
    assert "&quot;type&quot;: &quot;edit&quot;" in html and call_id in html
    assert "transfer_funds" in html
