"""Every page at a phone's width and under a screen reader's eyes: real Chromium visits
each page as the role that uses it, at 390 px, and checks that nothing is wider than the
screen (Log out included) and that axe-core finds no serious or critical violation."""

from __future__ import annotations

import pytest

from tests.browser.a11y import PHONE, axe_violations, overflow
from tests.browser.conftest import ROLE_USERS, TIMEOUT_MS, settle, wait_live
from tests.browser.csp import watch_csp
from tests.factories import make_decision, make_interrupt, make_tool_approval

LONG_NOTE = (
    "Checked the order history and the courier's photo: the parcel was crushed in transit, "
    "so a full refund is fair. Flagged the courier account for a follow-up review."
)


@pytest.fixture
def pages(live, support_agent, reviewer):
    pending = make_interrupt(owner=support_agent)
    approval = make_tool_approval(owner=support_agent)
    make_interrupt(
        owner=support_agent,
        agent="support",
        reason="question",
        message="The customer asks whether a replacement can ship to a different address "
        "than the one on the original order; which address should I confirm with them?",
    )
    decided = make_interrupt(owner=support_agent)
    decision = make_decision(interrupt=decided, reviewer=reviewer, note=LONG_NOTE)
    thread = pending.thread_id
    return {
        "support": [
            "/",
            "/chat/",
            f"/chat/{thread}/",
            "/threads/",
            f"/threads/{thread}/",
            "/queue/",  # refused: 403
        ],
        "reviewer": [
            "/",
            "/queue/",
            f"/interrupts/{pending.pk}/",
            f"/interrupts/{approval.pk}/",
            f"/interrupts/{decided.pk}/",
            f"/threads/{thread}/",
            "/history/",
            f"/history/{decision.pk}/",
            "/metrics/",
            # No 404 here: with DEBUG on (as this live server runs) Django answers a 404
            # with its own debug page, not the portal's.
        ],
        "auditor": ["/", f"/interrupts/{pending.pk}/", "/history/", "/metrics/"],
        "admin": ["/admin/"],
    }


def _problems(live, login, user, paths, check) -> list[str]:
    """What ``check`` finds on each of ``paths`` at phone width, as ``user``, each line
    naming its page."""
    page = login(user)
    page.set_viewport_size(PHONE)
    problems = []
    for path in paths:
        response = page.goto(live + path)
        assert response is not None and response.status < 500, path
        settle(page)
        if page.locator("[data-live-status]").count():
            wait_live(page)
        problems += [f"{path} ({response.status}): {p}" for p in check(page)]
    return problems


def _login_page(browser, live):
    context = browser.new_context(viewport=PHONE)
    context.set_default_timeout(TIMEOUT_MS)
    found = watch_csp(context)
    page = context.new_page()
    page.goto(live + "/login/")
    return context, page, found


def test_the_login_page_fits_a_phone_and_has_no_serious_accessibility_violation(live, browser):
    context, page, csp = _login_page(browser, live)
    try:
        problems = [f"{p}" for p in overflow(page)] + [f"{p}" for p in axe_violations(page)]
        assert csp == [], csp
    finally:
        context.close()
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("role", ROLE_USERS)
def test_no_page_is_wider_than_a_phone_screen_and_log_out_stays_in_view(
    live, login, pages, role, role_user
):
    problems = _problems(live, login, role_user, pages[role], overflow)
    assert problems == [], f"as {role}:\n" + "\n".join(problems)


@pytest.mark.parametrize("role", ROLE_USERS)
def test_no_page_has_a_serious_or_critical_accessibility_violation(
    live, login, pages, role, role_user
):
    problems = _problems(live, login, role_user, pages[role], axe_violations)
    assert problems == [], f"as {role}:\n" + "\n".join(problems)
