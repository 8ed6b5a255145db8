"""The JSON API: token auth, listing, starting, reading and resuming threads, bad input."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from portal.accounts.tokens import api_token_create, hash_token
from portal.models import ApiToken, Decision, Interrupt, Run, Thread
from tests.factories import (
    make_decision,
    make_interrupt,
    make_thread,
    make_tool_approval,
    pause_again,
)

pytestmark = pytest.mark.django_db


class Api:
    """A test client that sends a bearer token and JSON."""

    def __init__(self, client, token: str | None) -> None:
        self.client, self.token = client, token

    def _headers(self):
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}

    def get(self, url, **params):
        return self.client.get(url, params, **self._headers())

    def post(self, url, body=None, *, raw: str | None = None):
        data = raw if raw is not None else json.dumps(body)
        return self.client.post(url, data, content_type="application/json", **self._headers())


def api_for(client, user) -> Api:
    return Api(client, api_token_create(user=user, name="test")[1])


def resume_body(interrupt, value, **extra):
    return {"resume": value, "resume_interrupt_id": interrupt.pk, **extra}


def resume_url(interrupt_or_thread):
    thread = getattr(interrupt_or_thread, "thread", interrupt_or_thread)
    return f"/api/threads/{thread.pk}/resume"


# --- tokens ----------------------------------------------------------------------------


def test_create_api_token_prints_the_token_last_and_stores_only_its_hash(reviewer, client):
    out = StringIO()

    call_command("create_api_token", "rita-reviewer", "--name", "ci", "--scope", "read", stdout=out)

    token = out.getvalue().strip().splitlines()[-1]
    row = ApiToken.objects.get()
    assert row.user == reviewer and row.name == "ci"
    assert row.token_hash == hash_token(token)
    assert token not in row.token_hash
    assert Api(client, token).get("/api/interrupts").status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_create_api_token_for_an_unknown_user_fails_clearly():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user 'ghost'"):
        call_command("create_api_token", "ghost", "--name", "x", "--scope", "read")


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer ", "Basic abc", "Token x"])
def test_a_missing_or_wrong_token_gets_401(client, reviewer, header):
    api_token_create(user=reviewer)
    headers = {"HTTP_AUTHORIZATION": header} if header else {}

    response = client.get("/api/interrupts", **headers)

    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]


def test_a_token_of_a_deactivated_user_gets_401(client, reviewer):
    api = api_for(client, reviewer)
    reviewer.is_active = False
    reviewer.save()

    assert api.get("/api/interrupts").status_code == 401


def test_every_endpoint_answers_403_when_the_api_is_turned_off(client, reviewer, settings):
    interrupt = make_interrupt()
    api = api_for(client, reviewer)
    settings.PORTAL_API_ENABLED = False

    assert api.get("/api/interrupts").status_code == 403
    assert (
        api.post(resume_url(interrupt), resume_body(interrupt, {"approved": True})).status_code
        == 403
    )
    assert Api(client, None).get("/api/interrupts").status_code == 403
    assert "PORTAL_API_ENABLED" in api.get("/api/interrupts").json()["detail"]
    assert Decision.objects.count() == 0


def test_the_openapi_document_and_docs_are_served(client):
    doc = client.get("/api/openapi.json")

    assert doc.status_code == 200
    paths = doc.json()["paths"]
    assert {
        "/api/interrupts",
        "/api/interrupts/{interrupt_id}",
        "/api/threads",
        "/api/threads/{thread_id}",
        "/api/threads/{thread_id}/resume",
    } <= set(paths)
    assert "BearerToken" in doc.json()["components"]["securitySchemes"]
    assert client.get("/api/docs").status_code == 200


# --- listing and reading -----------------------------------------------------------------


def test_pending_interrupts_are_listed_with_their_fields_and_paginated(client, reviewer):
    first = make_interrupt()
    make_interrupt()
    decided = make_interrupt()
    make_decision(interrupt=decided, reviewer=reviewer)
    api = api_for(client, reviewer)

    page = api.get("/api/interrupts", status="pending", limit=1).json()

    assert page["count"] == 2
    [item] = page["items"]
    assert item["id"] == first.pk
    assert set(item) >= {
        "id",
        "thread_id",
        "agent",
        "node",
        "reason",
        "message",
        "value",
        "response_schema",
        "created_at",
        "expires_at",
        "claimed_by",
    }
    assert item["thread_id"] == str(first.thread_id)
    assert item["value"] == {"order_id": "A-1001", "amount": 42.5}
    second = api.get("/api/interrupts", status="pending", limit=1, offset=1).json()
    assert second["items"][0]["id"] != first.pk
    assert api.get("/api/interrupts", status="resolved").json()["count"] == 1
    assert api.get("/api/interrupts").json()["count"] == 3


def test_an_unknown_status_filter_is_422(client, reviewer):
    response = api_for(client, reviewer).get("/api/interrupts", status="bogus")

    assert response.status_code == 422
    assert response.json()["errors"][0].startswith("$.status:")


def test_support_staff_list_only_their_own_threads_requests(client, support_agent):
    mine = make_interrupt(owner=support_agent)
    make_interrupt()

    page = api_for(client, support_agent).get("/api/interrupts").json()

    assert [i["id"] for i in page["items"]] == [mine.pk]


def test_one_interrupt_is_returned_and_others_are_404(client, reviewer, outsider):
    interrupt = make_interrupt()

    ok = api_for(client, reviewer).get(f"/api/interrupts/{interrupt.pk}")
    hidden = api_for(client, outsider).get(f"/api/interrupts/{interrupt.pk}")
    missing = api_for(client, reviewer).get("/api/interrupts/int_nope")

    assert ok.status_code == 200 and ok.json()["id"] == interrupt.pk
    assert hidden.status_code == 404
    assert missing.status_code == 404


def test_a_thread_shows_status_messages_and_the_pending_interrupt(client, reviewer):
    interrupt = make_interrupt()

    body = api_for(client, reviewer).get(f"/api/threads/{interrupt.thread_id}").json()

    assert body["status"] == "interrupted"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert body["messages"][0]["content"] == "Refund $42.50 for order A-1001, it arrived broken."
    assert body["pending_interrupt"]["id"] == interrupt.pk


def test_a_thread_that_is_not_paused_has_no_pending_interrupt(client, reviewer):
    thread = make_thread()

    body = api_for(client, reviewer).get(f"/api/threads/{thread.pk}").json()

    assert body["pending_interrupt"] is None


@pytest.mark.parametrize("thread_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_thread_is_404(client, reviewer, thread_id):
    assert api_for(client, reviewer).get(f"/api/threads/{thread_id}").status_code == 404


def test_a_stranger_gets_404_for_a_thread(client, support_agent, other_support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = api_for(client, other_support_agent).get(f"/api/threads/{interrupt.thread_id}")

    assert response.status_code == 404


# --- starting threads --------------------------------------------------------------------


def test_starting_a_thread_answers_202_and_queues_a_run(client, support_agent):
    body = {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "Refund $5"}]}}

    response = api_for(client, support_agent).post("/api/threads", body)

    assert response.status_code == 202
    data = response.json()
    thread = Thread.objects.get(pk=data["thread_id"])
    assert thread.owner == support_agent and thread.agent == "refunds"
    assert Run.objects.get(pk=data["run_id"]).kind == Run.Kind.START


def test_a_role_that_cannot_start_gets_403(client, auditor):
    body = {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "hi"}]}}

    response = api_for(client, auditor).post("/api/threads", body)

    assert response.status_code == 403
    assert Thread.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ({"agent": "nope", "input": {"messages": [{"role": "user", "content": "x"}]}}, "$.agent:"),
        ({"agent": "refunds", "input": {"messages": []}}, "$.input:"),
        ({"agent": "refunds", "input": "hello"}, "$.input:"),
        ({"input": {"messages": [{"role": "user", "content": "x"}]}}, "$.agent: required"),
        ({"agent": "refunds", "input": {}, "extra": 1}, "$.extra: unexpected field"),
    ],
)
def test_starting_with_bad_input_is_422_with_error_lines(client, support_agent, body, line):
    response = api_for(client, support_agent).post("/api/threads", body)

    assert response.status_code == 422
    assert any(e.startswith(line) for e in response.json()["errors"]), response.json()
    assert Thread.objects.count() == 0


# --- resuming ------------------------------------------------------------------------------


def test_resuming_records_the_decision_and_answers_202(client, reviewer):
    interrupt = make_interrupt()

    response = api_for(client, reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": True}, note="ok")
    )

    assert response.status_code == 202
    data = response.json()
    decision = Decision.objects.get(interrupt=interrupt)
    assert data["decision_id"] == decision.pk and data["outcome"] == "approved"
    run = Run.objects.get(pk=data["run_id"])
    assert run.input == {
        "resume": {"approved": True, "note": "ok"},
        "resume_interrupt_id": interrupt.pk,
    }


# Statements one approval sends, from the token check to the answer (BEGIN and COMMIT
# included): lower it when it falls, never raise it to make a change pass.
APPROVAL_QUERIES = {"postgresql": 20, "sqlite": 16}


@pytest.mark.django_db(transaction=True)
def test_an_approval_through_the_api_sends_a_pinned_number_of_queries(client, reviewer, settings):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    # No socket is open, as when a client approves with no reviewer watching the queue.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    interrupt = make_interrupt()
    api = api_for(client, reviewer)
    api.get("/api/interrupts")  # the first request's one-time costs are not the approval's

    with CaptureQueriesContext(connection) as sent:
        response = api.post(resume_url(interrupt), resume_body(interrupt, {"approved": True}))

    assert response.status_code == 202
    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    statements = [q["sql"] for q in sent.captured_queries]
    assert not [s for s in statements if "SAVEPOINT" in s], statements
    assert len(statements) <= APPROVAL_QUERIES[connection.vendor], "\n".join(statements)


# Statements a paused thread's document sends (GET /api/threads/<id>, as the answer to a
# start with ``wait``), the token check and the permission reads included.
THREAD_DOCUMENT_QUERIES = 6


@pytest.mark.django_db(transaction=True)
def test_a_paused_threads_document_sends_a_pinned_number_of_queries(client, reviewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    interrupt = make_interrupt()
    api = api_for(client, reviewer)
    api.get("/api/interrupts")  # the first request's one-time costs are not the document's

    with CaptureQueriesContext(connection) as sent:
        response = api.get(f"/api/threads/{interrupt.thread_id}")

    assert response.status_code == 200
    assert response.json()["pending_interrupt"]["id"] == interrupt.pk
    statements = [q["sql"] for q in sent.captured_queries]
    assert len(statements) <= THREAD_DOCUMENT_QUERIES, "\n".join(statements)


def test_a_threads_pending_request_is_the_request_as_its_own_endpoint_shows_it(
    client, reviewer, auditor
):
    from django.contrib.auth.models import Group

    from portal.models import Approval, Assignment, RoutingEvent
    from portal.reviews.claims import interrupt_claim

    plain, busy = make_interrupt(), make_interrupt()
    interrupt_claim(interrupt=busy, user=reviewer)
    Approval.objects.create(interrupt=busy, reviewer=auditor, outcome="approved")
    Assignment.objects.create(interrupt=busy, user=reviewer, source="interrupt")
    Assignment.objects.create(
        interrupt=busy, group=Group.objects.create(name="leads"), source="escalation"
    )
    for action in ("assigned", "reminded", "escalated"):
        RoutingEvent.objects.create(interrupt=busy, action=action)
    api = api_for(client, reviewer)

    for request in (plain, busy):
        thread = api.get(f"/api/threads/{request.thread_id}").json()
        alone = api.get(f"/api/interrupts/{request.pk}").json()
        assert thread["pending_interrupt"] == alone
    assert alone["claimed_by"] == reviewer.username and alone["user_message"]
    assert len(alone["approvals"]) == 1 and len(alone["assigned_to"]) == 2
    assert alone["reminded_at"] and alone["escalated_at"]


def test_a_request_read_alone_is_the_one_the_orm_gives_for_each_who_may_see_it(
    reviewer, auditor, support_agent, admin_user
):
    from django.contrib.auth.models import AnonymousUser, Group

    from portal.api.lookups import visible_interrupts, visible_request
    from portal.api.schemas import InterruptOut
    from portal.models import Approval, Assignment, RoutingEvent
    from portal.reviews.claims import interrupt_claim

    plain, owned = make_interrupt(), make_interrupt(owner=support_agent)
    voted, assigned, reminded = (make_interrupt(owner=support_agent) for _ in range(3))
    interrupt_claim(interrupt=voted, user=reviewer)
    # Each relation alone on a request of its own, so flags read in the wrong order show.
    Approval.objects.create(interrupt=voted, reviewer=auditor, outcome="approved")
    Assignment.objects.create(interrupt=assigned, group=Group.objects.create(name="leads"))
    RoutingEvent.objects.create(interrupt=reminded, action="reminded")
    RoutingEvent.objects.create(interrupt=assigned, action="assigned")  # not shown

    users = (reviewer, auditor, support_agent, admin_user, AnonymousUser())
    requests = (plain, owned, voted, assigned, reminded)
    for user in users:
        for request in requests:
            orm = visible_interrupts(user).filter(pk=request.pk).first()
            read = visible_request(user, request.pk)
            assert (read is None) == (orm is None), (user, request)
            if orm is not None:
                shown = InterruptOut.from_orm(read).model_dump()
                assert shown == InterruptOut.from_orm(orm).model_dump()
    assert visible_request(support_agent, plain.pk) is None  # not theirs
    assert visible_request(AnonymousUser(), owned.pk) is None
    assert visible_request(reviewer, "int_none") is None
    shown = InterruptOut.from_orm(visible_request(reviewer, voted.pk))
    assert shown.claimed_by == reviewer.username and len(shown.approvals) == 1
    assert not shown.assigned_to and shown.reminded_at is None
    assert len(InterruptOut.from_orm(visible_request(reviewer, assigned.pk)).assigned_to) == 1
    assert InterruptOut.from_orm(visible_request(reviewer, reminded.pk)).reminded_at


@pytest.mark.parametrize("persona", ["auditor", "support_agent"])
def test_resuming_without_the_reviewer_permission_is_403(client, request, persona):
    user = request.getfixturevalue(persona)
    interrupt = make_interrupt(owner=user)

    response = api_for(client, user).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": True})
    )

    assert response.status_code == 403
    assert Decision.objects.count() == 0


def test_resuming_a_thread_that_is_not_paused_is_404(client, reviewer):
    thread = make_thread()

    response = api_for(client, reviewer).post(
        resume_url(thread), {"resume": {"approved": True}, "resume_interrupt_id": "int_x"}
    )

    assert response.status_code == 404
    assert "not paused" in response.json()["detail"]


def test_resuming_an_already_decided_request_is_409_naming_who_and_when(
    client, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=reviewer)
    # The resume has not run yet, so the checkpoint still says paused on this request.

    response = api_for(client, second_reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": False})
    )

    assert response.status_code == 409
    assert "already decided by rita-reviewer at" in response.json()["detail"]
    assert Decision.objects.count() == 1


def test_resuming_with_a_stale_interrupt_id_is_409(client, reviewer):
    old = make_interrupt()
    new = pause_again(old.thread)
    api = api_for(client, reviewer)

    stale = api.post(resume_url(old), resume_body(old, {"approved": True}))
    unknown = api.post(
        resume_url(old), {"resume": {"approved": True}, "resume_interrupt_id": "int_unknown"}
    )
    missing = api.post(resume_url(old), {"resume": {"approved": True}})

    assert stale.status_code == 409
    assert unknown.status_code == 409 and new.pk in unknown.json()["detail"]
    assert missing.status_code == 409 and "resume_interrupt_id" in missing.json()["detail"]
    assert Decision.objects.count() == 0


def test_a_claim_by_another_reviewer_is_403_but_not_for_an_admin(
    client, reviewer, second_reviewer, admin_user
):
    from portal.reviews.claims import interrupt_claim

    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)

    blocked = api_for(client, second_reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": True})
    )
    admin = api_for(client, admin_user).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": True})
    )

    assert blocked.status_code == 403 and "claimed" in blocked.json()["detail"]
    assert admin.status_code == 202


# --- the bad-input matrix ------------------------------------------------------------------

STRICT_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "amount": {"type": "number", "maximum": 100},
        "note": {"type": "string"},
    },
    "required": ["approved", "amount"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ({"approved": "yes", "amount": 5}, ["$.approved: expected boolean, got str"]),
        ({"approved": True, "amount": "5"}, ["$.amount: expected number, got str"]),
        ({"approved": True}, ["$.amount: required"]),
        ({}, ["$.approved: required", "$.amount: required"]),
        ({"approved": True, "amount": 5, "admin": True}, ["$: unexpected field 'admin'"]),
        ({"approved": True, "amount": 500}, ["$.amount: 500 is greater than the maximum of 100"]),
        ("approve", ["$: expected object, got str"]),
        ([True], ["$: expected object, got list"]),
    ],
)
def test_a_value_that_breaks_the_schema_is_422_with_the_error_lines(
    client, reviewer, value, errors
):
    interrupt = make_interrupt(schema=STRICT_SCHEMA)

    response = api_for(client, reviewer).post(resume_url(interrupt), resume_body(interrupt, value))

    assert response.status_code == 422
    assert response.json()["errors"] == errors
    assert Decision.objects.count() == 0
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not Run.objects.filter(kind=Run.Kind.RESUME).exists()


def test_edited_arguments_of_the_wrong_type_are_422(client, reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    response = api_for(client, reviewer).post(
        resume_url(interrupt),
        resume_body(interrupt, {"approved": True, "args": {call_id: {"amount": True}}}),
    )

    assert response.status_code == 422
    assert f"$.args.{call_id}.amount: expected number, got bool" in response.json()["errors"]
    assert f"$.args.{call_id}.recipient: required" in response.json()["errors"]


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ({"resume_interrupt_id": "x"}, "$.resume: required"),
        (
            {"resume": {"approved": True}, "resume_interrupt_id": "x", "force": True},
            "$.force: unexpected field",
        ),
        ({"resume": {"approved": True}, "resume_interrupt_id": 5}, "$.resume_interrupt_id:"),
        ({"resume": {"approved": True}, "resume_interrupt_id": "x", "note": 7}, "$.note:"),
    ],
)
def test_a_body_of_the_wrong_shape_is_422(client, reviewer, body, line):
    interrupt = make_interrupt()

    response = api_for(client, reviewer).post(resume_url(interrupt), body)

    assert response.status_code == 422
    assert any(e.startswith(line) for e in response.json()["errors"]), response.json()
    assert Decision.objects.count() == 0


def test_an_oversized_note_is_422(client, reviewer, settings):
    settings.PORTAL_MAX_NOTE_CHARS = 50
    interrupt = make_interrupt()

    response = api_for(client, reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": False}, note="x" * 51)
    )

    assert response.status_code == 422
    assert response.json()["errors"] == ["note: 51 characters, over the limit of 50"]
    assert Decision.objects.count() == 0


def test_an_oversized_value_is_422(client, reviewer, settings):
    settings.PORTAL_MAX_INPUT_BYTES = 1024
    interrupt = make_interrupt(schema=None)

    response = api_for(client, reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": True, "blob": "b" * 2000})
    )

    assert response.status_code == 422
    assert "over the limit of 1024" in response.json()["errors"][0]


@pytest.mark.parametrize("raw", ["{not json", "approved=true", ""])
def test_a_body_that_is_not_json_is_refused(client, reviewer, raw):
    interrupt = make_interrupt()

    response = api_for(client, reviewer).post(resume_url(interrupt), raw=raw)

    assert response.status_code in (400, 422)
    assert response.json()["detail"]
    assert Decision.objects.count() == 0


def test_html_in_a_note_is_stored_as_text_and_rendered_escaped(client, reviewer):
    interrupt = make_interrupt()
    note = '<img src=x onerror="alert(1)"><script>steal()</script>'

    response = api_for(client, reviewer).post(
        resume_url(interrupt), resume_body(interrupt, {"approved": False}, note=note)
    )

    assert response.status_code == 202
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.note == note
    assert decision.value["note"] == note
    client.force_login(reviewer)
    page = client.get(f"/interrupts/{interrupt.pk}/").content.decode()
    assert note not in page
    assert "&lt;script&gt;steal()&lt;/script&gt;" in page


# --- caps ------------------------------------------------------------------------------


def test_a_limit_over_the_maximum_is_422_naming_the_maximum(client, reviewer):
    api = api_for(client, reviewer)

    response = api.get("/api/interrupts", limit=101)

    assert response.status_code == 422
    assert response.json()["errors"] == ["$.limit: Input should be less than or equal to 100"]
    assert api.get("/api/interrupts", limit=100).status_code == 200
    spec = client.get("/api/openapi.json").json()
    [limit] = [
        p for p in spec["paths"]["/api/interrupts"]["get"]["parameters"] if p["name"] == "limit"
    ]
    assert limit["schema"]["maximum"] == 100


def test_listing_fifty_requests_costs_the_same_queries_as_listing_one(
    client, reviewer, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    api = api_for(client, reviewer)
    make_interrupt(text="the first request's words")
    with CaptureQueriesContext(connection) as for_one:
        one = api.get("/api/interrupts", status="pending").json()
    assert one["items"][0]["user_message"] == "the first request's words"
    assert len(for_one) <= 10  # the page, its count, and one query per prefetch
    for n in range(49):
        make_interrupt(text=f"words {n}")
    with django_assert_max_num_queries(len(for_one)):
        fifty = api.get("/api/interrupts", status="pending").json()
    assert fifty["count"] == 50
    assert [i["user_message"] for i in fifty["items"]][1:] == [f"words {n}" for n in range(49)]


def test_the_listed_user_message_is_found_however_far_back_it_is(client, reviewer):
    from agents.checkpoint import CheckpointWrite, ThreadStatus
    from agents.state import Message
    from tests.factories import _pause, _put, make_thread

    thread = make_thread(text="words from long ago")
    for n in range(12):  # steps without a user message, more than a page reads at once
        _put(
            thread,
            CheckpointWrite(
                status=ThreadStatus.RUNNING,
                next_node="MAIN",
                new_messages=[Message(role="assistant", content=f"step {n}").to_dict()],
            ),
        )
    _pause(
        thread,
        schema=None,
        value=None,
        message="Go on?",
        reason="input_required",
        node="MAIN",
        tool_call_id=None,
        new_messages=[],
    )
    make_interrupt(text="recent words")

    items = api_for(client, reviewer).get("/api/interrupts").json()["items"]

    assert sorted(i["user_message"] for i in items) == ["recent words", "words from long ago"]


def test_an_offset_too_large_for_the_database_is_422_not_a_server_error(client, reviewer):
    api = api_for(client, reviewer)

    response = api.get("/api/interrupts", offset=10**20)

    assert response.status_code == 422
    assert response.json()["errors"] == ["$.offset: Input should be less than or equal to 1000000"]
    assert api.get("/api/interrupts", offset=1_000_000).status_code == 200


def test_a_waiting_answers_looks_and_thread_read_load_as_the_orm_does(support_agent):
    # portal.api.sql's statements read through a cursor: the same answers as the ORM's
    # queries they replace, with an owner or without, on SQLite too.
    import uuid

    from portal.api import threads

    def fields(row):
        return {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}

    owned, ownerless = make_thread(owner=support_agent), make_thread(owner=None)
    for thread in (owned, ownerless):
        for key in (thread.pk, str(thread.pk)):
            read = threads._thread_with_owner(key)
            orm = Thread.objects.select_related("owner").get(pk=thread.pk)
            assert fields(read) == fields(orm)
            assert (read.owner and fields(read.owner)) == (orm.owner and fields(orm.owner))
    with pytest.raises(Thread.DoesNotExist):
        threads._thread_with_owner(uuid.uuid4())

    run = Run.objects.create(thread=owned, kind=Run.Kind.START)
    for status, busy in [
        (Run.Status.QUEUED, True),
        (Run.Status.RUNNING, True),
        (Run.Status.SUCCEEDED, False),
    ]:
        Run.objects.filter(pk=run.pk).update(status=status)
        assert threads._thread_busy(str(owned.pk)) is busy
        assert threads._thread_busy(owned.pk) is busy
    assert threads._thread_busy(ownerless.pk) is False
