"""The review queue's row (``portal_live.queue_row``): what it shows, how it escapes and
truncates, its links, and that the queue page shows the row the worker broadcasts,
rendered without a query."""

from __future__ import annotations

import types
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.template.defaultfilters import truncatechars
from django.urls import path, reverse, set_script_prefix, set_urlconf
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from pytest_django.asserts import assertHTMLEqual, assertInHTML

from portal import broadcast
from portal.decisions import interrupt_claim
from portal.models import Interrupt, Thread
from portal.templatetags.portal_live import _html, queue_row, truncate_chars, when
from tests.factories import make_interrupt

CREATED = datetime(2026, 11, 30, 1, 7, 9, tzinfo=UTC)
PK = "int_0123456789abcdef"
THREAD = "6f1c0d2e-7a4b-4c8d-9e0f-1a2b3c4d5e6f"


def pending(
    *,
    pk: str = PK,
    agent: str = "refunds",
    reason: str = "tool_approval",
    message: str = "Approve a $42.50 refund for order A-1001?",
    title: str = "Refund $42.50 for order A-1001.",
    claimant: str | None = None,
    created_at: datetime | None = CREATED,
    owner: str | None = "sam-support",
) -> Interrupt:
    """An unsaved pending interrupt with its thread and claimant at hand, as the worker
    has it when the agent pauses."""
    return Interrupt(
        id=pk,
        thread=Thread(
            id=THREAD,
            agent=agent,
            title=title,
            owner=get_user_model()(username=owner) if owner else None,
        ),
        agent=agent,
        reason=reason,
        message=message,
        created_at=created_at,
        claimed_by=get_user_model()(username=claimant) if claimant else None,
        checkpoint_seq=1,
    )


HOSTILE: dict[str, Any] = {
    "agent": "<script>alert('a')</script>\"",
    "reason": "<b>why</b>",
    "message": "<script>alert(\"m\")</script> & 'quotes'",
    "title": "<i>title</i> \"'",
    "claimant": "r<o>b\"'",
}


def test_an_unclaimed_row_in_full():
    assertHTMLEqual(
        queue_row(pending()),
        f"""
        <tr id="q-{PK}" class="queue-row" data-interrupt="{PK}"
            data-created="2026-11-30T01:07:09+00:00" data-agent="refunds"
            data-reason="tool_approval">
          <td><span class="tag">refunds</span></td>
          <td><span class="tag warn">Tool approval</span></td>
          <td class="queue-message">
            <a href="/interrupts/{PK}/">Approve a $42.50 refund for order A-1001?</a>
            <div class="muted small">“Refund $42.50 for order A-1001.”</div>
            <div class="small">asked by <strong class="queue-asker">sam-support</strong> ·
              <a href="/threads/{THREAD}/" class="queue-thread">the conversation</a></div>
          </td>
          <td class="queue-age"><time datetime="2026-11-30T01:07:09+00:00" data-relative
              title="2026-11-30 01:07:09 UTC">2026-11-30 01:07</time>
              <span class="abs-time">2026-11-30 01:07:09 UTC</span></td>
          <td class="queue-claim"><span class="muted">unclaimed</span></td>
          <td class="queue-actions">
            <a class="button primary" href="/interrupts/{PK}/">Review</a>
            <button type="button" class="small" hx-post="/interrupts/{PK}/claim"
                    hx-swap="none" data-queue-action>Claim</button>
          </td>
        </tr>""",
    )


def test_a_claimed_row_in_full():
    row = queue_row(pending(claimant="rob-reviewer", reason="input_required", title=""))
    assertHTMLEqual(
        row,
        f"""
        <tr id="q-{PK}" class="queue-row" data-interrupt="{PK}"
            data-created="2026-11-30T01:07:09+00:00" data-agent="refunds"
            data-reason="input_required">
          <td><span class="tag">refunds</span></td>
          <td><span class="tag">Question</span></td>
          <td class="queue-message">
            <a href="/interrupts/{PK}/">Approve a $42.50 refund for order A-1001?</a>
            <div class="small">asked by <strong class="queue-asker">sam-support</strong> ·
              <a href="/threads/{THREAD}/" class="queue-thread">the conversation</a></div>
          </td>
          <td class="queue-age"><time datetime="2026-11-30T01:07:09+00:00" data-relative
              title="2026-11-30 01:07:09 UTC">2026-11-30 01:07</time>
              <span class="abs-time">2026-11-30 01:07:09 UTC</span></td>
          <td class="queue-claim">
            <span class="tag ok" data-claimant="rob-reviewer">rob-reviewer</span></td>
          <td class="queue-actions">
            <a class="button primary" href="/interrupts/{PK}/">Review</a>
            <button type="button" class="small" hx-post="/interrupts/{PK}/unclaim"
                    hx-swap="none" data-queue-action data-only-for="rob-reviewer">Release</button>
          </td>
        </tr>""",
    )


