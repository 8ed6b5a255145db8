"""The OpenAPI document tells the whole truth: every route under ``/api/`` is in it, and
every real response, refusals included, fits the schema it documents for that status,
with no field the schema does not name (objects are checked closed)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from jsonschema import Draft202012Validator

from portal.accounts.tokens import api_token_create, api_tokens_revoke
from portal.models import Assignment, RoutingEvent, Thread
from portal.notify import broadcast
from portal.reviews.claims import interrupt_claim
from portal.reviews.external import RequestSpec, external_request_create
from tests.api.test_api_events import Stream
from tests.factories import make_decision, make_interrupt, make_thread, make_user

# Routes that serve the document itself rather than the API it describes, and the API's
# root, which serves no operation (404).
DOCUMENT_ROUTES = {"/api/openapi.json", "/api/docs", "/api/"}


def api_routes() -> set[str]:
    """Every route under /api/ in portal/urls.py, written as the document writes paths."""

    def walk(patterns: list[Any], prefix: str) -> Any:
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern)

    routes = set()
    for route in walk(get_resolver().url_patterns, "/"):
        if route.startswith("/api/"):
            # Django's <name> (or <conv:name>) is OpenAPI's {name}.
            parts = []
            for part in route.split("/"):
                if part.startswith("<") and part.endswith(">"):
                    part = "{" + part[1:-1].split(":")[-1] + "}"
                parts.append(part)
            routes.add("/".join(parts))
    return routes


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to any others."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


class Document:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.components = closed(copy.deepcopy(doc.get("components", {})))

    def response_schema(self, method: str, path: str, status: int, media: str) -> Any:
        operation = self.doc["paths"][path][method.lower()]
        documented = operation["responses"].get(str(status))
        assert documented is not None, (
            f"{method} {path} answered {status}, which the document does not list "
            f"(it lists {sorted(operation['responses'])})"
        )
        content = documented.get("content", {})
        assert media in content, f"{method} {path} {status}: no {media} body documented"
        return content[media]["schema"]

    def check(self, method: str, path: str, status: int, body: Any, media: str) -> None:
        schema = closed(self.response_schema(method, path, status, media))
        validator = Draft202012Validator({**schema, "components": self.components})
        problems = [
            f"{'/'.join(map(str, e.absolute_path)) or '$'}: {e.message}"
            for e in validator.iter_errors(body)
        ]
        assert not problems, f"{method} {path} {status} breaks its schema:\n" + "\n".join(problems)


@pytest.fixture
def document(client) -> Document:
    return Document(client.get("/api/openapi.json").json())


def test_every_api_route_is_in_the_document(document):
    documented = set(document.doc["paths"])

    missing = api_routes() - DOCUMENT_ROUTES - documented

    assert not missing, f"routes under /api/ the document lacks: {sorted(missing)}"
    assert documented <= api_routes(), "the document lists a path no route serves"


def test_every_operation_documents_its_refusals_as_problems(document):
    for path, operations in document.doc["paths"].items():
        for method in operations:
            for status in ("400", "401", "403", "422", "429"):
                schema = document.response_schema(method, path, int(status), "application/json")
                assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path, status)


@pytest.mark.django_db
def test_every_response_fits_the_documented_schema(document):
    support, owner = make_user(role="support"), make_user(role="support")
    reviewer, other = make_user(role="reviewer"), make_user(role="reviewer")
    auditor = make_user(role="auditor")
    token = {u: api_token_create(user=u)[1] for u in (support, owner, reviewer, other, auditor)}
    read_only = api_token_create(user=reviewer, scopes=["read"])[1]
    pending = make_interrupt(owner=owner)
    decided = make_interrupt(owner=owner)
    make_decision(interrupt=decided, reviewer=other)
    held = make_interrupt(owner=owner)
    interrupt_claim(interrupt=held, user=other)
    # Routed, reminded and escalated, so the routing fields are checked filled in.
    Assignment.objects.create(interrupt=held, user=reviewer, source="interrupt")
    Assignment.objects.create(
        interrupt=held, group=Group.objects.create(name="leads"), source="escalation"
    )
    for action in ("reminded", "escalated"):
        RoutingEvent.objects.create(interrupt=held, action=action)

    def fresh() -> Any:
        return make_interrupt(owner=owner)

    failed = make_thread(owner=owner)
    Thread.objects.filter(pk=failed.pk).update(status=Thread.Status.FAILED)
    stopped = make_thread(owner=owner)
    answer = {"resume": {"approved": True}}
    answered, waited = fresh(), fresh()
    bot = make_user(role="agent")
    token[bot] = api_token_create(user=bot)[1]
    ask = {"agent": "invoice-bot", "title": "Pay invoice 7", "payload": {"amount": 120}}
    raised, _ = external_request_create(user=bot, spec=RequestSpec(agent="invoice-bot"))
    # (method, documented path, token, url, body): each operation's answers, 2xx first.
    calls: list[tuple[str, str, str | None, str, Any]] = [
        ("GET", "/api/interrupts", token[reviewer], "/api/interrupts", None),
        ("GET", "/api/interrupts", token[reviewer], "/api/interrupts?limit=1000", None),
        (
            "GET",
            "/api/interrupts/{interrupt_id}",
            token[reviewer],
            f"/api/interrupts/{held.pk}",
            None,
        ),
        (
            "GET",
            "/api/interrupts/{interrupt_id}",
            token[support],
            f"/api/interrupts/{held.pk}",
            None,
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/claim",
            token[reviewer],
            f"/api/interrupts/{pending.pk}/claim",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/claim",
            token[reviewer],
            f"/api/interrupts/{held.pk}/claim",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/claim",
            token[auditor],
            f"/api/interrupts/{held.pk}/claim",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/claim",
            read_only,
            f"/api/interrupts/{held.pk}/claim",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/claim",
            token[support],
            f"/api/interrupts/{held.pk}/claim",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/release",
            token[reviewer],
            f"/api/interrupts/{pending.pk}/release",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/release",
            token[reviewer],
            f"/api/interrupts/{held.pk}/release",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/withdraw",
            token[owner],
            f"/api/interrupts/{fresh().pk}/withdraw",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/withdraw",
            token[owner],
            f"/api/interrupts/{decided.pk}/withdraw",
            {},
        ),
        (
            "POST",
            "/api/interrupts/{interrupt_id}/withdraw",
            token[reviewer],
            f"/api/interrupts/{held.pk}/withdraw",
            {},
        ),
        ("GET", "/api/threads", token[reviewer], "/api/threads?limit=2", None),
        ("GET", "/api/threads", token[reviewer], "/api/threads?after=nonsense", None),
        (
            "POST",
            "/api/threads",
            token[support],
            "/api/threads",
            {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "Hi"}]}},
        ),
        (
            "POST",
            "/api/threads",
            token[support],
            "/api/threads?wait=0.01",  # no worker here: 202 with the thread still queued
            {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "Hi"}]}},
        ),
        ("POST", "/api/threads", token[support], "/api/threads", {"agent": "nobody", "input": {}}),
        ("POST", "/api/threads", token[support], "/api/threads", {"agent": "refunds", "extra": 1}),
        (
            "POST",
            "/api/threads",
            token[reviewer],
            "/api/threads",
            {"agent": "refunds", "input": {}},
        ),
        ("POST", "/api/threads", token[support], "/api/threads", "{not json"),
        (
            "GET",
            "/api/threads/{thread_id}",
            token[reviewer],
            f"/api/threads/{held.thread_id}",
            None,
        ),
        ("GET", "/api/threads/{thread_id}", token[support], f"/api/threads/{held.thread_id}", None),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[reviewer],
            f"/api/threads/{answered.thread_id}/resume",
            {**answer, "resume_interrupt_id": answered.pk},
        ),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[reviewer],
            f"/api/threads/{waited.thread_id}/resume?wait=0.01",
            {**answer, "resume_interrupt_id": waited.pk},
        ),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[reviewer],
            f"/api/threads/{decided.thread_id}/resume",
            {**answer, "resume_interrupt_id": decided.pk},
        ),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[reviewer],
            f"/api/threads/{pending.thread_id}/resume",
            {"resume": {"approved": "yes"}, "resume_interrupt_id": pending.pk},
        ),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[auditor],
            f"/api/threads/{pending.thread_id}/resume",
            answer,
        ),
        (
            "POST",
            "/api/threads/{thread_id}/resume",
            token[support],
            f"/api/threads/{pending.thread_id}/resume",
            answer,
        ),
        (
            "GET",
            "/api/threads/{thread_id}/events",
            token[support],
            f"/api/threads/{held.thread_id}/events",
            None,
        ),
        ("GET", "/api/decisions", token[auditor], "/api/decisions?limit=1", None),
        ("GET", "/api/decisions", token[auditor], "/api/decisions?outcome=maybe", None),
        ("GET", "/api/decisions", token[support], "/api/decisions", None),
        ("GET", "/api/interrupts", token[reviewer], "/api/interrupts?bad=%00", None),
        ("POST", "/api/requests", token[bot], "/api/requests", {**ask, "idempotency_key": "k"}),
        ("POST", "/api/requests", token[bot], "/api/requests", {**ask, "idempotency_key": "k"}),
        (
            "POST",
            "/api/requests",
            token[bot],
            "/api/requests",
            {**ask, "idempotency_key": "k", "title": "Another"},
        ),
        (
            "POST",
            "/api/requests",
            token[bot],
            "/api/requests",
            {**ask, "response_schema": {"$ref": "https://example.test/s.json"}},
        ),
        ("POST", "/api/requests", token[reviewer], "/api/requests", ask),
        (
            "GET",
            "/api/requests/{request_id}",
            token[bot],
            f"/api/requests/{raised.pk}",
            None,
        ),
        (
            "GET",
            "/api/requests/{request_id}",
            token[reviewer],
            f"/api/requests/{raised.pk}",
            None,
        ),
        (
            "GET",
            "/api/requests/{request_id}",
            token[bot],
            f"/api/requests/{raised.pk}?wait=31",
            None,
        ),
    ]
    retry, cancel = "/api/threads/{thread_id}/retry", "/api/threads/{thread_id}/cancel"
    calls += [
        ("POST", retry, token[owner], f"/api/threads/{failed.pk}/retry", {}),
        ("POST", retry, token[owner], f"/api/threads/{held.thread_id}/retry", {}),
        ("POST", retry, token[reviewer], f"/api/threads/{failed.pk}/retry", {}),
        ("POST", cancel, token[owner], f"/api/threads/{stopped.pk}/cancel", {}),
        ("POST", cancel, token[owner], f"/api/threads/{stopped.pk}/cancel", {}),
        ("POST", cancel, token[reviewer], f"/api/threads/{held.thread_id}/cancel", {}),
    ]
    # Without a token, every operation refuses alike.
    for path, operations in document.doc["paths"].items():
        for method in operations:
            url = (
                path.replace("{interrupt_id}", pending.pk)
                .replace("{thread_id}", str(pending.thread_id))
                .replace("{request_id}", raised.pk)
            )
            calls.append((method.upper(), path, None, url, {} if method == "post" else None))

    covered: set[tuple[str, str]] = set()
    statuses: dict[tuple[str, str], set[int]] = {}
    for method, path, bearer, url, body in calls:
        client = Client()
        headers = {"HTTP_AUTHORIZATION": f"Bearer {bearer}"} if bearer else {}
        if method == "POST":
            data = body if isinstance(body, str) else json.dumps(body)
            response = client.post(url, data, content_type="application/json", **headers)
        else:
            response = client.get(url, **headers)
        assert not response.streaming, f"{method} {url}: stream bodies are checked below"
        document.check(method, path, response.status_code, response.json(), "application/json")
        covered.add((method.lower(), path))
        statuses.setdefault((method.lower(), path), set()).add(response.status_code)

    operations = {(m, p) for p, ops in document.doc["paths"].items() for m in ops}
    assert covered == operations
    # Each operation answered at least once with success (the stream's, below).
    unanswered = {key for key, seen in statuses.items() if not any(s < 300 for s in seen)} - {
        ("get", "/api/threads/{thread_id}/events")
    }
    assert not unanswered, f"operations never answered with success: {sorted(unanswered)}"


@pytest.mark.django_db(transaction=True)
async def test_every_event_of_a_thread_stream_fits_the_documented_schema(
    application, client, support_agent, reviewer
):
    document = Document((await sync_to_async(client.get)("/api/openapi.json")).json())
    interrupt = await sync_to_async(make_interrupt)(owner=support_agent)
    thread = interrupt.thread
    token = (await sync_to_async(api_token_create)(user=support_agent))[1]
    path = "/api/threads/{thread_id}/events"

    stream = await Stream(application, f"/api/threads/{thread.pk}/events", token).open()
    assert stream.status == 200
    seen = [await stream.event()]
    await broadcast.apublish_chunk(thread.pk, {"event": "message", "data": {"token": "Hi"}})
    seen.append(await stream.event())
    await sync_to_async(broadcast.publish_thread_status)(thread.pk, "running", run_id="r-1")
    seen.append(await stream.event())
    await sync_to_async(interrupt_claim)(interrupt=interrupt, user=reviewer)
    seen.append(await stream.event())

    def revoke() -> None:
        api_tokens_revoke(user=support_agent, reason="test")
        broadcast.publish_user_revoke([support_agent.pk])

    await sync_to_async(revoke)()
    seen.append(await stream.event())
    await stream.communicator.wait(timeout=5)

    assert [name for name, _ in seen] == ["status", "chunk", "status", "html", "closed"]
    for name, data in seen:
        document.check("GET", path, 200, {"event": name, "data": data}, "text/event-stream")
