"""Errors that name their cause, in real Chromium: the decision page keeps its address
after a refusal, focus goes to the field at fault, and a long note shows a counter before
its limit cuts it."""

from __future__ import annotations

from playwright.sync_api import expect

from portal.models import Decision
from tests.factories import make_interrupt


def test_a_refused_note_names_its_cause_focuses_the_note_and_keeps_the_address(
    live, login, shoot, reviewer, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    address = f"{live}/interrupts/{interrupt.pk}/"
    expect(page).to_have_url(address)

    note = page.get_by_label("Note")
    counter = page.locator("#id_note-count")
    expect(counter).to_have_text("0 of 2,000 characters")
    note.fill("y" * 1950)
    expect(counter).to_have_text("1,950 of 2,000 characters")
    expect(counter).to_have_class("char-count help near-limit")

    # A client that ignores maxlength still gets a refusal that says what is wrong.
    note.evaluate("el => el.removeAttribute('maxlength')")
    note.fill("x" * 2100)
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#decision-errors")).to_contain_text(
        "note: 2,100 characters, over the limit of 2,000"
    )
    expect(page).to_have_url(address)
    assert page.evaluate("document.activeElement.name") == "note"
    assert not Decision.objects.exists()


def test_error_pages_use_the_portal_layout(live, login, support_agent):
    page = login(support_agent, start="/queue/")

    expect(page.locator("#error-reason")).to_have_text("The review queue is for reviewers.")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