def test_an_unclaimed_row_offers_claim_and_review():
    row = queue_row(pending())
    assert f'<tr id="q-{PK}" class="queue-row" data-interrupt="{PK}"' in row
    assert f'data-created="{CREATED.isoformat()}"' in row
    assert 'data-agent="refunds" data-reason="tool_approval"' in row
    assertInHTML('<span class="muted">unclaimed</span>', row)
    assertInHTML(
        f'<button type="button" class="small" hx-post="/interrupts/{PK}/claim" hx-swap="none"'
        " data-queue-action>Claim</button>",
        row,
    )
    assertInHTML(f'<a class="button primary" href="/interrupts/{PK}/">Review</a>', row)
    assert "Release" not in row
    assert "data-claimant" not in row


def test_a_claimed_row_names_the_claimant_and_offers_release_to_them_only():
    row = queue_row(pending(claimant="rob-reviewer"))
    assertInHTML('<span class="tag ok" data-claimant="rob-reviewer">rob-reviewer</span>', row)
    assertInHTML(
        f'<button type="button" class="small" hx-post="/interrupts/{PK}/unclaim" hx-swap="none"'
        ' data-queue-action data-only-for="rob-reviewer">Release</button>',
        row,
    )
    assert "Claim</button>" not in row
    assert "unclaimed" not in row


def test_agent_reason_message_title_and_claimant_are_escaped():
    row = queue_row(pending(**HOSTILE))
    assert "<script>" not in row
    assert "<b>" not in row
    assert "<i>" not in row
    assert 'data-agent="&lt;script&gt;alert(&#x27;a&#x27;)&lt;/script&gt;&quot;"' in row
    assert 'data-reason="&lt;b&gt;why&lt;/b&gt;"' in row
    assert "&lt;script&gt;alert(&quot;m&quot;)&lt;/script&gt; &amp; &#x27;quotes&#x27;</a>" in row
    assert "“&lt;i&gt;title&lt;/i&gt; &quot;&#x27;”" in row
    assert 'data-claimant="r&lt;o&gt;b&quot;&#x27;"' in row
    assert 'data-only-for="r&lt;o&gt;b&quot;&#x27;"' in row


@pytest.mark.parametrize(
    "message",
    ["a" * 160, "a" * 161, "é" * 200, "e\u0301" * 170, "e\u0301" * 100, "Å" * 161, "x" * 5000],
)
def test_the_message_is_truncated_to_160_characters_as_truncatechars_does(message):
    expected = truncatechars(message, 160)
    assert truncate_chars(message, 160) == expected
    assert f">{expected}</a>" in queue_row(pending(message=message))


def test_a_long_message_ends_in_an_ellipsis_after_159_characters():
    row = queue_row(pending(message="a" * 200))
    assert ">" + "a" * 159 + "…</a>" in row
    assert "a" * 160 not in row


def test_a_message_of_exactly_160_characters_is_shown_whole():
    assert ">" + "a" * 160 + "</a>" in queue_row(pending(message="a" * 160))


def test_tool_approval_is_tagged_warn_and_other_reasons_are_not():
    assertInHTML('<span class="tag warn">Tool approval</span>', queue_row(pending()))
    row = queue_row(pending(reason="input_required"))
    assertInHTML('<span class="tag">Question</span>', row)
    assert "warn" not in row


def test_a_missing_agent_message_and_title_show_a_dash_a_placeholder_and_no_title_line():
    row = queue_row(pending(agent="", message="", title=""))
    assertInHTML('<span class="tag">—</span>', row)
    assert 'data-agent=""' in row
    assertInHTML(f'<a href="/interrupts/{PK}/">(no message)</a>', row)
    assert "muted small" not in row


def test_the_thread_title_is_shown_under_the_message():
    row = queue_row(pending(title="Refund for A-1001"))
    assertInHTML('<div class="muted small">“Refund for A-1001”</div>', row)


def test_the_age_is_the_when_markup_of_the_creation_time():
    item = pending()
    assert f'<td class="queue-age">{when(CREATED)}</td>' in queue_row(item)
    assert when(None) in queue_row(pending(created_at=None))


