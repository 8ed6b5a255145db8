"""The 403, 404 and 500 pages as production serves them: a real server with DEBUG off
(static files collected and served by WhiteNoise under hashed names), visited in Chromium.
Each page has the portal's layout, its stylesheet really applies, it says why, and it
reports no Content-Security-Policy violation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from tests.browser.conftest import ROOT, TIMEOUT_MS, _wait_until_up, settle
from tests.browser.csp import watch_csp
from tests.processes import database_env, free_port

SETTINGS = "tests.browser.debug_off_settings"

# One live server for the module: its tests stay on one xdist worker (make test: loadgroup).
pytestmark = pytest.mark.xdist_group("debug_off_portal")


@pytest.fixture(scope="module")
def debug_off_portal(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """The base URL of a portal running with DEBUG off on the test database."""
    with django_db_blocker.unblock():
        skip = ("DATABASE_URL", "SQLITE_PATH", "PORTAL_NO_WORKER", "PORTAL_EMBEDDED_WORKER")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in skip and not k.startswith(("DJANGO_", "SECURE_"))
        }
        env.update(database_env())
    logs = tmp_path_factory.mktemp("debug-off")
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "DEBUG": "0",
            "SECRET_KEY": "a-test-only-secret-key-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1",
            "CSRF_TRUSTED_ORIGINS": "",
            "SECURE_SSL_REDIRECT": "0",
            "PORTAL_EMBEDDED_WORKER": "0",  # the error pages run no agent
            "PORTAL_MODEL": "scripted",
            "PORTAL_TEST_STATIC_ROOT": str(logs / "static"),
        }
    )
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    port = free_port()
    log = logs / "server.log"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base + "/healthz", server, log)
        yield base
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def visit(debug_off_portal, browser, transactional_db):
    """``visit(path, user=None)`` -> (status, page), in a fresh context watched for CSP
    violations (the test fails at teardown on any)."""
    contexts: list[tuple[object, list[str]]] = []

    def go(path: str, user=None):
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append((context, watch_csp(context)))
        page = context.new_page()
        if user is not None:
            page.goto(f"{debug_off_portal}/login/?next={quote('/')}")
            page.get_by_label("Username").fill(user.get_username())
            page.get_by_label("Password").fill("pw-" + user.get_username())
            page.get_by_role("button", name="Log in").click()
            page.wait_for_load_state()
            assert page.get_by_role("button", name="Log out").count() == 1, page.content()
        response = page.goto(debug_off_portal + path)
        assert response is not None
        settle(page)
        return response.status, page

    yield go
    violations = [v for _, found in contexts for v in found]
    for context, _ in contexts:
        context.close()  # type: ignore[attr-defined]
    assert violations == [], "Content-Security-Policy violations:\n" + "\n".join(violations)


def _assert_styled(page) -> None:
    # The layout is there, and the portal's stylesheet (collected, hashed, served by
    # WhiteNoise) was loaded and applies: the brand is not drawn as a plain link.
    assert page.locator("a.brand").inner_text() == "Reviewer portal"
    assert page.evaluate(
        "[...document.styleSheets].some(s => /\\/static\\/portal\\/portal\\.[0-9a-f]{12}\\.css$/"
        ".test(s.href || '') && s.cssRules.length > 0)"
    ), "the portal's stylesheet did not load"
    decoration = page.evaluate(
        "getComputedStyle(document.querySelector('a.brand')).textDecorationLine"
    )
    assert decoration == "none"


def test_an_unknown_address_gets_the_styled_404_naming_the_path(visit):
    status, page = visit("/no/such/page/")

    assert status == 404
    _assert_styled(page)
    assert "There is no page at /no/such/page/." in page.inner_text("main")


def test_a_thread_you_cannot_see_gets_the_styled_404_with_the_navigation(visit, reviewer):
    status, page = visit("/threads/00000000-0000-0000-0000-000000000000/", user=reviewer)

    assert status == 404
    _assert_styled(page)
    assert page.get_by_role("navigation", name="Main").count() == 1
    assert page.get_by_role("button", name="Log out").is_visible()
    assert "No such thread" in page.inner_text("main")


def test_a_page_your_role_may_not_open_gets_the_styled_403_saying_why(visit, support_agent):
    status, page = visit("/queue/", user=support_agent)

    assert status == 403
    _assert_styled(page)
    assert page.get_by_role("navigation", name="Main").count() == 1
    assert "The review queue is for reviewers." in page.inner_text("main")


def test_a_fault_gets_the_styled_500(visit):
    status, page = visit("/test-fault/")

    assert status == 500
    _assert_styled(page)
    assert "Something went wrong on our side" in page.inner_text("main")
    assert "RuntimeError" not in page.content()  # no traceback with DEBUG off
