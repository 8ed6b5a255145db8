"""One refund told by every role, in real Chromium: support asks; the reviewer pays part
of it (the amount edited) and the next request opens; the auditor finds the decision
through the dropdown filters and reads it in words; the admin reads the same decision in
the same words, at a desk and on a phone. Its screenshots are docs/screenshots/story-*."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from portal.models import Decision, Interrupt, Thread
from tests.browser.conftest import wait_live
from tests.factories import make_interrupt

REFUND = "Refund $42.50 for order A-1001, it arrived broken."
EDITED = "Approved with edited arguments"
CHANGE = "amount: $42.50 → $20.00"
PHONE = {"width": 390, "height": 844}


def test_a_partial_refund_read_the_same_way_by_every_role(
    live, login, shoot, support_agent, reviewer, auditor, admin_user
):
    # Support asks; the request waits for a reviewer.
    chat = login(support_agent, start="/chat/")
    chat.locator("input[name=agent][value=refunds]").check()
    chat.get_by_role("textbox", name="Message").fill(REFUND)
    chat.get_by_role("button", name="Start").click()
    chat.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
    thread = Thread.objects.get(pk=chat.url.rstrip("/").rsplit("/", 1)[1])
    expect(chat.locator("#waiting-notice")).to_contain_text("Approve a $42.50 refund")
    wait_live(chat)
    shoot(chat, "story-1-support-asks")
    refund = Interrupt.objects.get(thread=thread, status="pending")
    # Another request waits behind it, asked later: the one "Next request" opens.
    later = make_interrupt(owner=support_agent, message="Approve a refund of $9.00?")

    # The reviewer pays $20.00 of it, then goes on to the next request.
    desk = login(reviewer, start="/queue/")
    desk.locator(f"#q-{refund.pk}").get_by_role("link", name="Review", exact=True).click()
    form = desk.locator("#decision-form")
    form.get_by_text("Edit arguments").click()
    form.get_by_label("Amount").fill("20")
    shoot(desk, "story-2-reviewer-edits")
    form.get_by_role("button", name="Approve with these arguments").click()
    expect(desk.locator("#decision-result")).to_contain_text(EDITED)
    expect(chat.locator("#transcript")).to_contain_text(f"the reviewer changed {CHANGE}")
    expect(chat.locator("#waiting-notice")).to_have_count(0)
    # The conversation list says how it ended, live, in the outcome's one name.
    expect(chat.locator(".chat-recent [aria-current] .tag")).to_have_text(EDITED)
    shoot(chat, "story-3-support-reads")
    desk.get_by_role("link", name="Next request").click()
    expect(desk).to_have_url(f"{live}/interrupts/{later.pk}/")
    decision = Decision.objects.get(interrupt=refund)

    # The auditor finds it by the dropdowns' words and reads it in words.
    audit = login(auditor, start="/history/")
    audit.get_by_label("Agent").select_option(label="Refunds")
    audit.get_by_label("Outcome").select_option(label=EDITED)
    audit.get_by_role("button", name="Apply").click()
    row = audit.locator(f"#decision-{decision.pk}")
    expect(row.locator(".tag.outcome-edited")).to_have_text(EDITED)
    expect(row.locator(".edit-changes li")).to_have_text(CHANGE)
    expect(row).not_to_contain_text('"approved"', use_inner_text=True)
    shoot(audit, "story-4-auditor-filters")
    audit.goto(f"{live}/history/{decision.pk}/")
    expect(audit.locator("h1")).to_contain_text(EDITED)
    expect(audit.locator("#decision-summary .edit-changes li")).to_have_text(CHANGE)
    shoot(audit, "story-5-auditor-reads")

    # The admin reads the same decision in the same words.
    admin = login(admin_user, start="/admin/portal/decision/")
    first = admin.locator("#result_list tbody tr").first
    expect(first.locator("th")).to_have_text(f"{EDITED} · {reviewer.get_username()}")
    expect(admin.locator("#result_list")).not_to_contain_text(refund.pk)
    expect(admin.locator("#result_list thead")).not_to_contain_text("Interrupt")
    shoot(admin, "story-6-admin-decisions")
    first.locator("th a").click()
    words = admin.locator(".field-in_words")
    expect(words).to_contain_text(EDITED)
    expect(words).to_contain_text(CHANGE)
    # The keys are folded away in the technical section (innerText skips closed <details>).
    content = admin.locator("#content")
    expect(content).not_to_contain_text(refund.tool_call_id or "call_", use_inner_text=True)
    shoot(admin, "story-7-admin-decision")

    # On a phone the admin's list still reads: no column pushed out of view.
    admin.set_viewport_size(PHONE)
    admin.goto(f"{live}/admin/portal/decision/")
    cell = admin.locator("#result_list tbody tr").first.locator("th")
    expect(cell).to_have_text(f"{EDITED} · {reviewer.get_username()}")
    box = cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"], box
    # Words wrap at spaces, never inside a word ("Resol ved").
    assert cell.evaluate("el => getComputedStyle(el).overflowWrap") != "anywhere"
    shoot(admin, "story-8-admin-phone")
