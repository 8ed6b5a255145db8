"""``make run`` as a newcomer sees it: on a fresh SQLite file, migrate, seed the demo
(its conversations run to their requests, their notifications are mailed) and serve it
with the embedded worker and notifier; no traceback, no "database is locked", one line
per e-mail, and the seeding ends with the logins and the URL."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest

from portal.accounts.groups import DEMO_USERS
from tests.processes import ROOT, free_port, wait_for

# The demo's own path: CI runs it in its SQLite pass (.ci/run), and only there.
pytestmark = [pytest.mark.slow, pytest.mark.embedded]


def test_make_run_prints_no_traceback_and_ends_with_the_logins_and_the_url(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "SQLITE_PATH": str(tmp_path / "demo.sqlite3"),
        "PORTAL_SCRIPTED_DELAY_MS": "0",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    env.pop("EMAIL_BACKEND", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    assert manage("migrate", "--noinput").returncode == 0
    seeded = manage("seed_demo", "--settle", "--url", url)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: _answers(f"{url}login/"), timeout=60, what="the demo server")
        for page in ("login/", "static/portal/favicon.svg"):
            assert _answers(url + page)
    finally:
        server.terminate()
        served = server.communicate(timeout=30)[0]

    printed = seeded.stdout + seeded.stderr + served
    assert seeded.returncode == 0, printed
    assert "Traceback" not in printed
    assert "database is locked" not in printed
    mails = [line for line in seeded.stdout.splitlines() if line.startswith("[e-mail to ")]
    assert len(mails) == 4, seeded.stdout
    assert "Content-Transfer-Encoding" not in printed
    # The heading, one line per demo user, a blank line and the URL.
    last = seeded.stdout.strip().splitlines()[-(len(DEMO_USERS) + 3) :]
    assert last[0] == f"Demo users (log in at {url}login/):", last
    assert "admin      password: admin-demo-pass" in "\n".join(last)
    assert "lead reviewer lead       password: lead-demo-pass" in "\n".join(last)
    assert last[-1] == f"The demo: {url}"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False
