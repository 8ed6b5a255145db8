"""The production section of docs/deployment.md (once the README's), followed as written
on a fresh copy of the project: real processes (migrate as the owner role, grant_app_role,
collectstatic, daphne with DEBUG=0, a worker) and real Chromium, which loads pages with
their styles and scripts and gets a live update over the websocket.

Only names are changed from the page: the roles, the database, the port and the channel
prefix get this run's own (several test runs share the servers), and createsuperuser runs
without its prompts."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.conftest import CHROMIUM
from tests.processes import free_port
from tests.readme import production_steps

ROOT = Path(__file__).resolve().parent.parent
ADMIN_PASSWORD = "a-long-admin-password-for-the-test"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.postgres,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL: production uses Redis"),
]


def _superuser_connection() -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        dbname="postgres",
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        autocommit=True,
    )


def _fresh_copy(to: Path) -> Path:
    """What a clone of this work tree holds (tracked and new files, nothing ignored: no
    staticfiles/, no database), with the installed .venv beside it."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    (to / ".venv").symlink_to(ROOT / ".venv")
    return to


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[dict[str, object]]:
    steps = production_steps()
    tag = re.sub(r"\W", "", os.environ.get("TEST_DB_SUFFIX", "")) or "run"
    names = {
        "portal_owner": f"portal_owner_readme_{tag}",
        "portal_app": f"portal_app_readme_{tag}",
        "portal": f"portal_readme_{tag}",
    }

    def rename(text: str) -> str:
        text = re.sub(r"\bportal_owner\b", names["portal_owner"], text)
        text = re.sub(r"\bportal_app\b", names["portal_app"], text)
        text = re.sub(r"DATABASE portal\b", f"DATABASE {names['portal']}", text)
        return re.sub(r":5432/portal$", f":5432/{names['portal']}", text)

    def drop(admin: psycopg.Connection) -> None:
        admin.execute(f"DROP DATABASE IF EXISTS {names['portal']} WITH (FORCE)")
        for role in (names["portal_app"], names["portal_owner"]):
            admin.execute(f"DROP ROLE IF EXISTS {role}")

    with _superuser_connection() as admin:
        drop(admin)  # left over from an interrupted run
        for statement in steps.sql:
            admin.execute(rename(statement))
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PORTAL_", "DJANGO_", "SECURE_")) and k not in ("SQLITE_PATH",)
    }
    env.update({name: rename(value) for name, value in steps.env.items()})
    env.update(steps.try_locally)
    env["PORTAL_CHANNEL_PREFIX"] = f"readme-{tag}."
    env.pop("TEST_DB_SUFFIX", None)
    try:
        yield {
            "root": _fresh_copy(tmp_path / "portal"),
            "env": env,
            "port": port,
            "setup": [rename(line) for line in steps.setup],
            "start": [
                rename(line)
                .replace("-p 8000", f"-p {port}")
                .replace("--port 8000", f"--port {port}")
                for line in steps.start
            ],
            "logs": tmp_path,
        }
    finally:
        with _superuser_connection() as admin:
            drop(admin)


def _run(line: str, deployment: dict[str, object], **extra: str) -> str:
    result = subprocess.run(
        ["bash", "-c", line],
        cwd=deployment["root"],
        env={**deployment["env"], **extra},  # type: ignore[dict-item]
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the web server exited:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"the web server did not answer {url}:\n{log.read_text()[-3000:]}")


def test_the_readme_production_profile_serves_pages_with_styles_scripts_and_live_updates(
    deployment,
):
    from playwright.sync_api import expect, sync_playwright

    for line in deployment["setup"]:
        if line.endswith("createsuperuser"):  # the one prompt: answered from the environment
            _run(
                f"{line} --noinput --username boss --email boss@example.com",
                deployment,
                DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
            )
        else:
            out = _run(line, deployment)
            assert "portal.W001" not in out  # the app does not connect as the owner
    root: Path = deployment["root"]  # type: ignore[assignment]
    assert (root / "staticfiles" / "staticfiles.json").exists()

    procs = []
    try:
        for n, line in enumerate(deployment["start"]):
            log = deployment["logs"] / f"start-{n}.log"  # type: ignore[operator]
            procs.append(
                (
                    subprocess.Popen(
                        ["bash", "-c", f"exec {line}"],
                        cwd=root,
                        env=deployment["env"],  # type: ignore[arg-type]
                        stdout=log.open("w"),
                        stderr=subprocess.STDOUT,
                    ),
                    log,
                )
            )
        base = f"http://127.0.0.1:{deployment['port']}"
        _wait_until_up(f"{base}/healthz", *procs[0])

        static: dict[str, int] = {}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(20_000)
            expect.set_options(timeout=20_000)
            page.on(
                "response",
                lambda r: static.__setitem__(r.url, r.status) if "/static/" in r.url else None,
            )
            page.goto(f"{base}/login/")
            page.get_by_label("Username").fill("boss")
            page.get_by_label("Password").fill(ADMIN_PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_load_state()

            page.goto(f"{base}/queue/")
            # Styles and scripts came from WhiteNoise under hashed names, and run.
            assert static, "the page asked for no static file"
            assert set(static.values()) == {200}, static
            css = [url for url in static if url.endswith(".css") and "/portal/" in url]
            assert css and re.search(r"/static/portal/portal\.[0-9a-f]{12}\.css$", css[0]), static
            assert page.evaluate("typeof window.htmx") == "object"
            assert page.evaluate(
                "[...document.styleSheets].some(s => (s.href || '').includes('/static/portal/')"
                " && s.cssRules.length > 0)"
            ), "the portal's stylesheet did not load"
            page.wait_for_selector("[data-live-status][data-state=open]")
            expect(page.locator("#queue-empty")).to_be_visible()

            # A conversation started in another tab pauses in the worker; its request
            # reaches the open queue over Redis and the websocket, without a reload.
            chat = context.new_page()
            chat.goto(f"{base}/chat/")
            chat.locator("input[name=agent][value=refunds]").check()
            chat.get_by_role("textbox", name="Message").fill(
                "Refund $42.50 for order A-1001, it arrived broken."
            )
            chat.get_by_role("button", name="Start").click()
            expect(page.locator("#queue-rows tr")).to_have_count(1)
            expect(page.locator("#queue-empty")).to_be_hidden()
            browser.close()
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # The app's role verifies the chain it may read (and nothing broke on the way).
    assert _run(".venv/bin/python manage.py verify_audit", deployment).startswith("ok: ")
