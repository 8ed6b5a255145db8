"""The decision page's controls in real Chromium: the answers a request declares, the
argument editor, options as checkboxes and a Markdown description."""

from __future__ import annotations

from playwright.sync_api import expect

from agents import inbox
from portal.models import Decision
from tests.factories import make_interrupt, make_tool_approval

REFUND_ARGS = {"order_id": "A-1001", "amount": 42.5}
REFUND_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
OPTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "channels": {
            "type": "array",
            "title": "Notify by",
            "items": {"enum": ["email", "sms", "post"]},
        }
    },
    "required": ["channels"],
    "additionalProperties": False,
}


def test_the_form_offers_only_the_declared_answers_and_an_edit_reaches_the_decision(
    live, login, reviewer, shoot
):
    schema = inbox.response_schema(
        ["accept", "edit", "response"], args=REFUND_ARGS, args_schema=REFUND_PARAMETERS
    )
    interrupt = make_interrupt(
        schema=schema,
        reason="refund",
        message="Refund **$42.50** for order `A-1001`? <script>document.title='owned'</script>",
    )
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    # Markdown renders; the script is text.
    expect(page.locator(".request-message strong")).to_have_text("$42.50")
    expect(page.locator(".request-message")).to_contain_text("<script>")
    assert page.title() != "owned"
    expect(form.get_by_role("button", name="Accept", exact=True)).to_be_visible()
    expect(form.get_by_role("button", name="Ignore")).to_have_count(0)
    expect(form.get_by_role("button", name="Approve")).to_have_count(0)
    expect(form.get_by_role("button", name="Reject")).to_have_count(0)

    form.get_by_text("Edit arguments").click()
    amount = form.get_by_label("Amount")
    expect(amount).to_have_value("42.5")
    amount.fill("10")
    shoot(page, "decision-inbox-edit")
    form.get_by_role("button", name="Accept with these arguments").click()

    expect(page.locator("#decision-result")).to_contain_text("Approved with edited arguments")
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"type": "edit", "args": {"order_id": "A-1001", "amount": 10}}
    assert decision.executed_args == {interrupt.tool_call_id: {"order_id": "A-1001", "amount": 10}}


def test_a_response_is_sent_as_text_and_recorded_as_responded(live, login, reviewer):
    schema = inbox.response_schema(["accept", "response", "ignore"])
    interrupt = make_interrupt(schema=schema, reason="refund")
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    expect(form.get_by_role("button", name="Ignore")).to_be_visible()
    expect(form.get_by_text("Edit arguments")).to_have_count(0)
    form.get_by_text("Respond instead").click()
    form.get_by_label("Your response").fill("Ask for a photo of the damage first.")
    form.get_by_role("button", name="Send response").click()

    expect(page.locator("#decision-result")).to_contain_text("Answered in words instead")
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"type": "response", "args": "Ask for a photo of the damage first."}


def test_options_are_checkboxes_and_the_ticked_ones_are_the_answer(live, login, reviewer, shoot):
    interrupt = make_interrupt(
        schema=OPTIONS_SCHEMA, reason="input_required", message="How should we tell them?"
    )
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    expect(form.locator("textarea[name='value.channels']")).to_have_count(0)
    expect(form.get_by_role("checkbox")).to_have_count(3)
    form.get_by_label("email").check()
    form.get_by_label("post").check()
    shoot(page, "decision-options")
    form.get_by_role("button", name="Submit decision").click()

    expect(page.locator("#decision-result")).to_be_visible()
    assert Decision.objects.get(interrupt=interrupt).value == {"channels": ["email", "post"]}


def test_a_high_risk_tool_approval_is_a_form_of_the_four_answers_and_an_edit_is_recorded(
    live, login, reviewer, auditor, shoot
):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    expect(form.get_by_role("button", name="Accept", exact=True)).to_be_visible()
    expect(form.get_by_role("button", name="Ignore", exact=True)).to_be_visible()
    expect(form.get_by_role("button", name="Reject")).to_have_count(0)
    expect(form.get_by_text("Respond instead")).to_be_visible()
    form.get_by_text("Edit arguments").click()
    # The call's section is titled by its tool in words, never by its call id.
    expect(form).to_contain_text("Transfer funds")
    expect(form).not_to_contain_text(call_id)
    amount = form.get_by_label("Amount")
    expect(amount).to_have_value("5000.0")
    amount.fill("4000")
    # The whole page in one picture: the request beside its four answers.
    page.set_viewport_size({"width": 1280, "height": 1480})
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, "decision-tool-approval")
    form.get_by_role("button", name="Accept with these arguments").click()

    expect(page.locator("#decision-result")).to_contain_text("Approved with edited arguments")
    decision = Decision.objects.get(interrupt=interrupt)
    edited = {"amount": 4000, "recipient": "Alice"}
    assert decision.value == {"type": "edit", "args": {call_id: edited}}
    assert decision.executed_args == {call_id: edited}

    # The history's record of it reads in words.
    record = login(auditor, start=f"/history/{decision.pk}/")
    expect(record.locator("h1")).to_contain_text("Approved with edited arguments")
    ran = "Transfer funds (amount: $4,000.00, recipient: Alice)"
    expect(record.locator("main")).to_contain_text(ran)
    shoot(record, "history-decision")


def test_a_response_to_a_high_risk_tool_approval_declines_it_with_the_text(live, login, reviewer):
    interrupt = make_tool_approval()
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    form.get_by_text("Respond instead").click()
    form.get_by_label("Your response").fill("Send $500 now and the rest after the invoice.")
    form.get_by_role("button", name="Send response").click()

    expect(page.locator("#decision-result")).to_contain_text("Answered in words instead")
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {
        "type": "response",
        "args": "Send $500 now and the rest after the invoice.",
    }
    assert decision.outcome == Decision.Outcome.RESPONDED and decision.executed_args is None


def test_ignoring_a_high_risk_tool_approval_is_recorded_as_ignored_not_rejected(
    live, login, reviewer
):
    interrupt = make_tool_approval()
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    form = page.locator("#decision-form")

    form.get_by_label("Note").fill("Not a payment we make.")
    form.get_by_role("button", name="Ignore", exact=True).click()

    expect(page.locator("#decision-result")).to_contain_text("Ignored")
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"type": "ignore", "note": "Not a payment we make."}
    assert decision.outcome == Decision.Outcome.IGNORED and decision.executed_args is None
