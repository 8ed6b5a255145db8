"""The decision page and the queue stay current for everyone who has them open: another
reviewer's decision, claim or release shows within a second (who did what), the form they
can no longer use is disabled, ages keep counting, the tab title counts what is pending,
and new requests are announced to screen readers."""

from __future__ import annotations

import re
import time

from playwright.sync_api import expect

from tests.browser.conftest import assert_not_reloaded, mark_page, wait_live
from tests.browser.test_live_flows import _paused_refund
from tests.factories import make_interrupt

WITHIN_A_SECOND = 1000  # ms


def _open_twice(login, interrupt, first_user, second_user):
    pages = [
        login(user, start=f"/interrupts/{interrupt.pk}/") for user in (first_user, second_user)
    ]
    for page in pages:
        wait_live(page)
        mark_page(page)
    return pages


def test_a_decision_shows_on_every_open_page_with_who_decided_and_disables_the_form(
    live, login, shoot, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    deciding, watching = _open_twice(login, interrupt, reviewer, second_reviewer)
    watching.get_by_label("Note").fill("I was about to say yes")
    deciding.get_by_role("button", name="Approve", exact=True).click()

    news = watching.locator("#decision-news")
    expect(news).to_contain_text("Approved", timeout=WITHIN_A_SECOND)
    expect(news).to_contain_text("rita-reviewer")
    expect(watching.locator("#interrupt-status")).to_have_text("resolved")
    expect(watching.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(watching.get_by_role("button", name="Reject")).to_be_disabled()
    expect(watching.locator("#decision-blocked")).to_be_hidden()  # no claim to explain
    expect(watching.locator("#decision-claim")).to_be_hidden()  # nothing left to claim
    # What they typed stays, to copy; the page was not reloaded under them.
    expect(watching.get_by_label("Note")).to_have_value("I was about to say yes")
    assert_not_reloaded(watching)
    shoot(watching, "interrupt-decided-elsewhere")


def test_a_claim_and_a_release_show_on_every_open_page_with_who_did_it(
    live, login, shoot, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    claiming, watching = _open_twice(login, interrupt, reviewer, second_reviewer)

    claiming.get_by_role("button", name="Claim").click()
    news = watching.locator("#decision-news")
    expect(news).to_contain_text("rita-reviewer claimed", timeout=WITHIN_A_SECOND)
    expect(watching.locator("#decision-claim")).to_contain_text(
        "rita-reviewer claimed this request"
    )
    # A reviewer who may not take the claim over cannot decide while it is held, and the
    # form says why.
    expect(watching.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(watching.get_by_role("button", name="Claim")).to_have_count(0)
    why = watching.locator("#decision-blocked")
    expect(why).to_contain_text("rita-reviewer claimed this request at")
    expect(why).to_contain_text("ask them to release it, or wait")
    shoot(watching, "interrupt-claimed-elsewhere")

    claiming.get_by_role("button", name="Release").click()
    expect(news).to_contain_text("rita-reviewer released", timeout=WITHIN_A_SECOND)
    expect(watching.locator("#decision-claim")).to_contain_text("Nobody has claimed")
    expect(watching.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    expect(why).to_be_hidden()
    assert_not_reloaded(watching)


def test_a_page_opened_while_someone_else_holds_the_claim_opens_when_it_is_released(
    live, login, reviewer, second_reviewer
):
    from portal.reviews.claims import interrupt_claim

    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)
    holding = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    waiting = login(second_reviewer, start=f"/interrupts/{interrupt.pk}/")
    for page in (holding, waiting):
        wait_live(page)
    mark_page(waiting)
    why = waiting.locator("#decision-blocked")
    expect(why).to_contain_text("ask them to release it, or wait")
    expect(waiting.get_by_role("button", name="Approve", exact=True)).to_be_disabled()

    holding.get_by_role("button", name="Release").click()
    expect(waiting.locator("#decision-claim")).to_contain_text(
        "Nobody has claimed", timeout=WITHIN_A_SECOND
    )
    expect(waiting.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    expect(why).to_be_hidden()
    assert_not_reloaded(waiting)


def test_a_relative_age_keeps_counting(live, login, reviewer):
    interrupt = make_interrupt()
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    age = page.locator("#decision-request time[data-relative]").first
    expect(age).to_have_text(re.compile(r"second|now"))
    before = age.inner_text()
    time.sleep(2.2)
    assert age.inner_text() != before, f"still {before!r} two seconds later"


def test_the_tab_title_counts_the_pending_requests(live, login, reviewer, second_reviewer):
    interrupt = make_interrupt()
    queue = login(reviewer, start="/queue/")
    expect(queue).to_have_title("(1) Review queue · Reviewer portal")
    wait_live(queue)
    mark_page(queue)
    # Another reviewer decides it: the open queue's title follows without a reload.
    deciding = login(second_reviewer, start=f"/interrupts/{interrupt.pk}/")
    deciding.get_by_role("button", name="Approve", exact=True).click()
    expect(queue.locator(f"#q-{interrupt.pk}")).to_have_count(0)
    expect(queue).to_have_title("Review queue · Reviewer portal")
    assert_not_reloaded(queue)


def test_a_new_request_is_announced_to_screen_readers(live, login, support_agent, reviewer):
    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    _chat, _thread, interrupt = _paused_refund(live, login, support_agent)
    expect(queue.locator(f"#q-{interrupt.pk}")).to_be_visible()
    news = queue.get_by_role("status").filter(has_text="New request")
    expect(news).to_have_attribute("aria-live", "polite")
    expect(news).to_contain_text("New request from refunds")
    expect(news).to_contain_text("Approve a $42.50 refund")
