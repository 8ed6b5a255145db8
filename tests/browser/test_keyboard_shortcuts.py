"""The queue and the decision page work from the keyboard: j / k step through the
requests, o opens one, a / r approve or reject, n focuses the note, and none of them
fires while the reviewer types."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from portal.models import Decision
from tests.browser.conftest import wait_live
from tests.factories import make_interrupt, make_tool_approval


def _decision(interrupt_id: str, timeout: float = 15) -> Decision:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = Decision.objects.filter(interrupt_id=interrupt_id).first()
        if found is not None:
            return found
        time.sleep(0.05)
    pytest.fail(f"no decision was recorded for {interrupt_id}")


@pytest.fixture
def three_requests(live, support_agent):
    return [
        make_interrupt(owner=support_agent, message=f"Approve refund number {n}?")
        for n in (1, 2, 3)
    ]


def _current(queue) -> str:
    return queue.locator("tr.kbd-current").get_attribute("id")


def test_the_queue_is_listed_and_stepped_through_with_j_and_k_and_opened_with_o(
    live, login, three_requests, reviewer
):
    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    help_ = queue.locator("details[data-shortcuts]")
    expect(help_.locator("summary")).to_have_text("Keyboard shortcuts")
    queue.keyboard.press("?")
    expect(help_).to_contain_text("Next / previous request")
    order = queue.locator("#queue-rows tr.queue-row").evaluate_all("rows => rows.map(r => r.id)")
    assert len(order) == 3

    queue.keyboard.press("j")
    assert _current(queue) == order[0]
    queue.keyboard.press("j")
    queue.keyboard.press("j")
    assert _current(queue) == order[2]
    expect(queue.locator(f"#{order[2]} .queue-message > a")).to_be_focused()
    queue.keyboard.press("k")
    assert _current(queue) == order[1]

    # Typed into a filter field, the same letters only type.
    queue.locator("#f-agent").focus()
    queue.keyboard.press("j")
    assert _current(queue) == order[1]

    queue.locator("#f-agent").blur()
    queue.keyboard.press("o")
    expect(queue).to_have_url(f"{live}/interrupts/{order[1].removeprefix('q-')}/")


def test_the_decision_page_approves_rejects_and_focuses_the_note_from_the_keyboard(
    live, login, three_requests, reviewer
):
    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    order = queue.locator("#queue-rows tr.queue-row").evaluate_all(
        "rows => rows.map(r => r.dataset.interrupt)"
    )
    queue.keyboard.press("j")
    queue.keyboard.press("o")
    page = queue
    expect(page).to_have_url(f"{live}/interrupts/{order[0]}/")
    expect(page.locator("details[data-shortcuts] summary")).to_have_text("Keyboard shortcuts")

    # n focuses the note; a and r typed there are text, not decisions.
    page.keyboard.press("n")
    note = page.locator('#decision-form [name="note"]')
    expect(note).to_be_focused()
    page.keyboard.type("a r")
    expect(note).to_have_value("a r")
    assert not Decision.objects.filter(interrupt_id=order[0]).exists()

    # j and k step through the queue's order from the decision page too.
    note.blur()
    page.keyboard.press("j")
    expect(page).to_have_url(f"{live}/interrupts/{order[1]}/")
    page.keyboard.press("k")
    expect(page).to_have_url(f"{live}/interrupts/{order[0]}/")

    page.keyboard.press("a")
    assert _decision(order[0]).outcome == Decision.Outcome.APPROVED
    expect(page.locator("#decision-form")).to_have_count(0)

    page.keyboard.press("j")
    expect(page).to_have_url(f"{live}/interrupts/{order[1]}/")
    # A rejection needs its reason: n, the note, Escape to leave the field, then r.
    page.keyboard.press("n")
    page.keyboard.type("Wrong order.")
    page.keyboard.press("Escape")
    page.keyboard.press("r")
    assert _decision(order[1]).outcome == Decision.Outcome.REJECTED


@pytest.mark.parametrize(("key", "outcome"), [("a", "approved"), ("r", "ignored")])
def test_a_and_r_accept_or_ignore_a_high_risk_tool_approval_too(
    live, login, reviewer, support_agent, key, outcome
):
    # Its answers are typed (accept / ignore), not approve / reject, and recorded as such.
    interrupt = make_tool_approval(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    expect(page.locator("#decision-form")).to_be_visible()
    if key == "r":  # ignoring needs its reason
        page.keyboard.press("n")
        page.keyboard.type("Not a payment we make.")
        page.keyboard.press("Escape")

    page.keyboard.press(key)

    assert _decision(interrupt.pk).outcome == outcome
