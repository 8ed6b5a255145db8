"""An agent outside the portal, reviewed in a real browser: its request arrives live in an
open queue, a reviewer decides it on the page, and the agent gets the answer by a signed
webhook and by long-poll."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from agents.portal_client import PortalClient
from portal.accounts.tokens import api_token_create
from portal.models import Decision
from portal.notify import outbox
from tests.browser.conftest import assert_not_reloaded, mark_page, wait_live
from tests.factories import make_user
from tests.loopback import WebhookReceiver


def test_an_outside_agents_request_arrives_live_and_its_answer_goes_back(
    live, login, shoot, reviewer, settings
):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # this process delivers to loopback too
    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    mark_page(queue)
    row, token = api_token_create(
        user=make_user("ivy-invoice-bot", role="agent"), scopes=["request"]
    )
    portal = PortalClient(live, token, webhook_secret=row.webhook_secret, timeout=20)
    receiver = WebhookReceiver(row.webhook_secret).start()

    request = portal.raise_request(
        agent="invoice-bot",
        title="Invoice 7 from ACME",
        message="Pay **$120.00** to ACME?",
        payload={"invoice": 7, "vendor": "ACME", "amount": 120},
        actions=["accept", "ignore"],
        external_ref="INV-7",
        callback_url=receiver.url,
    )

    # The open queue shows it without a reload, like any agent's request.
    item = queue.locator(f"#q-{request.id}")
    expect(item).to_be_visible()
    expect(item).to_contain_text("invoice-bot")
    expect(item).to_contain_text("Pay $120.00 to ACME?")  # its Markdown as plain words
    expect(item).not_to_contain_text("**")
    expect(item).to_contain_text("Invoice 7 from ACME")
    expect(item).to_contain_text("asked by ivy-invoice-bot")
    assert_not_reloaded(queue)
    shoot(queue, "external-queue")

    item.get_by_role("link", name="Review", exact=True).click()
    expect(queue).to_have_url(f"{live}/interrupts/{request.id}/")
    queue.get_by_role("button", name="Accept", exact=True).click()
    expect(queue.get_by_text("approved").first).to_be_visible()

    # The answer arrives by webhook, signed with the token's secret, and by long-poll.
    try:
        headers, body = _webhook(receiver)
    finally:
        receiver.stop()
    hooked = portal.verify_webhook(body, headers["portal-signature"])
    done = portal.wait(request.id, timeout=30)
    assert hooked.answer == done.answer
    assert done.status == "decided" and done.answer.goes_ahead  # the agent goes on
    assert done.answer.decided_by == reviewer.username
    assert done.answer.audit_hash == Decision.objects.get(interrupt_id=request.id).hash
    assert receiver.refused == [] and len(receiver.handled) == 1


def _webhook(receiver: WebhookReceiver) -> tuple[dict[str, str], bytes]:
    # The live server's notifier sends it; this process delivers too, for a server run
    # without one (claims are row-locked, so it still arrives once).
    deadline = time.monotonic() + 30
    while not receiver.handled:
        assert time.monotonic() < deadline, "no webhook arrived"
        outbox.outbox_deliver()
        time.sleep(0.2)
    return receiver.requests[-1]
