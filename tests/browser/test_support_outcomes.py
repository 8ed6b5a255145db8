"""Support reads outcomes in Chromium: a withdrawn transfer is said as withdrawn (never
"the reviewer declined"), the list names it so, and on a phone the open chat comes first."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from portal.models import Thread
from tests.browser.conftest import wait_live


def _start(page, live: str, agent: str, message: str) -> Thread:
    page.goto(f"{live}/chat/")
    page.locator(f"input[name=agent][value={agent}]").check()
    page.get_by_role("textbox", name="Message").fill(message)
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
    return Thread.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[1])


def test_a_withdrawn_transfer_is_said_as_withdrawn_not_as_a_reviewers_no(
    live, login, shoot, support_agent
):
    chat = login(support_agent, start="/chat/")
    _start(chat, live, "transfers", "Transfer $5,000 to Alice.")
    expect(chat.locator("#waiting-notice")).to_contain_text("Approve transfer of $5,000.00")
    wait_live(chat)

    chat.get_by_role("button", name="Withdraw this request").click()
    chat.get_by_role("button", name="Yes, withdraw it").click()

    transcript = chat.locator("#transcript")
    expect(transcript).to_contain_text("withdrawn before a reviewer decided")
    expect(transcript).not_to_contain_text("declined")
    expect(chat.locator(".chat-recent [aria-current] .tag")).to_have_text("Withdrawn by you")
    chat.reload()
    expect(chat.locator(".chat-recent [aria-current] .tag")).to_have_text("Withdrawn by you")
    shoot(chat, "chat-withdrawn")


def test_on_a_phone_the_open_chat_comes_before_the_list(live, login, shoot, support_agent):
    chat = login(support_agent, start="/chat/")
    _start(chat, live, "refunds", "Refund $42.50 for order A-1001, it arrived broken.")
    chat.set_viewport_size({"width": 390, "height": 844})
    chat.reload()

    conversation = chat.locator(".chat-main h1").bounding_box()
    listed = chat.get_by_role("heading", name="Your conversations").bounding_box()
    assert conversation and listed
    assert conversation["y"] < listed["y"], (conversation, listed)
    expect(chat.locator(".chat-main h1")).to_be_in_viewport()
    shoot(chat, "chat-phone")
