"""A request that needs two approvers, in the browser: the first approval shows on every
open page with who gave it, the approver cannot answer again, and the second approval
decides it."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import assert_not_reloaded, mark_page, wait_live
from tests.factories import make_interrupt

WITHIN_A_SECOND = 1000  # ms


def test_the_first_approval_shows_live_and_the_second_decides(
    live, login, shoot, reviewer, second_reviewer
):
    interrupt = make_interrupt(agent="two-person")
    pages = [
        login(user, start=f"/interrupts/{interrupt.pk}/") for user in (reviewer, second_reviewer)
    ]
    for page in pages:
        wait_live(page)
        mark_page(page)
    first, second = pages
    expect(second.locator("#decision-approvals")).to_contain_text("Approvals: 0 of 2")

    first.get_by_role("button", name="Approve", exact=True).click()

    votes = second.locator("#decision-approvals")
    expect(votes).to_contain_text("Approvals: 1 of 2", timeout=WITHIN_A_SECOND)
    expect(votes).to_contain_text("rita-reviewer")
    expect(second.locator("#decision-news")).to_contain_text("rita-reviewer approved")
    expect(second.locator("#interrupt-status")).to_have_text("pending")
    expect(second.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    assert_not_reloaded(second)
    # The first approver's page (after their POST) says their part is done.
    expect(first.locator("#decision-blocked")).to_contain_text("You already answered")
    shoot(second, "interrupt-one-of-two-approvals")

    second.get_by_role("button", name="Approve", exact=True).click()

    expect(first.locator("#interrupt-status")).to_have_text("resolved")
    expect(first.locator("#decision-approvals")).to_contain_text("Approvals: 2 of 2")
