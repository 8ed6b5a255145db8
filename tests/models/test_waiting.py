"""Waiting for a row to change across processes: the API's waiting GET and
``portal.models.waiting`` itself. Workers and deciders are separate processes on the test
database; on PostgreSQL the wake-up is LISTEN/NOTIFY, on SQLite polling."""

from __future__ import annotations

import time

import pytest

from portal.api.schemas import WAIT_MAX_SECONDS
from portal.models import Decision, Interrupt, Run, Thread, waiting
from tests.api.test_api import api_for
from tests.factories import make_interrupt
from tests.runs.test_worker_processes import DECIDE_IN_A_NEW_PROCESS, finish

pytestmark = pytest.mark.usefixtures("test_agents")


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def no_safety_net(monkeypatch):
    # Waiters look again every RECHECK_SECONDS even unwoken; far apart, a prompt answer
    # can only come from the wake-up itself.
    monkeypatch.setattr(waiting, "RECHECK_SECONDS", 60.0)
    yield
    # On PostgreSQL the listener now sits up to a minute in each LISTEN, and stopping it
    # (before the test database goes) waited that minute out: end its session instead.
    listener = waiting._listener
    conn = listener and listener._conn
    if conn is not None:
        from django.db import connection

        listener._closed.set()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_waiter_on_a_request_wakes_when_another_process_decides_it(
    spawn, support_agent, reviewer, no_safety_net
):
    from portal.reviews import threads

    thread, _ = threads.thread_start(agent="approve", input=say("pay 42"), user=support_agent)
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


# --- starting and answering with ?wait: one request that answers when the run settles -----


def post(api, url: str, body: dict, wait: float):
    return api.post(f"{url}?wait={wait:g}", body)


def documented(client, status: int, path: str, body: dict) -> None:
    from tests.api.test_api_document import Document

    Document(client.get("/api/openapi.json").json()).check(
        "POST", path, status, body, "application/json"
    )


@pytest.mark.slow
def test_a_start_and_an_answer_with_wait_answer_once_a_worker_process_settles_the_run(
    spawn, support_agent, reviewer, client, no_safety_net
):
    spawn("run_worker", "--id", "elsewhere")  # starts up while the first POST waits
    asked = time.time()
    started = post(
        api_for(client, support_agent),
        "/api/threads",
        {"agent": "approve", "input": say("pay 42")},
        30,
    )
    answered_at = time.time()

    assert started.status_code == 200, started.content
    body = started.json()
    run = Run.objects.get(pk=body["run_id"])
    assert run.status == Run.Status.INTERRUPTED
    assert run.started_at.timestamp() > asked  # the worker took it while the POST waited
    assert answered_at - run.finished_at.timestamp() < 1.0
    assert body["thread"]["id"] == body["thread_id"]
    assert body["thread"]["status"] == "interrupted"
    request = body["thread"]["pending_interrupt"]
    assert request["status"] == "pending"
    documented(client, 200, "/api/threads", body)

    resumed = post(
        api_for(client, reviewer),
        f"/api/threads/{body['thread_id']}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": request["id"]},
        30,
    )
    answered_at = time.time()

    assert resumed.status_code == 200, resumed.content
    answer = resumed.json()
    run = Run.objects.get(pk=answer["run_id"])
    assert run.kind == Run.Kind.RESUME and run.status == Run.Status.SUCCEEDED
    assert answered_at - run.finished_at.timestamp() < 1.0
    assert answer["outcome"] == "approved" and answer["decision_id"] is not None
    assert answer["thread"]["status"] == "done"
    assert answer["thread"]["pending_interrupt"] is None
    # The thread document is the waiting GET's, word for word.
    fetched = api_for(client, reviewer).get(f"/api/threads/{body['thread_id']}").json()
    assert answer["thread"] == fetched
    documented(client, 200, "/api/threads/{thread_id}/resume", answer)


def test_a_start_with_wait_that_times_out_is_202_with_the_thread_queued_and_committed(
    transactional_db, support_agent, client
):
    asked = time.monotonic()
    response = post(
        api_for(client, support_agent),
        "/api/threads",
        {"agent": "approve", "input": say("pay 42")},
        0.5,
    )
    took = time.monotonic() - asked

    assert response.status_code == 202, response.content  # accepted, not yet paused
    body = response.json()
    assert body["thread"]["status"] == "idle"  # still queued: no worker runs here
    assert body["thread"]["pending_interrupt"] is None
    assert Run.objects.get(pk=body["run_id"]).status == Run.Status.QUEUED
    assert 0.5 <= took < 5
    documented(client, 202, "/api/threads", body)


