"""Bad input is a 4xx naming the problem, never a 500, and nothing is recorded.

One matrix across the JSON API, the HTML forms and the query strings. It runs on SQLite
and on PostgreSQL, which refuses NUL characters in text and ``jsonb`` where SQLite would
store them: the portal refuses them the same way on both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.utils import quote
from django.test import AsyncClient, Client

from portal.accounts.tokens import api_token_create
from portal.models import Checkpoint, Decision, Interrupt, Run, Thread
from tests.factories import make_interrupt, make_thread, make_user

pytestmark = pytest.mark.django_db

BIG = "x" * 3_000_000  # over Django's 2.5 MB DATA_UPLOAD_MAX_MEMORY_SIZE
DEEP = "[" * 900 + "]" * 900
JSON_SCHEMA = {"type": "array", "items": {"type": "object"}}  # answered in a JSON textarea


@dataclass
class Case:
    name: str
    who: str  # api-support | api-reviewer | support | reviewer | auditor | admin
    method: str
    url: str  # {thread}, {interrupt}... are filled in from the world fixture
    status: int
    says: str  # the response names the problem with these words
    body: Any = None  # dict: form fields (or JSON for the API); str: raw JSON
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def resume(value: str, note: str = '""', interrupt: str = '"{interrupt}"') -> str:
    return f'{{"resume": {value}, "resume_interrupt_id": {interrupt}, "note": {note}}}'


def start(content: str) -> str:
    message = f'{{"role": "user", "content": {content}}}'
    return f'{{"agent": "refunds", "input": {{"messages": [{message}]}}}}'


NUL = "contains a NUL character"
CASES = [
    # --- the JSON API ---------------------------------------------------------------------
    Case(
        "api start: NUL in message content",
        "api-support",
        "post",
        "/api/threads",
        400,
        NUL,
        start(r'"a\u0000b"'),
    ),
    Case(
        "api start: lone surrogate",
        "api-support",
        "post",
        "/api/threads",
        400,
        "lone surrogate",
        start(r'"\ud800"'),
    ),
    Case(
        "api start: 3 MB input",
        "api-support",
        "post",
        "/api/threads",
        413,
        "too large",
        start(json.dumps(BIG)),
    ),
    Case(
        "api resume: NaN",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        "NaN is not a JSON number",
        resume('{"approved": NaN}'),
    ),
    Case(
        "api resume: 1e400",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        "inf is not a JSON number",
        resume('{"approved": true, "n": 1e400}'),
    ),
    Case(
        "api resume: nested 900 deep",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        "nested deeper than",
        resume(DEEP),
    ),
    Case(
        "api resume: NUL in the note",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        NUL,
        resume('{"approved": true}', r'"a\u0000"'),
    ),
    Case(
        "api resume: NUL in a value",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        NUL,
        resume(r'{"approved": true, "note": "\u0000"}'),
    ),
    Case(
        "api resume: lone surrogate in a value",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        "lone surrogate",
        resume(r'{"approved": true, "note": "\udc00"}'),
    ),
    Case(
        "api resume: NUL in the request id",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        400,
        NUL,
        resume('{"approved": true}', interrupt=r'"int\u0000"'),
    ),
    Case(
        "api resume: 3 MB answer",
        "api-reviewer",
        "post",
        "/api/threads/{thread}/resume",
        413,
        "too large",
        resume(json.dumps({"approved": True, "note": BIG})),
    ),
    Case(
        "api resume: NUL in the thread id",
        "api-reviewer",
        "post",
        "/api/threads/a%00b/resume",
        400,
        NUL,
        resume("true"),
    ),
    Case("api interrupt: NUL in the id", "api-reviewer", "get", "/api/interrupts/int%00", 400, NUL),
    Case("api thread: NUL in the id", "api-reviewer", "get", "/api/threads/%00", 400, NUL),
    Case(
        "api list: NUL in a query parameter",
        "api-reviewer",
        "get",
        "/api/interrupts?status=%00",
        400,
        NUL,
    ),
    # --- the HTML forms -------------------------------------------------------------------
    Case(
        "chat start: NUL in the message",
        "support",
        "post",
        "/chat/",
        400,
        NUL,
        {"agent": "refunds", "message": "refund\x00 please"},
    ),
    Case(
        "chat start: 3 MB message",
        "support",
        "post",
        "/chat/",
        413,
        "too large",
        {"agent": "refunds", "message": BIG},
    ),
    Case(
        "chat follow-up: NUL in the message",
        "support",
        "post",
        "/chat/{done_thread}/",
        400,
        NUL,
        {"message": "again\x00"},
    ),
    Case(
        "chat withdraw: NUL in the thread id",
        "support",
        "post",
        "/chat/a%00/withdraw",
        400,
        NUL,
        {},
    ),
    Case(
        "decide: NUL in the note",
        "reviewer",
        "post",
        "/interrupts/{interrupt}/decide",
        400,
        NUL,
        {"resume_interrupt_id": "{interrupt}", "action": "approve", "note": "ok\x00"},
    ),
    Case(
        "decide: NUL in the request id",
        "reviewer",
        "post",
        "/interrupts/{interrupt}/decide",
        400,
        NUL,
        {"resume_interrupt_id": "\x00", "action": "approve"},
    ),
    Case(
        "decide: 3 MB note",
        "reviewer",
        "post",
        "/interrupts/{interrupt}/decide",
        413,
        "too large",
        {"resume_interrupt_id": "{interrupt}", "action": "approve", "note": BIG},
    ),
    Case(
        "decide as JSON: NaN",
        "reviewer",
        "post",
        "/interrupts/{json_interrupt}/decide",
        422,
        "NaN is not a JSON number",
        {"resume_interrupt_id": "{json_interrupt}", "value": "[NaN]"},
    ),
    Case(
        "decide as JSON: 1e400",
        "reviewer",
        "post",
        "/interrupts/{json_interrupt}/decide",
        422,
        "inf is not a JSON number",
        {"resume_interrupt_id": "{json_interrupt}", "value": '[{"n": 1e400}]'},
    ),
    Case(
        "decide as JSON: escaped NUL",
        "reviewer",
        "post",
        "/interrupts/{json_interrupt}/decide",
        422,
        NUL,
        {"resume_interrupt_id": "{json_interrupt}", "value": r'[{"a": "\u0000"}]'},
    ),
    Case(
        "decide as JSON: lone surrogate",
        "reviewer",
        "post",
        "/interrupts/{json_interrupt}/decide",
        422,
        "lone surrogate",
        {"resume_interrupt_id": "{json_interrupt}", "value": r'[{"a": "\ud800"}]'},
    ),
    Case(
        "decide as JSON: nested 900 deep",
        "reviewer",
        "post",
        "/interrupts/{json_interrupt}/decide",
        422,
        "nested deeper than",
        {"resume_interrupt_id": "{json_interrupt}", "value": DEEP},
    ),
    Case("claim: NUL in the request id", "reviewer", "post", "/interrupts/%00/claim", 400, NUL, {}),
    Case(
        "admin decide: NUL in the note",
        "admin",
        "post",
        "/admin/portal/interrupt/{admin_interrupt}/decide/",
        400,
        NUL,
        {"resume_interrupt_id": "{interrupt}", "action": "approve", "note": "ok\x00"},
    ),
    Case(
        "admin decide as JSON: NaN",
        "admin",
        "post",
        "/admin/portal/interrupt/{admin_json_interrupt}/decide/",
        422,
        "NaN is not a JSON number",
        {"resume_interrupt_id": "{json_interrupt}", "value": "[NaN]"},
    ),
    Case(
        "admin: NUL in a changelist search",
        "admin",
        "get",
        "/admin/portal/decision/?q=%00",
        400,
        NUL,
    ),
    # --- query strings and ids in addresses -----------------------------------------------
    Case(
        "history: a day with no day after it",
        "auditor",
        "get",
        "/history/?date_to=9999-12-31",
        200,
        "Pick a day between 1900-01-01 and 9998-12-31",
    ),
    Case("history: NUL in the search", "auditor", "get", "/history/?q=%00", 400, NUL),
    Case(
        "history export: a day with no day after it",
        "auditor",
        "get",
        "/history/export.csv?date_to=9999-12-31",
        400,
        "Pick a day between",
    ),
    Case(
        "history export: NUL in a filter",
        "auditor",
        "get",
        "/history/export.jsonl?agent=%00",
        400,
        NUL,
    ),
    Case(
        "history: a decision id past any integer column",
        "auditor",
        "get",
        "/history/99999999999999999999999/",
        404,
        "No such decision",
    ),
    Case(
        "metrics: a day with no day after it",
        "auditor",
        "get",
        "/metrics/?date_to=9999-12-31",
        200,
        "Pick a day between",
    ),
    Case("queue: NUL in a filter", "reviewer", "get", "/queue/?agent=%00", 400, NUL),
    Case("queue: NUL in the page cursor", "reviewer", "get", "/queue/?after=%00", 400, NUL),
    Case("threads: NUL in the page cursor", "auditor", "get", "/threads/?after=x%00", 400, NUL),
    Case("thread: NUL in the id", "auditor", "get", "/threads/%00/", 400, NUL),
    Case(
        "transcript: a checkpoint number past any integer column",
        "auditor",
        "get",
        "/threads/{thread}/transcript/?after=99999999999999999999999",
        200,
        "transcript",
    ),
    Case("interrupt: NUL in the id", "reviewer", "get", "/interrupts/a%00/", 400, NUL),
]


@pytest.fixture
def world(support_agent, reviewer, auditor, admin_user):
    interrupt = make_interrupt(owner=support_agent)
    json_interrupt = make_interrupt(owner=support_agent, schema=JSON_SCHEMA)
    done = make_thread(owner=support_agent)
    Thread.objects.filter(pk=done.pk).update(status=Thread.Status.DONE)
    return {
        "ids": {
            "thread": str(interrupt.thread_id),
            "interrupt": interrupt.pk,
            "json_interrupt": json_interrupt.pk,
            "done_thread": str(done.pk),
            "admin_interrupt": quote(interrupt.pk),
            "admin_json_interrupt": quote(json_interrupt.pk),
        },
        "users": {
            "support": support_agent,
            "reviewer": reviewer,
            "auditor": auditor,
            "admin": admin_user,
        },
        "tokens": {
            "api-support": api_token_create(user=support_agent, name="t")[1],
            "api-reviewer": api_token_create(user=reviewer, name="t")[1],
        },
    }


def fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, ident in ids.items():
            value = value.replace("{" + key + "}", ident)
        return value
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    return value


def counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Decision, Thread, Run, Interrupt, Checkpoint)
    }


def send(client: Client, case: Case, world: dict[str, Any]) -> Any:
    ids = world["ids"]
    url, body = fill(case.url, ids), fill(case.body, ids)
    kwargs: dict[str, Any] = {}
    if case.who.startswith("api-"):
        kwargs["HTTP_AUTHORIZATION"] = f"Bearer {world['tokens'][case.who]}"
        if case.method == "post":
            data = body if isinstance(body, str) else json.dumps(body)
            return client.post(url, data, content_type="application/json", **kwargs)
        return client.get(url, **kwargs)
    client.force_login(world["users"][case.who])
    if case.method == "post":
        return client.post(url, body or {})
    return client.get(url)


def text_of(response: Any) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input_is_refused_with_a_message_naming_it_and_nothing_is_recorded(case, world):
    client = Client(raise_request_exception=False)
    before = counts()

    response = send(client, case, world)

    body = text_of(response)
    assert response.status_code == case.status, body[:500]
    assert case.says in body, body[:2000]
    if case.who.startswith("api-"):
        problem = json.loads(body)
        assert set(problem) == {"detail", "errors"} and problem["errors"]
    assert counts() == before


def test_the_same_refusal_comes_through_the_asynchronous_stack(world, support_agent):
    client = AsyncClient(raise_request_exception=False)
    client.force_login(support_agent)
    before = counts()

    async def post() -> Any:
        return await client.post("/chat/", {"agent": "refunds", "message": "a\x00b"})

    from asgiref.sync import async_to_sync

    response = async_to_sync(post)()

    assert response.status_code == 400
    assert NUL in response.content.decode()
    assert "sam-support" in response.content.decode()  # the page knows who is logged in
    assert counts() == before


def test_the_well_formed_requests_of_the_matrix_are_recorded(world):
    # Without this the matrix could pass against endpoints that record nothing anyway.
    client = Client()
    ids, tokens = world["ids"], world["tokens"]
    started = client.post(
        "/api/threads",
        start('"a refund, please"'),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {tokens['api-support']}",
    )
    assert started.status_code == 202
    answered = client.post(
        f"/api/threads/{ids['thread']}/resume",
        fill(resume('{"approved": true}'), ids),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {tokens['api-reviewer']}",
    )
    assert answered.status_code == 202
    client.force_login(world["users"]["reviewer"])
    decided = client.post(
        f"/interrupts/{ids['json_interrupt']}/decide",
        {"resume_interrupt_id": ids["json_interrupt"], "value": '[{"a": 1}]'},
    )
    assert decided.status_code == 302
    assert Decision.objects.count() == 2


def test_the_upload_limit_in_the_matrix_is_djangos_default():
    assert len(BIG) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (r'"idempotency_key": "k\u0000"', "$.idempotency_key: contains a NUL character"),
        (r'"idempotency_key": "k\ud800"', "$.idempotency_key: contains a lone surrogate"),
        (r'"assign_to": {"users": ["a\u0000"]}', "$.assign_to.users[0]: contains a NUL"),
        (r'"assign_to": {"users": ["a\ud800"]}', "$.assign_to.users[0]: contains a lone"),
        (r'"assign_to": {"groups": ["g\u0000"]}', "$.assign_to.groups[0]: contains a NUL"),
    ],
)
def test_a_json_body_sent_as_another_content_type_is_checked_all_the_same(
    roles, settings, extra, says, content_type
):
    # django-ninja parses the body as JSON whatever the content type says.
    settings.PORTAL_API_RATE = ""
    bot = make_user("ivy-bot", role="agent")
    token = api_token_create(user=bot, name="bot", scopes=["request"])[1]
    before = counts()

    response = Client(raise_request_exception=False).post(
        "/api/requests",
        f'{{"agent": "invoice-bot", {extra}}}',
        content_type=content_type,
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert says in response.json()["errors"][0]
    assert counts() == before
