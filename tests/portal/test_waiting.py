"""Waiting for a row to change across processes: the API's waiting GET and
``portal.waiting`` itself. Workers and deciders are separate processes on the test
database; on PostgreSQL the wake-up is LISTEN/NOTIFY, on SQLite polling."""

from __future__ import annotations

import time

import pytest

from portal import waiting
from portal.api import WAIT_MAX_SECONDS
from portal.models import Interrupt, Run
from tests.portal.test_api import api_for
from tests.portal.test_worker_processes import DECIDE_IN_A_NEW_PROCESS, finish

pytestmark = pytest.mark.usefixtures("test_agents")


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def no_safety_net(monkeypatch):
    # Waiters look again every RECHECK_SECONDS even unwoken; far apart, a prompt answer
    # can only come from the wake-up itself.
    monkeypatch.setattr(waiting, "RECHECK_SECONDS", 60.0)


def test_a_waiting_get_answers_as_soon_as_a_worker_in_another_process_pauses_the_run(
    spawn, support_agent, client, no_safety_net
):
    api = api_for(client, support_agent)
    started = api.post("/api/threads", {"agent": "approve", "input": say("pay 42")}).json()
    spawn("run_worker", "--once", "--id", "elsewhere")

    asked = time.monotonic()
    response = api.get(f"/api/threads/{started['thread_id']}", wait=WAIT_MAX_SECONDS)
    answered_at = time.time()

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "interrupted"
    assert body["pending_interrupt"]["status"] == "pending"
    assert time.monotonic() - asked < WAIT_MAX_SECONDS
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == Run.Status.INTERRUPTED
    assert answered_at - run.finished_at.timestamp() < 1.0


def test_a_waiting_get_answers_with_the_thread_as_it_is_when_the_time_is_up(
    transactional_db, support_agent, client
):
    api = api_for(client, support_agent)
    started = api.post("/api/threads", {"agent": "approve", "input": say("pay 42")}).json()

    asked = time.monotonic()
    response = api.get(f"/api/threads/{started['thread_id']}", wait=0.5)
    took = time.monotonic() - asked

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "idle"  # still queued: no worker runs here
    assert response.json()["pending_interrupt"] is None
    assert 0.5 <= took < 5


def test_a_wait_beyond_the_limit_is_refused_naming_it_and_the_limit_is_documented(
    db, support_agent, client
):
    api = api_for(client, support_agent)
    started = api.post("/api/threads", {"agent": "approve", "input": say("pay 42")}).json()

    response = api.get(f"/api/threads/{started['thread_id']}", wait=WAIT_MAX_SECONDS + 1)

    assert response.status_code == 422
    assert any(
        line.startswith("$.wait:") and str(WAIT_MAX_SECONDS) in line
        for line in response.json()["errors"]
    )
    doc = client.get("/api/openapi.json").json()
    params = doc["paths"]["/api/threads/{thread_id}"]["get"]["parameters"]
    (wait,) = [p for p in params if p["name"] == "wait"]
    assert wait["schema"]["maximum"] == WAIT_MAX_SECONDS
    assert "wait" in wait["description"].lower()


def test_a_waiting_get_for_a_thread_you_cannot_see_is_404_at_once(
    transactional_db, support_agent, other_support_agent, client
):
    started = (
        api_for(client, support_agent)
        .post("/api/threads", {"agent": "approve", "input": say("pay 42")})
        .json()
    )

    asked = time.monotonic()
    response = api_for(client, other_support_agent).get(
        f"/api/threads/{started['thread_id']}", wait=5
    )

    assert response.status_code == 404
    assert time.monotonic() - asked < 2


def test_a_waiter_on_a_request_wakes_when_another_process_decides_it(
    spawn, support_agent, reviewer, no_safety_net
):
    from portal import services

    thread, _ = services.thread_start(agent="approve", input=say("pay 42"), user=support_agent)
    finish(spawn("run_worker", "--once", "--id", "first"))
    request = Interrupt.objects.get(thread=thread, status=Interrupt.Status.PENDING)
    spawn("shell", "-c", DECIDE_IN_A_NEW_PROCESS)

    def decided() -> bool:
        return Interrupt.objects.get(pk=request.pk).status != Interrupt.Status.PENDING

    assert waiting.wait_until(waiting.interrupt_key(request.pk), decided, seconds=30)
    woke_at = time.time()

    request.refresh_from_db()
    assert request.status == Interrupt.Status.RESOLVED
    assert woke_at - request.resolved_at.timestamp() < 1.0
