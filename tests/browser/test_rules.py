"""Rules in real Chromium: write a rule, simulate it against the history, be refused
activating your own version, and activate it as a second person; each page fits a phone
and passes axe-core."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from portal.models import Decision, Rule, RuleVersion
from tests.browser.a11y import PHONE, axe_violations, overflow
from tests.factories import grant_manage_rules, make_interrupt

CONDITIONS = """{
  "properties": {
    "payload": {
      "properties": {
        "amount": {"exclusiveMaximum": 10},
        "order_status": {"const": "delivered"}
      },
      "required": ["amount", "order_status"]
    }
  }
}"""


@pytest.fixture
def people(live, reviewer, second_reviewer):
    return grant_manage_rules(reviewer), grant_manage_rules(second_reviewer)


@pytest.fixture
def decided(live):
    """A small refund on a delivered order that a person rejected, and one they approved."""
    decisions = []
    for outcome, amount in (("rejected", 4.0), ("approved", 6.5)):
        interrupt = make_interrupt(
            value={"order_id": "A-9", "amount": amount, "order_status": "delivered"}
        )
        decision = Decision(interrupt=interrupt, thread=interrupt.thread, outcome=outcome)
        decision.save()
        decisions.append(decision)
    return decisions


def test_write_simulate_and_activate_a_rule_as_a_second_person(
    live, login, shoot, people, decided, support_agent
):
    writer, checker = people
    page = login(writer, start="/rules/")
    page.get_by_role("link", name="Write a rule").click()
    page.get_by_label("Name").fill("Small refunds on delivered orders")
    page.get_by_label("Agent", exact=True).fill("refunds")
    page.get_by_label("Reason", exact=True).fill("tool_approval")
    page.get_by_label("Tool", exact=True).fill("issue_refund")
    page.get_by_label("Conditions (JSON Schema)").fill(CONDITIONS)
    page.get_by_label("Approve", exact=True).check()
    page.get_by_role("button", name="Write this version").click()

    expect(page.locator("h1")).to_contain_text("Small refunds on delivered orders, version 1")
    version = RuleVersion.objects.get()
    assert page.url.endswith(f"/rules/versions/{version.pk}/")
    page.get_by_label("Decisions of the last … days").fill("7")
    page.get_by_role("button", name="Simulate").click()

    expect(page.locator("#sim-matched")).to_contain_text("2: 2 approved")
    expect(page.locator("#sim-agreed")).to_contain_text("1 (50%)")
    link = page.locator("#disagreements a").first
    expect(link).to_have_attribute("href", f"/history/{decided[0].pk}/")
    shoot(page, "rules-simulation")

    page.get_by_role("link", name="Back to the version").click()
    expect(page.locator("#writer-note")).to_be_visible()
    page.get_by_role("button", name="Activate version 1").click()
    expect(page.locator(".flash")).to_contain_text("another person who may manage rules")
    assert not Rule.objects.get().enabled

    other = login(checker, start=f"/rules/versions/{version.pk}/")
    expect(other.locator("#writer-note")).to_have_count(0)
    other.get_by_role("button", name="Activate version 1").click()
    expect(other.locator(".flash")).to_contain_text("Activated")
    other.get_by_role("link", name="Rules", exact=True).click()
    row = other.locator(f"#rule-{version.rule_id}")
    expect(row).to_contain_text("on")
    expect(row).to_contain_text("50%")
    shoot(other, "rules-list")
    assert Rule.objects.get().active_version == version

    # Support asks for a small refund on a delivered order: the rule approves it, with no
    # reviewer, and the chat goes on to the refund.
    chat = login(support_agent, start="/chat/")
    chat.locator("input[name=agent][value=refunds]").check()
    chat.get_by_role("textbox", name="Message").fill(
        "Refund $4.99 for order A-1002, it arrived broken."
    )
    chat.get_by_role("button", name="Start").click()
    expect(chat.locator(".msg.assistant").last).to_contain_text(
        "Refund of $4.99 issued for order A-1002"
    )
    decision = Decision.objects.get(rule_version=version)
    assert decision.reviewer is None and decision.door == "rule"

    # The checker finds it in the history, decided by the rule, and opens the version.
    other.goto(f"{live}/history/")
    other.get_by_label("Decided by rules").check()
    other.get_by_role("button", name="Apply").click()
    # The filtered list replaces the whole one (htmx, which then pushes its URL): a click
    # into the row before that lands would be cancelled by the push.
    expect(other).to_have_url(re.compile(r"by_rules=on"))
    row = other.locator("tbody tr", has_text="A-1002")
    expect(row).to_contain_text("rule Small refunds on delivered orders v1")
    shoot(other, "history-decided-by-rule")
    row.get_by_role("link", name="rule Small refunds on delivered orders v1").click()
    expect(other).to_have_url(f"{live}/rules/versions/{version.pk}/")


def test_the_rules_pages_fit_a_phone_and_pass_axe(live, login, people, decided):
    writer, _ = people
    page = login(writer, start="/rules/new/")
    page.set_viewport_size(PHONE)
    page.get_by_label("Name").fill("Phone rule")
    page.get_by_label("Conditions (JSON Schema)").fill(CONDITIONS)
    page.get_by_role("button", name="Write this version").click()
    page.get_by_role("button", name="Simulate").click()
    expect(page.locator("#sim-matched")).to_be_visible()
    simulation = page.url
    version = RuleVersion.objects.get()
    problems = []
    for path in (
        "/rules/",
        "/rules/new/",
        f"/rules/{version.rule_id}/",
        f"/rules/{version.rule_id}/edit/",
        f"/rules/versions/{version.pk}/",
        re.sub(r"^https?://[^/]+", "", simulation),
    ):
        page.goto(live + path)
        problems += [f"{path}: {p}" for p in overflow(page) + axe_violations(page)]
    assert problems == [], "\n".join(problems)
