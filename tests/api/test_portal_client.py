"""``agents.portal_client`` against a live portal: a plain script's round trip, sync and
async, the refusals it reports, and what it verifies."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from agents import signing
from agents.portal_client import PortalClient, PortalError
from portal.accounts.tokens import api_token_create
from portal.models import Decision
from portal.reviews.decisions import decision_submit
from tests.api.test_api_events_live import EventReader, call
from tests.factories import make_user
from tests.liveserver import live_portal

# One live server for the module: its tests stay on one xdist worker (make test: loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("portal_client")]

YES_NO = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    with django_db_blocker.unblock(), live_portal(tmp_path_factory.mktemp("client")) as base:
        yield base


@pytest.fixture
def portal(server, transactional_db, roles) -> PortalClient:
    row, token = api_token_create(
        user=make_user("ivy-invoice-bot", role="agent"), scopes=["request"]
    )
    return PortalClient(server, token, webhook_secret=row.webhook_secret, timeout=20)


def decide_soon(
    request_id: str, reviewer, value, *, after: float = 0.5, note: str = ""
) -> threading.Thread:
    def decide() -> None:
        time.sleep(after)
        try:
            decision_submit(
                interrupt=request_id,
                reviewer=reviewer,
                value=value,
                resume_interrupt_id=request_id,
                note=note,
            )
        finally:
            connection.close()

    helper = threading.Thread(target=decide)
    helper.start()
    return helper


def test_a_script_raises_a_request_and_waits_for_the_reviewers_answer(portal, reviewer):
    request = portal.raise_request(
        agent="invoice-bot",
        title="Pay invoice 7",
        message="Pay **$120** to ACME?",
        payload={"invoice": 7, "amount": 120},
        response_schema=YES_NO,
        external_ref="INV-7",
    )
    assert request.pending and request.answer is None

    helper = decide_soon(request.id, reviewer, {"approved": True, "note": "paid before"})
    done = portal.wait(request.id, timeout=30)
    helper.join()

    assert done.status == "decided" and done.external_ref == "INV-7"
    assert done.answer.goes_ahead
    assert done.answer.value == {"approved": True, "note": "paid before"}
    assert done.answer.decided_by == reviewer.username
    assert done.answer.audit_hash == Decision.objects.get(interrupt_id=request.id).hash


def test_a_rejection_does_not_go_ahead(portal, reviewer):
    request = portal.raise_request(agent="invoice-bot", response_schema=YES_NO)
    decide_soon(request.id, reviewer, {"approved": False}, after=0, note="Not this one.").join()

    answer = portal.get(request.id).answer
    assert answer.outcome == "rejected" and not answer.goes_ahead


def test_async_code_raises_and_awaits_the_answer(portal, reviewer):
    async def script() -> object:
        request = await portal.araise_request(
            agent="invoice-bot", actions=["accept", "ignore"], payload={"invoice": 8}
        )
        helper = decide_soon(request.id, reviewer, {"type": "accept"})
        done = await portal.await_answer(request.id, timeout=30)
        await asyncio.to_thread(helper.join)
        return done

    done = asyncio.run(script())
    assert done.answer.outcome == "approved" and done.answer.goes_ahead


def test_the_same_idempotency_key_gives_back_the_first_request(portal):
    first = portal.raise_request(agent="invoice-bot", idempotency_key="inv-9")
    again = portal.raise_request(agent="invoice-bot", idempotency_key="inv-9")

    assert first.id == again.id


def test_a_wait_that_runs_out_returns_the_request_still_pending(portal):
    request = portal.raise_request(agent="invoice-bot")
    started = time.monotonic()

    still = portal.wait(request.id, timeout=0.5)

    assert still.pending and time.monotonic() - started < 10


def test_refusals_come_back_as_errors_naming_each_problem(portal):
    with pytest.raises(PortalError) as refused:
        portal.raise_request(
            agent="invoice-bot", response_schema={"$ref": "https://example.test/s.json"}
        )

    assert refused.value.status == 422
    assert refused.value.errors[0].startswith("$.response_schema.$ref")


def test_a_token_without_the_scope_is_told_which_it_lacks(server, transactional_db, roles):
    token = api_token_create(user=make_user("no-scope-bot", role="agent"), scopes=["read"])[1]

    with pytest.raises(PortalError, match="lacks the 'request' scope") as refused:
        PortalClient(server, token).raise_request(agent="invoice-bot")
    assert refused.value.status == 403


def test_an_unreachable_portal_is_an_error_not_a_hang():
    client = PortalClient("http://127.0.0.1:9", "prt_x", timeout=2)

    with pytest.raises(PortalError, match="cannot be reached") as refused:
        client.get("int_x")
    assert refused.value.status == 0


def test_a_webhook_is_verified_against_the_raw_body():
    client = PortalClient("http://portal.test", "prt_x", webhook_secret="whsec_test")
    body = (
        b'{"id":"1","type":"request.decided","created_at":"2026-12-01T13:00:00+00:00",'
        b'"data":{"id":"int_1","status":"decided","agent":"invoice-bot","reason":"r",'
        b'"title":"t","external_ref":"INV-7","thread_id":"th","created_at":"c",'
        b'"expires_at":null,"answer":{"outcome":"approved","value":{"approved":true},'
        b'"note":"","decided_by":"rita","decided_at":"d","decision_id":3,"audit_hash":"h"}}}'
    )

    request = client.verify_webhook(body, signing.sign("whsec_test", body))
    assert request.external_ref == "INV-7" and request.answer.goes_ahead

    with pytest.raises(signing.SignatureError, match="does not match"):
        client.verify_webhook(body.replace(b"approved", b"rejected"), signing.sign("x", body))
    with pytest.raises(signing.SignatureError, match="missing"):
        client.verify_webhook(body, None)
    stale = signing.sign("whsec_test", body, timestamp=int(time.time()) - 3600)
    with pytest.raises(signing.SignatureError, match="replay"):
        client.verify_webhook(body, stale)


def test_secrets_given_as_an_iterator_verify_every_webhook_not_just_the_first():
    body = b'{"id":"int_1","status":"decided","agent":"a","reason":"r","title":"t"}'
    client = PortalClient("http://unused", "tok", webhook_secret=iter(["new", "old"]))

    for secret in ("old", "new", "old"):
        assert client.verify_webhook(body, signing.sign(secret, body)).id == "int_1"


def test_the_agent_can_follow_its_request_on_the_threads_event_stream(
    server, transactional_db, roles, reviewer
):
    # A reviewer decides over the API, in the server's process, whose broadcasts reach
    # the stream whatever the channel layer.
    row, token = api_token_create(
        user=make_user("sse-bot", role="agent"), scopes=["request", "read"]
    )
    portal = PortalClient(server, token, webhook_secret=row.webhook_secret, timeout=20)
    request = portal.raise_request(agent="invoice-bot", response_schema=YES_NO)
    host, port = server.removeprefix("http://").split(":")
    stream = EventReader((host, int(port)), f"/api/threads/{request.thread_id}/events", token)
    seen: list = []
    stream.until_status("interrupted", seen)

    call(
        (host, int(port)),
        "POST",
        f"/api/threads/{request.thread_id}/resume",
        api_token_create(user=reviewer)[1],
        {"resume": {"approved": True}, "resume_interrupt_id": request.id},
    )
    after: list = []
    stream.until_status("done", after)
    stream.close()

    # "done" is the news that the answer is there to read.
    assert portal.get(request.id).answer.goes_ahead