def test_an_answer_with_wait_that_times_out_is_202_and_says_what_was_recorded(
    transactional_db, reviewer, client
):
    request = make_interrupt()

    response = post(
        api_for(client, reviewer),
        f"/api/threads/{request.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": request.pk, "note": "ok"},
        0.3,
    )

    assert response.status_code == 202, response.content
    body = response.json()
    decision = Decision.objects.get(pk=body["decision_id"])
    assert decision.interrupt_id == request.pk and decision.note == "ok"
    assert Run.objects.get(pk=body["run_id"]).status == Run.Status.QUEUED
    assert body["thread"]["id"] == str(request.thread_id)
    documented(client, 202, "/api/threads/{thread_id}/resume", body)


def test_a_vote_with_wait_answers_at_once_with_the_thread_still_paused(
    transactional_db, settings, reviewer, client
):
    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:tool_approval": {"approvals_required": 2}}
    request = make_interrupt()

    asked = time.monotonic()
    response = post(
        api_for(client, reviewer),
        f"/api/threads/{request.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": request.pk},
        10,
    )

    assert time.monotonic() - asked < 2  # nothing was queued: nothing to wait for
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["approval_id"] is not None and body["waiting_for"] == "1 more approval"
    assert body["thread"]["pending_interrupt"]["id"] == request.pk
    assert (
        body["thread"]["pending_interrupt"]["user_message"]
        == "Refund $42.50 for order A-1001, it arrived broken."
    )
    assert len(body["thread"]["pending_interrupt"]["approvals"]) == 1


def test_refused_starts_and_answers_with_wait_are_refused_at_once_and_record_nothing(
    transactional_db, support_agent, reviewer, client
):
    starter, decider = api_for(client, support_agent), api_for(client, reviewer)
    request = make_interrupt()
    answer = {"resume": {"approved": True}, "resume_interrupt_id": request.pk}
    resume = f"/api/threads/{request.thread_id}/resume"

    asked = time.monotonic()
    refusals = [
        post(starter, "/api/threads", {"agent": "nobody", "input": say("hi")}, 10),
        post(decider, "/api/threads", {"agent": "approve", "input": say("hi")}, 10),  # role
        post(starter, resume, answer, 10),  # role
        post(decider, resume, {**answer, "resume": {"approved": "yes"}}, 10),  # schema
        # A wait beyond the limit is refused before anything is started or decided.
        post(
            starter, "/api/threads", {"agent": "approve", "input": say("hi")}, WAIT_MAX_SECONDS + 1
        ),
        post(decider, resume, answer, WAIT_MAX_SECONDS + 1),
    ]

    assert [r.status_code for r in refusals] == [422, 403, 403, 422, 422, 422]
    assert time.monotonic() - asked < 5
    assert refusals[-1].json()["errors"] == [refusals[-2].json()["errors"][0]]
    assert refusals[-1].json()["errors"][0].startswith("$.wait:")
    assert not Thread.objects.exclude(pk=request.thread_id).exists()
    assert not Decision.objects.exists()

    decider.post(resume, answer)  # decided
    asked = time.monotonic()
    again = post(decider, resume, answer, 10)
    assert again.status_code == 409
    assert time.monotonic() - asked < 2


@pytest.mark.parametrize("path", ["/api/threads", "/api/threads/{thread_id}/resume"])
def test_the_wait_of_a_start_and_an_answer_is_documented_with_both_answers(db, client, path):
    doc = client.get("/api/openapi.json").json()
    operation = doc["paths"][path]["post"]
    (wait,) = [p for p in operation["parameters"] if p["name"] == "wait"]
    assert wait["in"] == "query" and not wait.get("required")
    assert wait["schema"]["maximum"] == WAIT_MAX_SECONDS
    assert "wait" in wait["description"].lower()
    answers = operation["responses"]
    assert "paused or finished" in answers["200"]["description"]
    assert "seconds ran out" in answers["202"]["description"]
    assert "200" in operation["description"] and "202" in operation["description"]
