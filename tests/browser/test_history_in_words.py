"""The auditor's history in real Chromium: a decision page that opens on the decision,
a list that reads in words, dropdown filters in the page's words, and edits field by
field (issue 33, items 3 to 6)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import make_decision, make_interrupt, make_tool_approval


@pytest.fixture
def story(live, support_agent, reviewer):
    """A refusal of a refund the customer called broken, and an edited transfer."""
    refused = make_decision(
        interrupt=make_interrupt(owner=support_agent, text="My kettle arrived broken, refund it."),
        reviewer=reviewer,
        value={"approved": False},
        note="The order was refunded last week.",
    )
    transfer = make_tool_approval(owner=support_agent, args={"amount": 120.0, "recipient": "Al"})
    call_id = transfer.value["tool_calls"][0]["id"]
    edited = make_decision(
        interrupt=transfer,
        reviewer=reviewer,
        value={"type": "edit", "args": {call_id: {"amount": 60.0, "recipient": "Al"}}},
    )
    return {"refused": refused, "edited": edited, "call_id": call_id}


def test_the_decision_page_opens_on_the_outcome_who_when_and_why(
    live, login, shoot, auditor, reviewer, story
):
    decision = story["refused"]
    page = login(auditor, start=f"/history/{decision.pk}/")

    summary = page.locator("#decision-summary")
    expect(summary).to_be_in_viewport()
    expect(page.locator("h1")).to_contain_text("Rejected")
    expect(summary).to_contain_text(reviewer.get_username())
    expect(summary).to_contain_text("Decided at")
    expect(page.locator("#decision-why")).to_have_text("The order was refunded last week.")
    # The stored state is one click away, closed; it no longer fills the page.
    expect(page.locator("#decision-diff")).not_to_have_attribute("open", "")
    expect(page.locator("#decision-diff pre")).not_to_be_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 2000, height
    expect(page.locator("#decision-next li", has_text="running")).to_have_count(0)
    shoot(page, "history-decision-note")


def test_the_list_reads_in_words_with_one_name_per_outcome(live, login, shoot, auditor, story):
    page = login(auditor, start="/history/")
    refused = page.locator(f"#decision-{story['refused'].pk}")
    edited = page.locator(f"#decision-{story['edited'].pk}")

    expect(refused.locator(".history-submitted > p")).to_have_text("Rejected.")
    # What is not folded away (innerText leaves out a closed <details>).
    expect(refused).not_to_contain_text('{"approved"', use_inner_text=True)
    expect(refused.locator(".history-submitted pre")).not_to_be_visible()
    expect(edited).not_to_contain_text(story["call_id"], use_inner_text=True)
    expect(edited).not_to_contain_text('"type"', use_inner_text=True)
    # The outcome's name in the row is the one the filter offers.
    name = "Approved with edited arguments"
    expect(edited.locator(".tag.outcome-edited")).to_have_text(name)
    expect(page.locator("#f-outcome option[value=edited]")).to_have_text(name)
    page.set_viewport_size({"width": 1280, "height": 1000})
    shoot(page, "history")


def test_the_filters_are_dropdowns_of_the_words_the_page_shows(live, login, auditor, story):
    page = login(auditor, start="/history/")
    refused, edited = f"#decision-{story['refused'].pk}", f"#decision-{story['edited'].pk}"

    page.get_by_label("Agent").select_option(label="Refunds")
    page.get_by_label("Reason").select_option(label="Tool approval")
    page.get_by_label("Tool").select_option(label="Issue refund")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator(refused)).to_be_visible()
    expect(page.locator(edited)).to_have_count(0)
    expect(page).to_have_url(re.compile(r"agent=refunds.*reason=tool_approval&tool=issue_refund"))

    page.goto(f"{live}/history/")
    page.get_by_label("Search").fill("BROKEN")  # the customer's word, in another case
    page.get_by_role("button", name="Apply").click()
    expect(page.locator(refused)).to_be_visible()
    expect(page.locator(edited)).to_have_count(0)


def test_an_edit_reads_field_by_field_in_one_format_for_amounts(live, login, auditor, story):
    page = login(auditor, start="/history/")
    row = page.locator(f"#decision-{story['edited'].pk}")
    expect(row.locator(".edit-changes")).to_contain_text("Transfer funds:")
    expect(row.locator(".edit-changes li")).to_have_text("amount: $120.00 → $60.00")

    page.goto(f"{live}/history/{story['edited'].pk}/")
    expect(page.locator("#decision-summary .edit-changes li")).to_have_text(
        "amount: $120.00 → $60.00"
    )
