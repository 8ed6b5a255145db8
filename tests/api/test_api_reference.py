"""The reference's five admin-endpoint behaviours, through our API, end to end.

The contact agent runs in the worker against a fake OpenAI-compatible server on loopback
(the boundary we mock): its first answer is a ``draft_contact_message`` tool call, its
second plain text. Runs are executed with the worker's own loop (``run_forever(once=True)``).
"""

from __future__ import annotations

import json

import pytest

from agents.examples import contact
from agents.testing.fake_openai import FakeOpenAI
from portal.accounts.tokens import api_token_create
from portal.models import Decision, Interrupt, Thread
from portal.runs.worker import Worker

VISITOR = contact.VISITOR_MESSAGE
DRAFT = {"name": "Dana Lee", "email": "dana@example.com", "message": "Open to a data project?"}
FINAL_TEXT = "Thanks, your message is with the owner."

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake_model(settings, monkeypatch):
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        settings.PORTAL_MODEL = "gpt-test"
        fake.queue_tool_call("draft_contact_message", **DRAFT)
        fake.queue_text(FINAL_TEXT)
        yield fake


@pytest.fixture
def tokens(client, support_agent, reviewer):
    return {
        "support": api_token_create(user=support_agent)[1],
        "reviewer": api_token_create(user=reviewer)[1],
    }


def call_api(client, method, url, token=None, body=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if method == "get":
        return client.get(url, **headers)
    return client.post(url, json.dumps(body), content_type="application/json", **headers)


def run_worker() -> int:
    return Worker(name="test-worker").run_forever(once=True)


@pytest.fixture
def paused(client, tokens, fake_model):
    """A contact thread paused on the high-risk tool, after exactly one model call."""
    contact.DRAFTS.clear()
    started = call_api(
        client,
        "post",
        "/api/threads",
        tokens["support"],
        {"agent": "contact", "input": {"messages": [{"role": "user", "content": VISITOR}]}},
    )
    assert started.status_code == 202
    run_worker()
    thread = Thread.objects.get(pk=started.json()["thread_id"])
    assert thread.status == Thread.Status.INTERRUPTED
    assert len(fake_model.requests) == 1  # paused before any execution or second call
    assert contact.DRAFTS == []
    return thread


def tool_messages(request_body):
    return [m for m in request_body["messages"] if m["role"] == "tool"]


def test_a_high_risk_tool_pauses_and_is_listed_with_its_input_and_the_users_message(
    client, tokens, paused
):
    listed = call_api(client, "get", "/api/interrupts?status=pending", tokens["reviewer"]).json()

    [item] = listed["items"]
    assert item["thread_id"] == str(paused.pk)
    assert item["reason"] == "tool_approval"
    [tool_call] = item["value"]["tool_calls"]
    assert tool_call["name"] == "draft_contact_message"
    assert tool_call["arguments"] == DRAFT
    assert item["user_message"] == VISITOR


def test_approving_executes_the_tool_calls_the_model_again_and_records_the_result(
    client, tokens, paused, fake_model
):
    interrupt = Interrupt.objects.get(thread=paused, status=Interrupt.Status.PENDING)

    response = call_api(
        client,
        "post",
        f"/api/threads/{paused.pk}/resume",
        tokens["reviewer"],
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
    )
    assert response.status_code == 202
    run_worker()

    assert (
        call_api(client, "get", "/api/interrupts?status=pending", tokens["reviewer"]).json()[
            "count"
        ]
        == 0
    )
    assert len(fake_model.requests) == 2
    [result] = tool_messages(fake_model.requests[1])
    assert "recorded" in result["content"]
    assert contact.DRAFTS == [DRAFT]
    thread = call_api(client, "get", f"/api/threads/{paused.pk}", tokens["reviewer"]).json()
    assert thread["status"] == "done"
    assert thread["pending_interrupt"] is None
    assert thread["messages"][-1]["content"] == FINAL_TEXT
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.APPROVED
    assert list(decision.executed_args.values()) == [DRAFT]


def test_approving_edited_arguments_executes_the_edited_ones_and_records_both(
    client, tokens, paused, fake_model
):
    interrupt = Interrupt.objects.get(thread=paused, status=Interrupt.Status.PENDING)
    [call] = interrupt.value["tool_calls"]
    edited = {**DRAFT, "message": "Open to a data project? (edited by the reviewer)"}

    response = call_api(
        client,
        "post",
        f"/api/threads/{paused.pk}/resume",
        tokens["reviewer"],
        {
            "resume": {"approved": True, "args": {call["id"]: edited}},
            "resume_interrupt_id": interrupt.pk,
        },
    )
    assert response.status_code == 202
    run_worker()

    assert contact.DRAFTS == [edited]
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.EDITED
    assert decision.original_args == {call["id"]: DRAFT}
    assert decision.executed_args == {call["id"]: edited}


def test_rejecting_declines_without_executing_and_passes_the_note_verbatim(
    client, tokens, paused, fake_model
):
    interrupt = Interrupt.objects.get(thread=paused, status=Interrupt.Status.PENDING)
    note = "Not taking projects right now."

    response = call_api(
        client,
        "post",
        f"/api/threads/{paused.pk}/resume",
        tokens["reviewer"],
        {"resume": {"approved": False, "note": note}, "resume_interrupt_id": interrupt.pk},
    )
    assert response.status_code == 202
    run_worker()

    assert contact.DRAFTS == []
    [result] = tool_messages(fake_model.requests[1])
    assert json.loads(result["content"]) == {"status": "declined", "reason": note}
    assert note in result["content"]
    assert Decision.objects.get(interrupt=interrupt).outcome == Decision.Outcome.REJECTED


def test_endpoints_require_a_token_and_a_thread_with_nothing_pending_is_404(client, tokens, paused):
    interrupt = Interrupt.objects.get(thread=paused, status=Interrupt.Status.PENDING)
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    url = f"/api/threads/{paused.pk}/resume"

    assert call_api(client, "get", "/api/interrupts?status=pending").status_code == 401
    assert call_api(client, "get", "/api/interrupts?status=pending", "wrong").status_code == 401
    assert call_api(client, "post", url, None, body).status_code == 401
    assert call_api(client, "post", url, "wrong", body).status_code == 401
    assert Decision.objects.count() == 0

    assert call_api(client, "post", url, tokens["reviewer"], body).status_code == 202
    run_worker()
    nothing_pending = call_api(client, "post", url, tokens["reviewer"], {"resume": True})
    assert nothing_pending.status_code == 404
    # Naming the request just decided is a late answer, not a question about the thread.
    late = call_api(client, "post", url, tokens["reviewer"], body)
    assert late.status_code == 409
    assert "already decided by rita-reviewer at" in late.json()["detail"]


def test_decisions_are_refused_with_403_when_the_api_is_turned_off(
    client, tokens, paused, settings
):
    interrupt = Interrupt.objects.get(thread=paused, status=Interrupt.Status.PENDING)
    settings.PORTAL_API_ENABLED = False

    response = call_api(
        client,
        "post",
        f"/api/threads/{paused.pk}/resume",
        tokens["reviewer"],
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
    )

    assert response.status_code == 403
    assert call_api(client, "get", "/api/interrupts", tokens["reviewer"]).status_code == 403
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert Decision.objects.count() == 0
