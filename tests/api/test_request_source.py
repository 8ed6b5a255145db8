"""``POST /api/requests``'s ``source``: which door raised an outside agent's request,
checked against the doors the portal knows, stored, and shown with the request."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from portal.accounts.tokens import api_token_create
from portal.models import AuditEvent, Decision, ExternalRequest, Interrupt
from portal.reviews.decisions import decision_submit
from tests.factories import make_user

URL = "/api/requests"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}}


@pytest.fixture
def post(client, roles, settings):
    settings.PORTAL_API_RATE = ""
    token = api_token_create(user=make_user("mcp-bot", role="agent"), scopes=["request"])[1]

    def post(**fields):
        body = {"agent": "file-bot", "response_schema": SCHEMA, **fields}
        return client.post(
            URL,
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    return post


@pytest.mark.django_db
def test_a_request_raised_by_the_mcp_gateway_says_so(post):
    response = post(source="mcp")

    assert response.status_code == 201, response.content
    assert response.json()["source"] == "mcp"
    row = ExternalRequest.objects.get(pk=response.json()["id"])
    assert row.source == "mcp"
    raised = AuditEvent.objects.get(action="interrupt.raise", target_id=row.pk)
    assert raised.detail["source"] == "mcp"


@pytest.mark.django_db
def test_a_request_without_a_source_is_the_clients(post):
    response = post()

    assert response.status_code == 201 and response.json()["source"] == "client"


@pytest.mark.django_db
def test_an_unknown_source_is_refused_naming_the_known_ones(post):
    response = post(source="slack-bot")

    assert response.status_code == 422
    errors = response.json()["errors"]
    assert errors[0].startswith("$.source: 'slack-bot'") and "'openai-agents'" in errors[0]
    assert not Interrupt.objects.exists()


@pytest.mark.django_db
def test_the_same_key_from_another_door_returns_the_first_request(post):
    first = post(source="langgraph", idempotency_key="k-1")
    again = post(source="client", idempotency_key="k-1")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["source"] == "langgraph"


@pytest.mark.django_db
def test_the_history_its_export_the_decision_page_and_the_audit_trail_show_the_raising_door(
    post, client, auditor, reviewer
):
    request_id = post(source="openai-agents", title="Pay invoice 7").json()["id"]
    decision_submit(
        interrupt=request_id,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=request_id,
        door=Decision.Door.DASHBOARD,
    )
    decision = Decision.objects.get()
    client.force_login(auditor)

    page = client.get(reverse("history")).content.decode()
    assert "raised via openai-agents" in page and "via dashboard" in page
    export = client.get(reverse("history_export_jsonl"))
    [row] = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert (row["raised_through"], row["door"]) == ("openai-agents", "dashboard")
    detail = client.get(reverse("decision_detail", args=[decision.pk])).content.decode()
    assert "OpenAI Agents SDK adapter" in detail
    trail = client.get(reverse("audit_trail"), {"action": "interrupt.raise"}).content.decode()
    assert "openai-agents" in trail
