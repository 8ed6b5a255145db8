"""A live portal for the browser tests: the real ASGI server (daphne, via runserver) in a
subprocess on the test database, with a worker running the agents.

On SQLite (and without REDIS_URL) the server's embedded worker runs the agents and the
in-memory channel layer carries the stream. With REDIS_URL set (CI's PostgreSQL pass),
the embedded worker is off by default, so a ``manage.py run_worker`` process runs beside
the server and both talk through Redis, as in production.

Tests use ``transactional_db``: what they write is committed, so the server sees it, and
the tables are emptied after each test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.browser.csp import VIOLATIONS, watch_csp
from tests.processes import database_env, free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "screenshots"
DOCS_SHOTS = ROOT / "docs" / "screenshots"
TIMEOUT_MS = 15_000
QUORUM_POLICY = '{"two-person:*": {"approvals_required": 2}}'


def pytest_collection_modifyitems(config, items):
    # Browser tests run last: Playwright's sync API keeps an event loop running in the
    # main thread until the session ends, which Django's ORM would take for async code.
    here = str(Path(__file__).parent)
    mine = [item for item in items if str(item.path).startswith(here)]
    for item in mine:
        item.add_marker(pytest.mark.browser)
        item.add_marker(pytest.mark.slow)
    items[:] = [item for item in items if item not in mine] + mine


@pytest.fixture(autouse=True)
def _orm_beside_playwright(monkeypatch):
    # The ORM calls in these tests are plain synchronous code; Playwright's loop in the
    # same thread is not theirs. Set first, undone last (after the database teardown).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


# Start-up takes seconds alone, but on a machine shared with other test runs it has taken
# more than 30; a server that died is still reported at once.
def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the live server exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    pytest.fail(
        f"the live server did not answer {url} within {timeout}s:\n{log.read_text()[-3000:]}"
    )


@pytest.fixture(scope="session", autouse=True)
def flush_again_after_a_deadlock() -> Iterator[None]:
    """Each test's data is flushed while the session's server and worker go on querying:
    PostgreSQL may find the flush's table locks and a worker's claim deadlocked and cancel
    the flush. The other side finishes, so the flush is tried again."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    handle = flush.Command.handle

    def retrying(self, *args, **options):
        for attempt in range(3):
            try:
                return handle(self, *args, **options)
            except CommandError as exc:
                if attempt == 2 or "deadlock detected" not in str(exc.__cause__):
                    raise
                time.sleep(0.1)
        return None

    flush.Command.handle = retrying
    yield
    flush.Command.handle = handle


@pytest.fixture(scope="session")
def live_portal(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """The base URL of a running portal (server + worker) on the test database."""
    from django.conf import settings

    with django_db_blocker.unblock():
        skip = ("DATABASE_URL", "SQLITE_PATH", "PORTAL_NO_WORKER", "PORTAL_EMBEDDED_WORKER")
        env = {k: v for k, v in os.environ.items() if k not in skip}
        env.update(database_env())
    env.update({"PYTHONUNBUFFERED": "1", "PORTAL_MODEL": "scripted", "DEBUG": "1"})
    env["PORTAL_ALLOW_PRIVATE_TARGETS"] = "1"  # webhook receivers listen on loopback
    # Requests of the agent "two-person" need two approvers (tests/browser/test_quorum.py);
    # no other agent is touched.
    env.setdefault("PORTAL_POLICIES_EXTRA", QUORUM_POLICY)
    logs = tmp_path_factory.mktemp("live")
    port = free_port()
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = logs / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc, log

    server, log = start("server", "runserver", "--noreload", f"127.0.0.1:{port}")
    if not settings.PORTAL_EMBEDDED_WORKER:
        start("worker", "run_worker")
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base + "/healthz", server, log)
        yield base
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def live(live_portal, transactional_db) -> str:
    from playwright.sync_api import expect

    # A shared two-core machine can take a few seconds to run an agent.
    expect.set_options(timeout=TIMEOUT_MS)
    return live_portal


# The checks of every role's pages run a test per role, so the test workers share them
# out: each role here with the fixture of its user (``role_user``).
ROLE_USERS = {
    "support": "support_agent",
    "reviewer": "reviewer",
    "auditor": "auditor",
    "admin": "admin_user",
}


@pytest.fixture
def role_user(request, role):
    """The user of the test's ``role`` parameter, a key of ``ROLE_USERS``."""
    return request.getfixturevalue(ROLE_USERS[role])


@pytest.fixture
def login(browser, live) -> Callable[..., object]:
    """``login(user)`` -> a logged-in Page in a fresh browser context of its own. Every
    page it opens is watched for Content-Security-Policy violations, and a test that
    caused one fails at teardown."""
    contexts = []

    def open_as(user, *, start: str = "/") -> object:
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        watch_csp(context)
        page = context.new_page()
        page.goto(f"{live}/login/?next={quote(start)}")
        page.get_by_label("Username").fill(user.get_username())
        page.get_by_label("Password").fill("pw-" + user.get_username())
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()
        return page

    yield open_as
    violations = [v for context in contexts for v in VIOLATIONS.pop(id(context._impl_obj), [])]
    for context in contexts:
        context.close()
    assert violations == [], "Content-Security-Policy violations:\n" + "\n".join(violations)


@pytest.fixture
def shoot() -> Callable[[object, str], None]:
    """Save a screenshot to artifacts/screenshots (git-ignored). With
    PORTAL_UPDATE_SCREENSHOTS=1 also refresh the committed copies in docs/screenshots, so a
    plain test run never leaves the work tree dirty."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(page, name: str) -> None:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=False)
        if os.environ.get("PORTAL_UPDATE_SCREENSHOTS") == "1":
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_SHOTS / path.name)

    return save


def settle(page) -> None:
    """Wait until the page has loaded (its "load" event: every script, style and image the
    document named) and what it reported on the way (a CSP violation, a console line)
    has reached the test: one more task in the page and a round trip to it. Playwright's
    "networkidle" would add half a second of quiet to every page instead."""
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise((done) => setTimeout(done))")


def wait_live(page) -> None:
    """Wait until the page's websocket is open (so nothing published next is missed)."""
    page.wait_for_selector("[data-live-status][data-state=open]")


def mark_page(page) -> None:
    """Tag the loaded document; ``assert_not_reloaded`` fails if it was replaced since."""
    page.evaluate("window.__sameDocument = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


@pytest.fixture(autouse=True)
def fast_password_hashing():
    """Not here: the live servers these tests log in to check passwords with the hashers
    the settings name, so the tests' users are hashed with those too."""
