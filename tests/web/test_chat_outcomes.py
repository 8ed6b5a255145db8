"""Support reads how each conversation ended: the list names the outcome of its latest
request in words and colour (not one green "done"), and a withdrawal is said as such."""

from __future__ import annotations

import re

import pytest

from agents.models.scripted import describe_tool_result
from portal.models import Thread
from portal.reviews.threads import interrupt_withdraw
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


def _finished(interrupt, reviewer, **answer):
    if reviewer is None:
        interrupt_withdraw(interrupt=interrupt, user=interrupt.thread.owner)
    else:
        make_decision(interrupt=interrupt, reviewer=reviewer, **answer)
    Thread.objects.filter(pk=interrupt.thread_id).update(status=Thread.Status.DONE)


def _tags(page: str) -> list[tuple[str, str]]:
    found = re.findall(r'<span class="tag ([^"]+)"[^>]*>([^<]+)</span>', page)
    return [(cls, words.strip()) for cls, words in found]


def test_the_conversation_list_names_each_outcome_in_words_and_colour(
    client, support_agent, reviewer
):
    approved, rejected, withdrawn, _waiting = (make_interrupt(owner=support_agent) for _ in "1234")
    _finished(approved, reviewer)
    _finished(rejected, reviewer, value={"approved": False}, note="outside the return window")
    _finished(withdrawn, None)
    client.force_login(support_agent)

    tags = _tags(client.get("/chat/").content.decode())

    assert ("outcome-approved", "Approved") in tags
    assert ("outcome-rejected", "Rejected: outside the return window") in tags
    assert ("outcome-cancelled", "Withdrawn by you") in tags
    assert ("status-interrupted warn", "waiting for approval") in tags
    assert not [t for t in tags if t[1] == "done"]


def test_an_edited_and_an_ignored_conversation_read_apart_from_an_approved_one(
    client, support_agent, reviewer
):
    edited, ignored = (make_tool_approval(owner=support_agent) for _ in "12")
    call_id = edited.value["tool_calls"][0]["id"]
    _finished(
        edited,
        reviewer,
        value={"type": "edit", "args": {call_id: {"amount": 10, "recipient": "Alice"}}},
    )
    _finished(ignored, reviewer, value={"type": "ignore"}, note="a duplicate of the first request")
    client.force_login(support_agent)

    tags = _tags(client.get("/chat/").content.decode())

    assert ("outcome-edited", "Approved with edited arguments") in tags
    assert ("outcome-ignored", "Ignored: a duplicate of the first request") in tags


def test_a_withdrawn_tool_call_is_said_as_withdrawn_not_declined():
    said = describe_tool_result('{"status": "withdrawn", "reason": "withdrawn"}')

    assert said == "I did not do that: the request was withdrawn before a reviewer decided."
