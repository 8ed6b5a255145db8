"""What API clients found (issue 12 of the reviewer's day): a cancelled thread's request,
who asked, the table of endpoints, strict types on ``/api/requests``, and the client
module that must import and read answers with the standard library alone."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from agents.portal_client import Answer, PortalClient, PortalError, Request
from portal.accounts.tokens import api_token_create
from portal.reviews.threads import thread_cancel
from tests.api.test_api_document import DOCUMENT_ROUTES, api_routes
from tests.factories import make_interrupt, make_user

ROOT = Path(__file__).resolve().parents[2]


def _get(user, url: str):
    token = api_token_create(user=user, name="test")[1]
    return Client().get(url, HTTP_AUTHORIZATION=f"Bearer {token}")


def _raise(**fields):
    user = make_user("ivy-invoice-bot", role="agent")
    token = api_token_create(user=user, name="bot", scopes=["request"])[1]
    body = {"agent": "invoice-bot", "title": "Pay invoice 7", "actions": ["accept"], **fields}
    return Client().post(
        "/api/requests",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


# --- the portal's side -----------------------------------------------------------------


@pytest.mark.django_db
def test_a_cancelled_thread_names_no_pending_request(support_agent, reviewer):
    interrupt = make_interrupt(owner=support_agent)
    thread_cancel(thread=interrupt.thread, user=support_agent)

    body = _get(reviewer, f"/api/threads/{interrupt.thread_id}").json()

    assert body["status"] == "cancelled"
    assert body["pending_interrupt"] is None


@pytest.mark.django_db
def test_the_queue_names_who_asked(support_agent, reviewer):
    interrupt = make_interrupt(owner=support_agent)

    listed = _get(reviewer, "/api/interrupts").json()
    one = _get(reviewer, f"/api/interrupts/{interrupt.pk}").json()
    in_thread = _get(reviewer, f"/api/threads/{interrupt.thread_id}").json()

    assert [i["requested_by"] for i in listed["items"]] == [support_agent.username]
    assert one["requested_by"] == support_agent.username
    assert in_thread["pending_interrupt"]["requested_by"] == support_agent.username


def test_the_table_of_endpoints_names_every_route_and_scope():
    text = (ROOT / "docs" / "api.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    documented = {
        re.sub(r"\{\w+\}", "{id}", path)
        for row in rows
        for path in re.findall(r"(/api/[\w/{}.]*)", row.split("|")[1])
    }
    routes = {re.sub(r"\{\w+\}", "{id}", r) for r in api_routes() - DOCUMENT_ROUTES}
    # ".../release" is written beside its sibling claim.
    documented |= {p.replace("claim", "release") for p in documented if p.endswith("claim")}

    assert routes - documented == set()
    scopes = {row.split("|")[2].strip(" `") for row in rows}
    assert scopes == {"read", "start", "decide", "request"}


@pytest.mark.django_db
@pytest.mark.parametrize("value", [True, "60", 1.5])
def test_an_expiry_that_is_not_a_whole_number_is_refused_naming_the_field(value):
    response = _raise(expires_in=value)

    assert response.status_code == 422, response.content
    assert [e for e in response.json()["errors"] if e.startswith("$.expires_in:")]


@pytest.mark.django_db
def test_a_title_that_is_not_text_is_refused_naming_the_field():
    response = _raise(title=7)

    assert response.status_code == 422
    assert [e for e in response.json()["errors"] if e.startswith("$.title:")]


@pytest.mark.django_db
def test_ten_thousand_actions_are_refused_naming_the_bound():
    response = _raise(actions=["accept"] * 10_000)

    assert response.status_code == 422
    errors = response.json()["errors"]
    assert errors == ["$.actions: List should have at most 4 items after validation, not 10000"]


@pytest.mark.django_db
def test_a_whole_number_expiry_is_still_taken():
    assert _raise(expires_in=60).status_code == 201


# --- the client's side -----------------------------------------------------------------


def test_the_client_imports_with_the_standard_library_alone():
    # -S: no site-packages, so openai, httpx, pydantic, jsonschema or re2 cannot load.
    probe = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
        "import agents.portal_client, agents.signing; "
        "print(sorted(m.split('.')[0] for m in sys.modules if not m.startswith('agents')"
        " and m.split('.')[0] in ('openai', 'httpx', 'pydantic', 'jsonschema', 're2', 'django')))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd="/", timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_package_still_exports_the_runtime_by_name():
    import agents
    import agents.interrupt  # the module of the same name must not hide the function

    assert callable(agents.interrupt)
    assert agents.interrupt is agents.interrupt.__globals__["interrupt"]
    assert agents.StateGraph.__module__ == "agents.graph"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        agents.nothing  # noqa: B018


ANSWER = {
    "outcome": "approved",
    "value": {"type": "accept"},
    "note": "",
    "decided_by": "rita",
    "decided_at": "2025-01-01T00:00:00Z",
    "decision_id": 1,
    "audit_hash": "ab",
}


def test_an_answer_with_a_field_the_client_does_not_know_is_read():
    request = Request.from_json(
        {"id": "r1", "status": "decided", "answer": {**ANSWER, "reason_words": "new"}}
    )

    assert request.answer == Answer(**ANSWER)
    assert request.answer.goes_ahead


def test_an_answer_missing_a_field_is_a_portal_error():
    without_hash = {k: v for k, v in ANSWER.items() if k != "audit_hash"}

    with pytest.raises(PortalError, match="lacks audit_hash"):
        Request.from_json({"id": "r1", "status": "decided", "answer": without_hash})


@pytest.fixture
def replies() -> Iterator[tuple[str, list[bytes]]]:
    """A server on loopback that answers 200 with whatever body the test queues."""
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>Bad gateway</html>", "not JSON"),
        (b'{"id": "r1"', "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"detail": "hello"}', "not a request"),
        (b'{"id": "r1", "status": "decided", "answer": 5}', "not an object"),
    ],
)
def test_a_reply_the_client_cannot_read_is_a_portal_error(replies, body, says):
    url, bodies = replies
    bodies.append(body)

    with pytest.raises(PortalError, match=says):
        PortalClient(url, "token", timeout=5).get("r1")
