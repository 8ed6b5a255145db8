"""The history's pages in words: the list's Submitted column as sentences, edits field by
field, one name per outcome, and a decision page that opens on the decision."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Message
from portal.runs.checkpointer import DjangoCheckpointer
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


def _step(thread, status=ThreadStatus.RUNNING, *messages: Message) -> None:
    thread.refresh_from_db()
    DjangoCheckpointer().put_sync(
        str(thread.pk),
        CheckpointWrite(
            status=status, next_node=None, new_messages=[m.to_dict() for m in messages]
        ),
        parent_seq=thread.last_seq,
    )


def _edited(reviewer):
    interrupt = make_tool_approval(args={"amount": 120.0, "recipient": "Alice"})
    call_id = interrupt.value["tool_calls"][0]["id"]
    value = {"type": "edit", "args": {call_id: {"amount": 60, "recipient": "Alice"}}}
    return make_decision(interrupt=interrupt, reviewer=reviewer, value=value), call_id


def _cell(html: str, decision_id: int, css: str) -> str:
    row = re.search(rf'<tr id="decision-{decision_id}">(.*?)</tr>', html, re.S).group(1)
    cell = re.search(rf'<td class="{css}">(.*?)</td>', row, re.S).group(1)
    folded = re.sub(r"<details>.*?</details>", "", cell, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", folded).split())


def test_the_submitted_column_reads_as_a_sentence_with_the_json_folded(client, auditor, reviewer):
    rejected = make_decision(
        interrupt=make_interrupt(), reviewer=reviewer, value={"approved": False}, note="Too much."
    )
    ignored = make_decision(
        interrupt=make_tool_approval(), reviewer=reviewer, value={"type": "ignore"}, note="Spam."
    )
    client.force_login(auditor)
    html = client.get(reverse("history")).content.decode()

    assert _cell(html, rejected.pk, "history-submitted") == "Rejected. Note: Too much."
    assert _cell(html, ignored.pk, "history-submitted") == "Ignored. Note: Spam."
    assert "&quot;approved&quot;: false" in html  # still there, one click away


def test_an_edit_reads_field_by_field_in_the_list_without_call_ids(client, auditor, reviewer):
    decision, call_id = _edited(reviewer)
    client.force_login(auditor)
    html = client.get(reverse("history")).content.decode()

    cell = _cell(html, decision.pk, "history-submitted")
    assert cell == ("Approved with edited arguments. Transfer funds: amount: $120.00 → $60.00")
    assert call_id not in cell


def test_each_outcome_has_the_same_name_in_the_row_the_filter_and_the_decision_page(
    client, auditor, reviewer
):
    decision = make_decision(
        interrupt=make_tool_approval(),
        reviewer=reviewer,
        value={"type": "response", "args": "Send half now."},
    )
    client.force_login(auditor)
    listing = client.get(reverse("history")).content.decode()
    page = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()

    name = "Answered in words instead"
    assert f'<span class="tag outcome-responded">{name}</span>' in listing
    assert f'<option value="responded">{name}</option>' in listing
    assert f'<span class="tag outcome-responded">{name}</span>' in page
    assert "Responded" not in listing and "Responded" not in page


def test_the_decision_page_opens_on_the_outcome_who_when_and_why(client, auditor, reviewer):
    decision = make_decision(
        interrupt=make_interrupt(),
        reviewer=reviewer,
        value={"approved": False},
        note="The order was already refunded.",
    )
    _step(decision.thread, ThreadStatus.DONE, Message(role="assistant", content="Not refunded."))
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()

    main = html[html.index("<main") :]
    first = main[main.index("<section") : main.index("</section>")]
    assert 'id="decision-summary"' in first
    for words in ("Rejected", reviewer.get_username(), "The order was already refunded."):
        assert words in first
    assert "Decided at" in first and "Why" in first
    # The raw state is there for auditors, folded and closed.
    assert '<details id="decision-diff">' in html
    assert "<details open" not in html
    assert html.index('id="decision-summary"') < html.index('id="decision-diff"')


def test_a_decision_without_a_note_says_none_was_given(client, auditor, reviewer):
    decision = make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()
    assert "No note was given." in html


def test_the_decision_page_leaves_out_steps_that_added_nothing(client, auditor, reviewer):
    decision = make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    thread = decision.thread
    _step(thread)  # the resume's first step: running, nothing said yet
    _step(thread)
    _step(thread, ThreadStatus.DONE, Message(role="assistant", content="Refund issued."))
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()

    assert html.count("<strong>Step ") == 1
    assert "Refund issued." in html
    assert ">running<" not in html


def test_the_decision_page_shows_an_edit_field_by_field(client, auditor, reviewer):
    decision, _call_id = _edited(reviewer)
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()
    summary = html[html.index('id="decision-summary"') : html.index('id="decision-request"')]
    assert "amount: $120.00 → $60.00" in summary
    assert "recipient" not in summary.split("the reviewer changed")[1]  # unchanged: not listed
