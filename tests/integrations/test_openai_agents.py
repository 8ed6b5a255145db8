"""OpenAI Agents SDK approvals end to end: ``examples/openai_agents_invoice.py`` runs in
the SDK's own venv against the fake OpenAI-compatible server and a live portal, where a
reviewer approves or refuses its ``needs_approval`` tool call; the tool runs at most once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from agents import signing
from agents.testing.fake_openai import FakeOpenAI
from portal.accounts.tokens import api_token_create
from portal.models import ExternalRequest, Interrupt
from portal.notify.notifier import Notifier
from portal.reviews.decisions import decision_submit
from tests.factories import make_user
from tests.liveserver import ROOT, live_portal
from tests.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("openai_agents")]

SDK_PYTHON = ROOT / ".venv-openai-agents" / "bin" / "python"
EXAMPLE = ROOT / "examples" / "openai_agents_invoice.py"


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    if not SDK_PYTHON.exists():
        pytest.fail(f"{SDK_PYTHON} is missing: `make install` builds the SDK's venv")
    with django_db_blocker.unblock(), live_portal(tmp_path_factory.mktemp("oai")) as base:
        yield base


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        fake.queue_tool_call("pay_invoice", invoice=7, amount=120)
        fake.queue_text("Done as the reviewer said.")
        yield fake


@pytest.fixture
def env(server, fake, transactional_db, roles, tmp_path) -> dict[str, str]:
    row, token = api_token_create(user=make_user("invoice-agent", role="agent"), scopes=["request"])
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "PORTAL_URL": server,
        "PORTAL_TOKEN": token,
        "PORTAL_WEBHOOK_SECRET": row.webhook_secret,
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "sk-fake",
        "STATE_FILE": str(tmp_path / "run.json"),
        "PAID_LOG": str(tmp_path / "paid.jsonl"),
    }


def example(mode: str, env: dict[str, str]) -> subprocess.Popen[str]:
    # As a script (not -m): the SDK's `agents` must not meet the portal's.
    return subprocess.Popen(
        [str(SDK_PYTHON), str(EXAMPLE), mode],
        cwd=Path(env["STATE_FILE"]).parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def pending_request(proc: subprocess.Popen[str] | None = None) -> Interrupt:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = Interrupt.objects.filter(
            status=Interrupt.Status.PENDING, external__source="openai-agents"
        ).first()
        if found is not None:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the example ended early: {proc.communicate()}")
        time.sleep(0.1)
    pytest.fail("the run raised no request in the portal")


def decide(request: Interrupt, reviewer, value) -> None:
    decision_submit(
        interrupt=request.pk, reviewer=reviewer, value=value, resume_interrupt_id=request.pk
    )
    connection.close()


def paid(env: dict[str, str]) -> list[dict]:
    log = Path(env["PAID_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_an_approved_tool_call_runs_once_and_the_run_finishes(env, fake, reviewer):
    proc = example("run", env)
    request = pending_request(proc)
    assert request.value["tool"] == "pay_invoice"
    assert request.value["arguments"] == {"invoice": 7, "amount": 120}
    assert paid(env) == []

    decide(request, reviewer, {"type": "accept"})
    done = finish(proc)

    assert done["output"] == "Done as the reviewer said."
    assert paid(env) == [{"invoice": 7, "amount": 120}]
    tool_message = fake.requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "Invoice 7 paid" in tool_message["content"]


def test_a_refusal_reaches_the_model_with_the_reason_and_the_tool_never_runs(env, fake, reviewer):
    proc = example("run", env)
    decide(pending_request(proc), reviewer, {"type": "response", "args": "ACME was paid twice"})
    done = finish(proc)

    assert done["output"] == "Done as the reviewer said."
    assert paid(env) == []
    told = fake.requests[-1]["messages"][-1]["content"]
    assert "ACME was paid twice" in told and reviewer.username in told


def test_a_restart_between_the_pause_and_the_answer_loses_nothing_and_asks_once(
    env, fake, reviewer
):
    asked = finish(example("ask", env))  # the process that paused is gone
    request = pending_request()
    assert asked["asked"] == [request.pk]
    assert json.loads(Path(env["STATE_FILE"]).read_text())["state"]

    decide(request, reviewer, {"type": "accept"})
    done = finish(example("resume", env))  # a new process, from the stored state

    assert done["output"] == "Done as the reviewer said."
    assert paid(env) == [{"invoice": 7, "amount": 120}]
    assert ExternalRequest.objects.count() == 1
    assert not Path(env["STATE_FILE"]).exists()


def _listening(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the webhook listener ended early: {proc.communicate()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "the webhook listener did not start"
            time.sleep(0.1)


def _post(url: str, body: bytes, signature: str) -> int:
    sent = urllib.request.Request(url, body, {"Portal-Signature": signature}, method="POST")
    try:
        with urllib.request.urlopen(sent, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_signed_webhook_to_a_restarted_process_resumes_the_run_and_a_forged_one_does_nothing(
    env, fake, reviewer, settings
):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # this process delivers to loopback too
    port = free_port()
    env |= {"CALLBACK_URL": f"http://127.0.0.1:{port}/hook", "CALLBACK_PORT": str(port)}
    asked = finish(example("ask-hook", env))  # raised with a callback_url; that process is gone
    request = pending_request()
    assert asked["asked"] == [request.pk]
    listener = example("hook", env)  # a new process, from the stored state
    _listening(listener, port)

    # An approval the portal never signed: refused, and the run stays paused.
    forged = json.dumps({"data": {"id": request.pk, "status": "decided"}}).encode()
    assert _post(env["CALLBACK_URL"], forged, signing.sign("whsec_forged", forged)) == 401
    assert listener.poll() is None and paid(env) == []

    decide(request, reviewer, {"type": "accept"})
    deadline = time.monotonic() + 60
    while listener.poll() is None:  # the portal's notifier sends the signed answer
        assert time.monotonic() < deadline, "no webhook resumed the run"
        Notifier(name="test-notifier").tick()
        time.sleep(0.2)
    done = finish(listener)

    assert done["output"] == "Done as the reviewer said."
    assert paid(env) == [{"invoice": 7, "amount": 120}]
    assert ExternalRequest.objects.count() == 1
    assert not Path(env["STATE_FILE"]).exists()