@pytest.mark.parametrize(
    "moment",
    [
        CREATED,
        datetime(2026, 3, 29, 0, 30, tzinfo=UTC),  # London springs forward at 01:00 UTC
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 01:30 in London, twice: BST...
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),  # ... then GMT
    ],
)
def test_when_and_data_created_format_the_local_time_as_the_date_filter_does(moment):
    with timezone.override("Europe/London"):
        local = timezone.localtime(moment)
        full = dateformat.format(local, "Y-m-d H:i:s T")
        assert when(moment) == (
            f'<time datetime="{dateformat.format(local, "c")}" data-relative title="{full}">'
            f'{dateformat.format(local, "Y-m-d H:i")}</time> <span class="abs-time">{full}</span>'
        )
        assert f'data-created="{dateformat.format(local, "c")}"' in queue_row(
            pending(created_at=moment)
        )


def test_an_id_that_reverse_would_quote_is_reversed_as_usual():
    pk = "a b%41é"
    row = queue_row(pending(pk=pk))
    assert f'href="{reverse("interrupt_detail", args=[pk])}"' in row
    assert f'hx-post="{reverse("interrupt_claim", args=[pk])}"' in row


def test_an_id_no_link_can_hold_leaves_the_links_out():
    row = queue_row(pending(pk="a/b"))
    assert 'id="q-a/b"' in row
    assert 'href="/interrupts/' not in row
    assert "hx-post" not in row
    assert '<td class="queue-message">\n    Approve a $42.50 refund for order A-1001?\n' in row


def test_links_follow_the_script_prefix():
    set_script_prefix("/portal/")
    try:
        row = queue_row(pending())
    finally:
        set_script_prefix("/")
    assert f'href="/portal/interrupts/{PK}/"' in row
    assert f'hx-post="/portal/interrupts/{PK}/claim"' in row
    assert f'href="/interrupts/{PK}/"' in queue_row(pending())


def _page(request, interrupt_id):  # only reversed, never requested
    raise AssertionError


# A build that can claim but not release (the test below uses this module as its URLconf).
urlpatterns = [
    path("interrupts/<str:interrupt_id>/", _page, name="interrupt_detail"),
    path("interrupts/<str:interrupt_id>/claim", _page, name="interrupt_claim"),
]


def test_links_to_pages_this_build_does_not_install_are_left_out(settings):
    queue_row(pending())  # the full build's links are known by now
    settings.ROOT_URLCONF = __name__
    unclaimed = queue_row(pending())
    claimed = queue_row(pending(claimant="rob-reviewer"))
    assert f'hx-post="/interrupts/{PK}/claim"' in unclaimed
    assertInHTML(f'<a class="button primary" href="/interrupts/{PK}/">Review</a>', claimed)
    assert "hx-post" not in claimed
    assert "Release" not in claimed


def test_without_the_request_page_the_message_is_plain_text():
    no_pages = types.ModuleType("no_interrupt_pages")
    no_pages.urlpatterns = []  # type: ignore[attr-defined]
    set_urlconf(no_pages)  # as a middleware setting request.urlconf would
    try:
        row = queue_row(pending(message="<b>Approve?</b>"))
    finally:
        set_urlconf(None)
    assert "href" not in row
    assert "hx-post" not in row
    assert '<td class="queue-message">\n    &lt;b&gt;Approve?&lt;/b&gt;\n' in row


@pytest.mark.parametrize(
    "value",
    ["plain", '<a href="x">&\'</a>', mark_safe("<b>safe</b>"), 42, None, "", "é—“”"],
)
def test_the_row_escapes_values_as_format_html_does(value):
    assert _html("<p title={v}>{v}</p>", v=value) == format_html("<p title={0}>{0}</p>", value)


# --- the same row on the page and over the websocket ------------------------------------


@pytest.mark.django_db
def test_the_queue_page_shows_the_row_the_broadcast_sends(client, reviewer, second_reviewer):
    unclaimed = make_interrupt(message=HOSTILE["message"])
    claimed = make_interrupt(agent="transfers", reason="input_required", message="x" * 300)
    interrupt_claim(interrupt=claimed, user=second_reviewer)
    client.force_login(reviewer)
    page = client.get("/queue/").content.decode()
    for item in (unclaimed, claimed):
        row = broadcast.render_queue_row(item.pk)
        assert row.startswith(f'<tr id="q-{item.pk}"')
        assert row in page
    assert page.count('class="queue-row"') == 2


@pytest.mark.django_db
def test_the_broadcast_row_renders_without_a_query(second_reviewer, django_assert_num_queries):
    claimed = make_interrupt()
    interrupt_claim(interrupt=claimed, user=second_reviewer)
    item = Interrupt.objects.select_related("thread", "claimed_by").get(pk=claimed.pk)
    with django_assert_num_queries(0):
        row = broadcast.render_queue_item(item)
    assert 'data-claimant="rob-reviewer"' in row
