"""Thread hand-offs (``sync_to_async`` calls) of API requests through the ASGI app, and
the API's own stack (``portal.api.stack``) answering as the site's would: counted, so
that a hand-off added on the API's path fails here (issue 32)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from asgiref import sync as asgiref_sync

from portal.accounts.tokens import api_token_create
from tests.factories import make_interrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# Django's own two (the request_started receivers, the response's close), the token
# check, and the view's one block; docs/benchmarks.md, "Where an approval's time goes".
APPROVAL_HOPS = 4
READ_HOPS = 4
# A read with ?wait: the thread looked up, then each look; the look that finds the thread
# settled builds the answer in its own hand-off.
WAITING_READ_HOPS = 5


def _hops(application, monkeypatch, requests):
    """The responses to ``requests`` (callables of an httpx client) through the ASGI app,
    and the hand-offs the last one made (the first warm the app up)."""
    hops = []
    original = asgiref_sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    async def run():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            answers = [await send(c) for send in requests[:-1]]
            monkeypatch.setattr(asgiref_sync.SyncToAsync, "__call__", counted)
            return [*answers, await requests[-1](c)]

    return asyncio.run(run()), hops


def _headers(user):
    token = api_token_create(user=user, name="t")[1]
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _approve(headers, interrupt):
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    url = f"/api/threads/{interrupt.thread.pk}/resume"
    return lambda c: c.post(url, headers=headers, content=json.dumps(body))


def test_an_api_approval_through_asgi_makes_at_most_the_counted_thread_hand_offs(
    reviewer, application, monkeypatch
):
    headers = _headers(reviewer)
    requests = [_approve(headers, make_interrupt()), _approve(headers, make_interrupt())]

    (_, response), hops = _hops(application, monkeypatch, requests)

    assert response.status_code == 202, response.text
    assert 0 < len(hops) <= APPROVAL_HOPS, hops


def test_reading_a_thread_through_asgi_makes_at_most_the_counted_thread_hand_offs(
    reviewer, application, monkeypatch
):
    headers = _headers(reviewer)
    url = f"/api/threads/{make_interrupt().thread.pk}"
    read = lambda c: c.get(url, headers=headers)  # noqa: E731

    (_, response), hops = _hops(application, monkeypatch, [read, read])

    assert response.status_code == 200, response.text
    assert response.json()["pending_interrupt"] is not None
    assert 0 < len(hops) <= READ_HOPS, hops


def test_a_waiting_read_of_a_settled_thread_answers_from_the_look_that_found_it_settled(
    reviewer, application, monkeypatch
):
    headers = _headers(reviewer)
    url = f"/api/threads/{make_interrupt().thread.pk}?wait=5"
    read = lambda c: c.get(url, headers=headers)  # noqa: E731

    (_, response), hops = _hops(application, monkeypatch, [read, read])

    assert response.status_code == 200, response.text
    assert response.json()["pending_interrupt"] is not None
    assert 0 < len(hops) <= WAITING_READ_HOPS, hops
    assert sum(hop.endswith(".look") for hop in hops) == 1, hops  # settled at the first
    assert not any("_thread_out" in hop or "<lambda>" in hop for hop in hops), hops


def test_the_api_stack_answers_with_the_security_headers_and_without_a_session(
    reviewer, application, monkeypatch
):
    headers = _headers(reviewer)
    read = lambda c: c.get("/api/interrupts", headers=headers)  # noqa: E731

    (response,), _ = _hops(application, monkeypatch, [read])

    assert response.status_code == 200, response.text
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "Cookie" not in response.headers.get("Vary", "")
    assert "set-cookie" not in response.headers


def test_the_api_stack_refuses_as_the_api_does(reviewer, application, monkeypatch):
    headers = _headers(reviewer)
    requests = [
        lambda c: c.get("/api/no-such-thing", headers=headers),
        lambda c: c.delete("/api/interrupts", headers=headers),
        lambda c: c.get("/api/interrupts"),
        lambda c: c.post("/api/threads", headers=headers, content='{"agent": "a\\u0000"}'),
    ]

    missing, wrong_method, no_token, bad_input = _hops(application, monkeypatch, requests)[0]

    assert missing.status_code == 404 and "/api/docs" in missing.json()["detail"]
    assert wrong_method.status_code == 405 and "GET" in wrong_method.json()["detail"]
    assert no_token.status_code == 401 and "Bearer" in no_token.json()["detail"]
    assert bad_input.status_code == 400 and bad_input.json()["errors"], bad_input.text


def test_the_api_stack_refuses_a_host_not_allowed(reviewer, application, monkeypatch):
    headers = {**_headers(reviewer), "Host": "portal.evil.example"}
    read = lambda c: c.get("/api/interrupts", headers=headers)  # noqa: E731

    (response,), _ = _hops(application, monkeypatch, [read])

    assert response.status_code == 400


def test_the_api_docs_page_goes_through_the_sites_stack(application, monkeypatch):
    (response,), _ = _hops(application, monkeypatch, [lambda c: c.get("/api/docs")])

    assert response.status_code == 200
    assert "Content-Security-Policy" in response.headers


def test_the_api_stack_throttles_a_token(reviewer, application, monkeypatch, settings):
    settings.PORTAL_API_RATE = "1/min"
    headers = _headers(reviewer)
    read = lambda c: c.get("/api/interrupts", headers=headers)  # noqa: E731

    (first, second), _ = _hops(application, monkeypatch, [read, read])

    assert first.status_code == 200, first.text
    assert second.status_code == 429 and second.headers["Retry-After"], second.text


def test_api_requests_borrow_kept_threads_instead_of_starting_one_each(
    reviewer, application, monkeypatch
):
    import threading

    headers = _headers(reviewer)
    read = lambda c: c.get("/api/interrupts/int_none", headers=headers)  # noqa: E731
    started = []
    original = threading.Thread.start

    def counted(self):
        started.append(self.name)
        return original(self)

    async def run():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            await read(c)  # the first request starts the thread the next ones borrow
            monkeypatch.setattr(threading.Thread, "start", counted)
            try:
                return [await read(c) for _ in range(5)]
            finally:
                monkeypatch.setattr(threading.Thread, "start", original)

    answers = asyncio.run(run())

    assert [a.status_code for a in answers] == [404] * 5
    assert started == []


def test_api_requests_at_the_same_time_never_share_a_thread(reviewer, application, monkeypatch):
    import threading

    from portal.api.auth import BearerToken

    headers = _headers(reviewer)
    # Each token check waits for the other's: on one shared thread the first would wait
    # for a second that could never start, and the barrier would break.
    both = threading.Barrier(2, timeout=10)
    threads = set()
    original = BearerToken.authenticate

    def meeting(self, request, token):
        threads.add(threading.get_ident())
        both.wait()
        return original(self, request, token)

    async def run():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            await c.get("/api/interrupts", headers=headers)
            monkeypatch.setattr(BearerToken, "authenticate", meeting)
            return await asyncio.gather(*(c.get("/api/interrupts", headers=headers) for _ in "ab"))

    answers = asyncio.run(run())

    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert len(threads) == 2 and not both.broken
