"""Round trips to PostgreSQL per API request, counted on the wire (``round_trips``):
BEGIN, COMMIT and every NOTIFY included. A change that adds one fails here."""

from __future__ import annotations

import json

import pytest

from portal.accounts.tokens import api_token_create
from portal.models import Interrupt
from portal.reviews.threads import thread_start
from portal.runs.worker import Worker
from tests.api.roundtrips import round_trips
from tests.factories import make_interrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

APPROVAL_ROUND_TRIPS = 6  # docs/benchmarks.md lists each
START_ROUND_TRIPS = 6


def _post(client, token, url, body):
    return client.post(
        url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def _approve(client, token, interrupt):
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    return _post(client, token, f"/api/threads/{interrupt.thread.pk}/resume", body)


def test_an_api_approval_takes_six_round_trips_begin_and_commit_included(client, reviewer):
    token = api_token_create(user=reviewer, name="t")[1]
    _approve(client, token, make_interrupt())  # the token's last use is written once a minute
    interrupt = make_interrupt()

    with round_trips() as trips:
        response = _approve(client, token, interrupt)

    assert response.status_code == 202, response.content
    assert len(trips) == APPROVAL_ROUND_TRIPS, "\n".join(trips)
    assert trips.count("BEGIN") == 1 and trips[-1] == "COMMIT"
    assert sum("pg_notify" in trip for trip in trips) == 1  # three wake-ups, one statement
    # The steps the tool call is looked for in come with the lock, not in a query after it.
    assert not any(trip.startswith('SELECT "portal_checkpoint"') for trip in trips)
    # Every other decision waits for the chains' lock: under it, only the decision's insert
    # (which reads the head and takes the hash itself) and the commit. The closing writes
    # (and their wake-ups) go before the lock, in the same round trip.
    [sealed] = [trip for trip in trips if "pg_advisory_xact_lock" in trip]
    lock = sealed.index("; SELECT pg_advisory_xact_lock(")
    insert = sealed.index('; INSERT INTO "portal_decision"')
    assert sealed.startswith("WITH w0 AS (UPDATE") and "pg_notify" in sealed[:lock], sealed
    assert lock < insert and "sha256" in sealed[insert:], sealed
    assert trips[trips.index(sealed) + 1 :] == ["COMMIT"], "\n".join(trips)


def test_an_api_start_takes_six_round_trips_begin_and_commit_included(client, support_agent):
    token = api_token_create(user=support_agent, name="t")[1]
    body = {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    _post(client, token, "/api/threads", body)

    with round_trips() as trips:
        response = _post(client, token, "/api/threads", body)

    assert response.status_code == 202, response.content
    assert len(trips) == START_ROUND_TRIPS, "\n".join(trips)
    assert trips[1] == "BEGIN" and trips[-1] == "COMMIT"


def test_the_token_its_user_and_the_users_permissions_come_in_one_round_trip(client, reviewer):
    token = api_token_create(user=reviewer, name="t")[1]
    client.get("/api/interrupts/int_none", HTTP_AUTHORIZATION=f"Bearer {token}")

    with round_trips() as trips:
        response = client.get("/api/interrupts/int_none", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 404
    assert len(trips) == 2, "\n".join(trips)  # the token (user, permissions), the request


def test_a_claimed_request_read_alone_takes_three_round_trips(client, reviewer):
    from portal.reviews.claims import interrupt_claim

    token = api_token_create(user=reviewer, name="t")[1]
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)
    url = f"/api/interrupts/{interrupt.pk}"
    client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")

    with round_trips() as trips:
        response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 200 and response.json()["claimed_by"] == reviewer.username
    # The token; the request with its thread, owner, claimant and which relations have
    # rows (none here); the user's words, from the checkpoints.
    assert len(trips) == 3, "\n".join(trips)


def test_an_approval_of_the_refunds_agents_own_pause_takes_as_many_round_trips(
    client, reviewer, support_agent
):
    # The request as the runtime leaves it (the tool's call two steps before the pause,
    # the call marked in flight between), not as the factory builds it: the call's
    # arguments come with the lock here too.
    say = {"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]}
    token = api_token_create(user=reviewer, name="t")[1]
    threads = [thread_start(agent="refunds", input=say, user=support_agent)[0] for _ in range(2)]
    Worker(name="test-worker").run_forever(once=True)
    first, second = (Interrupt.objects.select_related("thread").get(thread=t) for t in threads)
    _approve(client, token, first)

    with round_trips() as trips:
        response = _approve(client, token, second)

    assert response.status_code == 202, response.content
    assert len(trips) == APPROVAL_ROUND_TRIPS, "\n".join(trips)
    assert not any(trip.startswith('SELECT "portal_checkpoint"') for trip in trips)
