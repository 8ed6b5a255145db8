"""A request's summary (what the agent wants, in one plain line) beside its title, on
every page that lists or shows requests, in the admin and in the API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.models import Interrupt
from tests.api.test_api import api_for
from tests.factories import admin_change_url, make_decision, make_interrupt
from tests.reviews.test_words import visible_text

pytestmark = pytest.mark.django_db

SUMMARY = "Refund $120.00 to order #1234"


@pytest.fixture
def request_with_summary(support_agent):
    return make_interrupt(
        owner=support_agent,
        message="The customer says the kettle arrived broken. Approve the refund?",
        summary=SUMMARY,
    )


def test_the_summary_is_stored_with_the_request_as_the_step_writes_it(request_with_summary):
    assert Interrupt.objects.get(pk=request_with_summary.pk).summary == SUMMARY


def test_the_queue_row_shows_the_summary_beside_the_title(client, reviewer, request_with_summary):
    client.force_login(reviewer)
    text = visible_text(client.get(reverse("queue")).content.decode())
    assert "The customer says the kettle arrived broken. Approve the refund?" in text
    assert SUMMARY in text


def test_the_request_page_shows_the_summary_under_its_title(client, reviewer, request_with_summary):
    client.force_login(reviewer)
    html = client.get(reverse("interrupt_detail", args=[request_with_summary.pk])).content
    assert f'<p class="request-summary" id="request-summary">{SUMMARY}</p>' in html.decode()


def test_the_history_and_its_decision_page_show_the_summary(
    client, auditor, reviewer, request_with_summary
):
    decision = make_decision(interrupt=request_with_summary, reviewer=reviewer)
    client.force_login(auditor)
    listed = visible_text(client.get(reverse("history")).content.decode())
    shown = visible_text(
        client.get(reverse("decision_detail", args=[decision.pk])).content.decode()
    )
    assert SUMMARY in listed and SUMMARY in shown


def test_the_exports_carry_the_summary(client, auditor, reviewer, request_with_summary):
    make_decision(interrupt=request_with_summary, reviewer=reviewer)
    client.force_login(auditor)
    response = client.get(reverse("history_export_jsonl"))
    assert f'"summary": "{SUMMARY}"' in b"".join(response.streaming_content).decode()


def test_the_admin_lists_and_shows_the_summary(client, admin_user, request_with_summary):
    client.force_login(admin_user)
    listing_response = client.get(reverse("admin:portal_interrupt_changelist"))
    page_response = client.get(admin_change_url(request_with_summary))
    assert (listing_response.status_code, page_response.status_code) == (200, 200), (
        listing_response.get("Location"),
        page_response.get("Location"),
    )
    listing, page = listing_response.content.decode(), page_response.content.decode()
    assert f'<span class="portal-summary">{SUMMARY}</span>' in listing
    assert SUMMARY in page


def test_the_api_lists_the_summary(client, reviewer, request_with_summary):
    items = api_for(client, reviewer).get("/api/interrupts").json()["items"]
    assert [i["summary"] for i in items] == [SUMMARY]


def test_a_summary_that_repeats_the_title_is_not_shown_twice(client, reviewer, support_agent):
    make_interrupt(
        owner=support_agent,
        message="Approve a **$42.50** refund?",
        summary="Approve a $42.50 refund?",
    )
    client.force_login(reviewer)
    html = client.get(reverse("queue")).content.decode()
    assert 'class="request-summary"' not in html
