"""The reviewer's day in Chromium: nothing typed is lost, refusals carry a reason, the
buttons speak the request's own vocabulary (only a refusal is red), a refund's amount is
edited, and the queue keeps moving (lapsed claims, Next request, Escape)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from agents.examples.refunds import refund_schema
from portal.models import Decision, Interrupt
from tests.browser.conftest import assert_not_reloaded, mark_page, wait_live
from tests.factories import admin_change_url, make_interrupt, make_tool_approval

RED = "rgb(179, 38, 30)"


def background(locator) -> str:
    return locator.evaluate("(el) => getComputedStyle(el).backgroundColor")


# --- 1. nothing typed is lost -----------------------------------------------------------


def test_a_typed_response_is_not_thrown_away_by_accept(live, login, reviewer, support_agent):
    interrupt = make_tool_approval(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")
    form.get_by_text("Respond instead").click()
    form.get_by_label("Your response").fill("Send $500 now and the rest later.")

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    form.get_by_role("button", name="Accept", exact=True).click()

    # Asked first; kept on "no", and nothing recorded.
    expect(form.get_by_label("Your response")).to_have_value("Send $500 now and the rest later.")
    assert asked and "You wrote a response" in asked[0]
    assert not Decision.objects.filter(interrupt=interrupt).exists()

    # On "yes" the response is discarded on purpose and the accept recorded.
    page.once("dialog", lambda dialog: dialog.accept())
    form.get_by_role("button", name="Accept", exact=True).click()
    expect(page.locator("#decision-result")).to_contain_text("Approved")
    assert Decision.objects.get(interrupt=interrupt).value == {"type": "accept"}


def test_a_typed_response_is_not_thrown_away_in_the_admin_either(
    live, login, admin_user, support_agent
):
    interrupt = make_tool_approval(owner=support_agent)
    page = login(admin_user, start=admin_change_url(interrupt))
    form = page.locator("#admin-decision #decision-form")
    form.get_by_text("Respond instead").click()
    form.get_by_label("Your response").fill("Only half, please.")

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    form.get_by_role("button", name="Accept", exact=True).click()

    expect(form.get_by_label("Your response")).to_have_value("Only half, please.")
    assert asked and "You wrote a response" in asked[0]
    assert not Decision.objects.filter(interrupt=interrupt).exists()


def test_changed_arguments_are_not_thrown_away_by_the_keyboard_either(
    live, login, reviewer, support_agent
):
    interrupt = make_tool_approval(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")
    form.get_by_text("Edit arguments").click()
    form.get_by_label("Amount").fill("4000")
    page.keyboard.press("Escape")  # leave the field, then a is a shortcut again

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.keyboard.press("a")

    expect(form.get_by_label("Amount")).to_have_value("4000")
    assert asked and "changed arguments" in asked[0]
    assert not Decision.objects.filter(interrupt=interrupt).exists()


# --- 2. refusals carry a reason ---------------------------------------------------------


def test_an_empty_rejection_is_refused_at_the_note_and_a_reason_reaches_the_result(
    live, login, reviewer, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")
    expect(form).to_contain_text("If you reject, the agent and whoever asked read the note")

    form.get_by_role("button", name="Reject").click()

    note_field = page.locator("#decision-form .field.has-errors")
    expect(note_field).to_contain_text("a rejection needs a reason")
    expect(page.locator('#decision-form [name="note"]')).to_be_focused()
    assert not Decision.objects.filter(interrupt=interrupt).exists()

    page.locator('#decision-form [name="note"]').fill("Outside the return window.")
    page.locator("#decision-form").get_by_role("button", name="Reject").click()
    expect(page.locator("#decision-result")).to_contain_text("Outside the return window.")


# --- 7. one vocabulary, colours by consequence, and the refund's amount -------------------


def test_only_a_refusal_is_red_and_the_note_speaks_of_the_answer_offered(
    live, login, reviewer, support_agent
):
    approval = make_interrupt(owner=support_agent)
    typed = make_tool_approval(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{approval.pk}/")
    reject = page.locator("#decision-form").get_by_role("button", name="Reject")
    assert background(reject) == RED

    page.goto(f"{live}/interrupts/{typed.pk}/")
    form = page.locator("#decision-form")
    ignore = form.get_by_role("button", name="Ignore", exact=True)
    assert background(ignore) != RED
    expect(form).to_contain_text("If you ignore it, the agent")
    expect(form).not_to_contain_text("rejection")


def test_a_refund_amount_is_edited_within_its_cap(live, login, reviewer, support_agent, shoot):
    interrupt = make_interrupt(owner=support_agent, schema=refund_schema(42.5))
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")
    expect(form.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    form.get_by_text("Edit arguments").click()
    amount = form.get_by_label("Amount")
    expect(amount).to_have_value("42.5")

    amount.fill("100")
    page.once("dialog", lambda dialog: dialog.dismiss())
    form.get_by_role("button", name="Approve with these arguments").click()
    expect(page.locator("#decision-form")).to_contain_text("greater than the maximum of 42.5")
    assert not Decision.objects.filter(interrupt=interrupt).exists()

    page.locator("#decision-form").get_by_label("Amount").fill("20")
    shoot(page, "decision-refund-edit")
    page.locator("#decision-form").get_by_role(
        "button", name="Approve with these arguments"
    ).click()
    expect(page.locator("#decision-result")).to_contain_text("Approved with edited arguments")
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.executed_args == {interrupt.tool_call_id: {"order_id": "A-1001", "amount": 20}}


# --- 9. a queue that keeps moving ---------------------------------------------------------


def test_escape_leaves_the_note_so_r_is_a_shortcut_again(live, login, reviewer, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    note = page.locator('#decision-form [name="note"]')
    page.keyboard.press("n")
    page.keyboard.type("Wrong order")
    page.keyboard.press("Escape")
    expect(note).not_to_be_focused()

    page.keyboard.press("r")

    expect(page.locator("#decision-result")).to_contain_text("Rejected")
    assert Decision.objects.get(interrupt=interrupt).note == "Wrong order"


def test_after_a_decision_next_request_opens_the_oldest_one_left_by_keyboard(
    live, login, reviewer, second_reviewer, support_agent
):
    first = make_interrupt(owner=support_agent, message="Approve refund one?")
    held = make_interrupt(owner=support_agent, message="Approve refund two?")
    Interrupt.objects.filter(pk=held.pk).update(
        claimed_by=second_reviewer, claimed_at=timezone.now()
    )
    third = make_interrupt(owner=support_agent, message="Approve refund three?")
    page = login(reviewer, start=f"/interrupts/{first.pk}/")

    page.locator("#decision-form").get_by_role("button", name="Approve").click()
    expect(page.locator("#decision-result")).to_be_visible()
    expect(page.locator("#asking-calls-title")).to_have_text("The tool call that was waiting")
    expect(page.get_by_role("link", name="Next request")).to_be_visible()

    page.keyboard.press("N")  # Shift+N

    expect(page).to_have_url(f"{live}/interrupts/{third.pk}/")  # the held one is skipped


def test_a_lapsed_claim_says_so_and_leaves_the_form_open(
    live, login, reviewer, second_reviewer, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    lapsed = timezone.now() - timedelta(minutes=20)
    Interrupt.objects.filter(pk=interrupt.pk).update(claimed_by=second_reviewer, claimed_at=lapsed)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")

    expect(page.locator("#claim-lapsed")).to_contain_text("Anyone may claim this request")
    expect(page.locator("#decision-form").get_by_role("button", name="Approve")).to_be_enabled()
    page.locator("#decision-claim").get_by_role("button", name="Claim").click()
    expect(page.locator("#claim-lapses")).to_contain_text("claims last 15 minutes")


def test_a_claim_that_lapses_shows_in_an_open_queue_without_a_reload(
    live, login, reviewer, second_reviewer, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    mark_page(queue)
    row = queue.locator(f"#q-{interrupt.pk}")
    # Claimed 15 minutes ago less two seconds: it lapses while the queue is open.
    almost = timezone.now() - timedelta(minutes=15) + timedelta(seconds=2)
    Interrupt.objects.filter(pk=interrupt.pk).update(claimed_by=second_reviewer, claimed_at=almost)
    queue.reload()  # the claim, as it stands now
    wait_live(queue)
    mark_page(queue)
    expect(row.locator(".queue-claim")).to_contain_text(second_reviewer.get_username())
    expect(row.locator(".queue-claim")).not_to_contain_text("lapsed")

    expect(row.locator(".queue-claim")).to_contain_text("claim lapsed", timeout=20_000)
    expect(row.get_by_role("button", name="Claim")).to_be_visible()
    assert_not_reloaded(queue)
