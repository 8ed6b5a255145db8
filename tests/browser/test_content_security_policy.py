"""Every page passes the Content-Security-Policy: real Chromium visits each page as each
role and no page reports a violation (no inline script, handler, style or eval)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import expect

from portal.reviews.decisions import decision_submit
from tests.browser.conftest import ROLE_USERS, TIMEOUT_MS, settle, wait_live
from tests.browser.csp import csp_violations, watch_csp
from tests.factories import admin_change_url, make_interrupt, make_tool_approval


@pytest.fixture
def data(live, support_agent, reviewer):
    pending = make_interrupt(owner=support_agent)
    approval = make_tool_approval(owner=support_agent)
    decided = make_interrupt(owner=support_agent)
    decision = decision_submit(
        interrupt=decided,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=decided.pk,
    )
    return {
        "pending": pending,
        "approval": approval,
        "thread": pending.thread_id,
        "decision": decision.pk,
    }


def _visit(page, live: str, path: str, *, status: int = 200, live_page: bool = False) -> None:
    response = page.goto(live + path)
    assert response is not None and response.status == status, f"{path}: {response.status}"
    settle(page)
    assert csp_violations(page) == [], path
    if live_page and page.locator("[data-live-status]").count():
        wait_live(page)
        assert csp_violations(page) == [], path


def _pages(data) -> dict[str, list[tuple[str, bool]]]:
    pending, approval, thread, decision = (
        data["pending"].pk,
        data["approval"].pk,
        data["thread"],
        data["decision"],
    )
    common = ["/"]
    reader = [
        "/threads/",
        f"/threads/{thread}/",
        f"/interrupts/{pending}/",
        f"/interrupts/{approval}/",
        "/history/",
        "/history/?agent=refunds&outcome=approved",
        f"/history/{decision}/",
        "/metrics/",
    ]
    audit = ["/history/actions/", "/history/actions/?action=login&actor=system"]
    admin = [
        "/admin/",
        "/admin/portal/interrupt/",
        admin_change_url(data["pending"]),
        admin_change_url(data["approval"]),
        "/admin/portal/decision/",
        f"/admin/portal/decision/{decision}/change/",
        "/admin/portal/thread/",
        f"/admin/portal/thread/{thread}/change/",
        "/admin/portal/run/",
        "/admin/portal/apitoken/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
        "/admin/auth/group/",
    ]
    live_paths = {"/queue/", f"/chat/{thread}/", f"/threads/{thread}/"}
    live_paths |= {f"/interrupts/{pending}/", f"/interrupts/{approval}/"}

    def mark(paths):
        return [(p, p in live_paths) for p in paths]

    return {
        "support": mark(
            [*common, "/chat/", f"/chat/{thread}/", "/threads/", f"/threads/{thread}/"]
        ),
        "reviewer": mark([*common, "/queue/", *reader]),
        "auditor": mark([*common, *reader, *audit]),
        "admin": mark([*common, "/queue/", *reader, *audit, *admin]),
    }


@pytest.mark.parametrize("role", ROLE_USERS)
def test_no_page_reports_a_csp_violation_for_any_role(live, login, data, role, role_user):
    page = login(role_user)
    assert csp_violations(page) == [], role
    for path, live_page in _pages(data)[role]:
        _visit(page, live, path, live_page=live_page)


def test_deciding_from_the_page_and_the_admin_reports_no_csp_violation(
    live, login, data, reviewer, admin_user
):
    page = login(reviewer, start=f"/interrupts/{data['pending'].pk}/")
    page.get_by_role("button", name="Approve").first.click()
    settle(page)
    assert "Recorded" in page.content()
    assert csp_violations(page) == []

    admin = login(admin_user, start=admin_change_url(data["approval"]))
    admin.locator("#admin-decision").get_by_label("Note").fill("Not a payment we make.")
    admin.locator("#admin-decision").get_by_role("button", name="Ignore").first.click()
    settle(admin)
    assert "Recorded" in admin.content()
    assert csp_violations(admin) == []


@contextmanager
def _watched_page(browser) -> Iterator[tuple[Any, list[str]]]:
    """A page in a fresh context of its own, and the CSP violations its pages report."""
    context = browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    found = watch_csp(context)
    try:
        yield context.new_page(), found
    finally:
        context.close()


def test_the_login_pages_and_the_api_docs_report_no_csp_violation(live, browser):
    with _watched_page(browser) as (page, found):
        for path in ["/login/", "/admin/login/", "/api/docs"]:
            response = page.goto(live + path)
            assert response is not None and response.status == 200, path
            settle(page)
            assert found == [], path
        # The docs really rendered (their scripts fetched the schema and ran): the
        # operations are listed, and drawing them broke nothing either.
        expect(page.locator(".opblock").first).to_be_visible()
        assert page.locator(".opblock").count() >= 5
        assert found == [], "/api/docs"
        # A wrong password shows the form again, still without a violation.
        page.goto(live + "/login/")
        page.get_by_label("Username").fill("nobody")
        page.get_by_label("Password").fill("wrong")
        page.get_by_role("button", name="Log in").click()
        settle(page)
        assert found == []


def test_a_page_served_with_inline_script_and_style_has_reported_both_once_settled(live, browser):
    # What the walks above rely on: by the time settle() returns, a page served under the
    # portal's own policy has reported what it broke, with no pause of the test's own.
    with _watched_page(browser) as (page, found):
        response = page.goto(live + "/login/")
        assert response is not None
        policy = response.headers["content-security-policy"]
        body = "<!doctype html><p style='color: red'>x</p><script>window.ran = 1</script>"
        page.route(
            live + "/csp-probe/",
            lambda route: route.fulfill(
                status=200,
                headers={"content-type": "text/html", "content-security-policy": policy},
                body=body,
            ),
        )
        page.goto(live + "/csp-probe/")
        settle(page)
        assert page.evaluate("window.ran === undefined")
        assert any("script-src" in v for v in found), found
        assert any("style-src" in v for v in found), found


def test_a_blocked_inline_script_would_be_reported(live, browser):
    # The watch itself works: an inline script added to a page is refused and recorded.
    with _watched_page(browser) as (page, found):
        page.goto(live + "/login/")
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.ran = 1'; document.body.append(s); }"
        )
        page.wait_for_timeout(300)
        assert page.evaluate("window.ran === undefined")
        assert any("script-src" in v for v in found), found
