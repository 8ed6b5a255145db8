"""The review queue's row (the ``queue-row`` partial of portal/queue.html): what it shows,
how it escapes and truncates, and that the open queues get the very row the page shows,
rendered once by the publisher as out-of-band swaps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.template.loader import render_to_string

from portal.models import Interrupt, Thread
from portal.reviews.claims import interrupt_claim
from portal.templatetags.portal_live import css_string
from portal.web import live
from tests.factories import make_interrupt

CREATED = datetime(2026, 11, 30, 1, 7, 9, tzinfo=UTC)
PK = "int_0123456789abcdef"
THREAD = "5f0c6a52-3c55-4a55-9a8e-2f2d8f3b7e10"


def pending(
    *,
    agent: str = "refunds",
    reason: str = "tool_approval",
    message: str = "Approve a $42.50 refund for order A-1001?",
    title: str = "Refund $42.50 for order A-1001.",
    claimant: str | None = None,
    owner: str | None = "sam-support",
) -> Interrupt:
    """An unsaved pending interrupt with its thread (and its owner) and claimant at hand."""
    return Interrupt(
        id=PK,
        thread=Thread(
            id=THREAD,
            agent=agent,
            title=title,
            owner=get_user_model()(username=owner) if owner else None,
        ),
        agent=agent,
        reason=reason,
        message=message,
        created_at=CREATED,
        claimed_by=get_user_model()(id=7, username=claimant) if claimant else None,
        checkpoint_seq=1,
    )


def row(item: Interrupt) -> str:
    return render_to_string("portal/queue.html#queue-row", {"item": item})


HOSTILE: dict[str, Any] = {
    "agent": "<script>alert('a')</script>\"",
    "reason": "<b>why</b>",
    "message": "<script>alert(\"m\")</script> & 'quotes'",
    "title": "<i>title</i> \"'",
    "claimant": "r<o>b\"'",
}


def test_an_unclaimed_row_shows_the_request_its_age_and_a_claim_button():
    html = row(pending())
    assert f'<tr id="q-{PK}" class="queue-row" data-interrupt="{PK}">' in html
    assert '<span class="tag warn">Tool approval</span>' in html
    assert f'<a href="/interrupts/{PK}/">Approve a $42.50 refund for order A-1001?</a>' in html
    assert "“Refund $42.50 for order A-1001.”" in html
    assert '<time datetime="2026-11-30T01:07:09+00:00" data-relative' in html
    assert f'hx-post="/interrupts/{PK}/claim"' in html
    assert "unclaimed" in html
    assert "hx-swap-oob" not in html


def test_a_row_says_who_asked_and_links_to_their_conversation():
    html = row(pending())
    assert 'asked by <strong class="queue-asker">sam-support</strong>' in html
    assert f'<a href="/threads/{THREAD}/" class="queue-thread">the conversation</a>' in html
    assert "asked by" not in row(pending(owner=None))


def test_a_claimed_row_names_the_claimant_and_offers_release_to_them_only():
    html = row(pending(claimant="rob-reviewer"))
    assert '<span class="tag ok" data-claimant="rob-reviewer">rob-reviewer</span>' in html
    assert 'data-only-for="rob-reviewer">Release</button>' in html
    assert "Claim</button>" not in html


def test_agent_reason_message_title_and_claimant_are_escaped():
    html = row(pending(**HOSTILE))
    for raw in ("<script>", "<b>", "<i>"):
        assert raw not in html
    assert "&lt;script&gt;alert(&quot;m&quot;)&lt;/script&gt; &amp; &#x27;quotes&#x27;</a>" in html
    assert 'data-claimant="r&lt;o&gt;b&quot;&#x27;"' in html


def test_a_long_message_is_cut_at_160_characters():
    html = row(pending(message="a" * 200))
    assert ">" + "a" * 159 + "…</a>" in html


def test_selector_values_are_quoted_css_strings_without_a_comma_htmx_would_split_at():
    assert css_string('a"b\\c\nd') == '"a\\22 b\\5c c\\a d"'
    assert css_string("a,b</c>") == '"a\\2c b\\3c \\2f c\\3e "'


@pytest.mark.django_db
def test_the_queue_page_shows_the_row_the_broadcast_sends(client, reviewer, second_reviewer):
    unclaimed = make_interrupt(message=HOSTILE["message"])
    claimed = make_interrupt(agent="transfers", reason="input_required", message="x" * 300)
    interrupt_claim(interrupt=claimed, user=second_reviewer)
    client.force_login(reviewer)
    page = client.get("/queue/").content.decode()
    for item in (unclaimed, claimed):
        page_row = row(Interrupt.objects.select_related("thread", "claimed_by").get(pk=item.pk))
        assert page_row in page
        replace, insert = live.render_queue_row(item.pk)
        assert replace.replace(' hx-swap-oob="true"', "", 1) == page_row
        assert page_row in insert
    assert page.count('class="queue-row"') == 2


@pytest.mark.django_db
def test_the_broadcast_row_renders_without_a_query(second_reviewer, django_assert_num_queries):
    claimed = make_interrupt()
    interrupt_claim(interrupt=claimed, user=second_reviewer)
    item = Interrupt.objects.select_related("thread", "claimed_by").get(pk=claimed.pk)
    with django_assert_num_queries(0):
        html = live.render_queue_item(item)
    assert 'data-claimant="rob-reviewer"' in html
    assert "rob-reviewer claimed" in html  # said to screen readers
