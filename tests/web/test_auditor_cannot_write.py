"""Auditors read; they never write. Every write endpoint (found from the URL resolver, not
listed by hand) and every websocket answers an auditor with a refusal, and nothing in the
database changes. Decisions also cannot be changed through the admin or the API."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from portal.models import Decision, Interrupt, Rule, RuleSimulation, RuleVersion, Run, Thread
from portal.reviews.external import RequestSpec, external_request_create
from portal.reviews.rule_simulation import rule_simulate
from tests.factories import (
    grant_manage_rules,
    make_decision,
    make_interrupt,
    make_rule_version,
    make_user,
)

WRITE_METHODS = ("post", "put", "patch", "delete")
# Routes that are not part of the product's write surface: signing in and out, the
# admin (auditors are not staff; see the admin test below), the API's own docs.
SKIPPED_PREFIXES = ("admin/", "login/", "logout/")
# A user's own profile (linking their Slack account decides nothing) and Slack's door
# (signed by Slack, not a session; tests/web/test_slack.py) are not either.
SKIPPED_NAMES = {
    "api:openapi-json",
    "api:openapi-view",
    "api:api-root",
    "slack_link",
    "slack_unlink",
    "slack_interactions",
}
# The writes that exist today; discovery must find at least these, so a broken
# discovery cannot pass by finding nothing.
KNOWN_WRITES = {
    "interrupt_decide",
    "interrupt_claim",
    "interrupt_unclaim",
    "chat",
    "chat_thread",
    "api:start_thread",
    "api:resume_thread",
    "api:claim_interrupt",
    "api:release_interrupt",
    "api:withdraw_interrupt",
    "api:retry_thread",
    "api:cancel_thread",
    "api:raise_request",
    "rule_new",
    "rule_edit",
    "rule_simulate",
    "rule_activate",
    "rule_switch_off",
}


def _routes(patterns=None, prefix="", namespace=""):
    """(qualified name, route text, kwarg names) of every named URL."""
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            ns = namespace
            if entry.namespace:
                ns = f"{namespace}{entry.namespace}:"
            yield from _routes(entry.url_patterns, route, ns)
        elif isinstance(entry, URLPattern) and entry.name:
            yield f"{namespace}{entry.name}", route, sorted(entry.pattern.regex.groupindex)


@pytest.fixture
def world(support_agent, reviewer):
    """A paused thread (the support agent's) and a decided one, so every route has real
    objects to point at."""
    pending = make_interrupt(owner=support_agent)
    decided = make_interrupt(owner=support_agent)
    decision = make_decision(interrupt=decided, reviewer=reviewer)
    external, _ = external_request_create(
        user=make_user("ivy-invoice-bot", role="agent"), spec=RequestSpec(agent="invoice-bot")
    )
    # A rule someone else wrote and simulated; one id stands for the rule, its version and
    # its simulation (the Rules pages' ``pk``).
    manager = grant_manage_rules(make_user("wanda-writes-rules"))
    version = make_rule_version(by=manager)
    rule_simulate(version, by=manager, days=1)
    return {
        "thread_id": pending.thread_id,
        "interrupt_id": pending.pk,
        "decision_id": decision.pk,
        "request_id": external.pk,
        "pk": version.pk,
    }


def _snapshot():
    return {
        "decisions": list(Decision.objects.order_by("id").values_list("id", "hash")),
        "runs": Run.objects.count(),
        "threads": Thread.objects.count(),
        "interrupts": list(
            Interrupt.objects.order_by("id").values_list("id", "status", "claimed_by_id")
        ),
        "rules": list(Rule.objects.order_by("id").values_list("id", "enabled", "active_version")),
        "rule versions": RuleVersion.objects.count(),
        "simulations": RuleSimulation.objects.count(),
    }


def _bodies(world):
    form = {
        "agent": "refunds",
        "message": "Refund everything.",
        "resume_interrupt_id": world["interrupt_id"],
        "approved": "true",
        "note": "auditor was here",
    }
    start = {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    api = {
        "api:start_thread": start,
        # The same route as start_thread (one path, GET lists, POST starts).
        "api:list_threads": start,
        "api:claim_interrupt": {},
        "api:release_interrupt": {},
        "api:withdraw_interrupt": {},
        "api:retry_thread": {},
        "api:cancel_thread": {},
        "api:resume_thread": {
            "resume": {"approved": True},
            "resume_interrupt_id": world["interrupt_id"],
        },
        "api:raise_request": {"agent": "invoice-bot", "title": "Pay invoice 7"},
    }
    return form, api


@pytest.mark.django_db
def test_an_auditor_gets_403_from_every_write_endpoint_and_nothing_changes(auditor, world):
    from portal.accounts.tokens import api_token_create

    _, token = api_token_create(user=auditor, name="audit")
    client = Client()
    client.force_login(auditor)
    form, api_bodies = _bodies(world)
    before = _snapshot()
    writes, wrong = set(), []
    for name, route, kwarg_names in _routes():
        if route.startswith(SKIPPED_PREFIXES) or name in SKIPPED_NAMES:
            continue
        url = reverse(name, kwargs={k: world[k] for k in kwarg_names})
        for method in WRITE_METHODS:
            if name.startswith("api:"):
                body = api_bodies.get(name, {})
                response = getattr(client, method)(
                    url,
                    data=json.dumps(body),
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}",
                )
            elif method == "post":
                response = client.post(url, form)
            else:
                response = getattr(client, method)(url)
            if response.status_code == 405:
                continue  # the route does not take this method at all
            writes.add(name)
            if name.startswith("api:") and name not in api_bodies:
                wrong.append(f"{method.upper()} {url}: add a valid body for {name} to this test")
            if response.status_code != 403:
                wrong.append(f"{method.upper()} {url} ({name}) answered {response.status_code}")
    assert wrong == []
    assert writes >= KNOWN_WRITES, f"discovery missed {KNOWN_WRITES - writes}"
    assert _snapshot() == before


@pytest.mark.django_db
def test_the_history_pages_take_no_writes_at_all(auditor, reviewer, admin_user, world):
    # The history area is read-only for everyone, admins included.
    for user in (auditor, reviewer, admin_user):
        client = Client()
        client.force_login(user)
        for name in ("history", "history_export_csv", "history_export_jsonl", "metrics"):
            for method in WRITE_METHODS:
                assert getattr(client, method)(reverse(name)).status_code == 405
        url = reverse("decision_detail", args=[world["decision_id"]])
        for method in WRITE_METHODS:
            assert getattr(client, method)(url).status_code == 405


@pytest.mark.django_db
def test_no_api_route_updates_or_deletes_anything(admin_user, world):
    from portal.accounts.tokens import api_token_create

    _, token = api_token_create(user=admin_user, name="admin")
    client = Client()
    before = _snapshot()
    for name, _route, kwarg_names in _routes():
        if not name.startswith("api:") or name in SKIPPED_NAMES:
            continue
        url = reverse(name, kwargs={k: world[k] for k in kwarg_names})
        for method in ("put", "patch", "delete"):
            response = getattr(client, method)(url, HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 405, (method, url, response.status_code)
    assert _snapshot() == before


@pytest.mark.django_db
def test_decisions_cannot_be_changed_or_deleted_through_the_admin(admin_user, world):
    decision = Decision.objects.get(pk=world["decision_id"])
    model_admin = admin.site._registry.get(Decision)
    if model_admin is None:
        # Not in the admin at all: there is no change or delete page to reach.
        client = Client()
        client.force_login(admin_user)
        url = f"/admin/portal/decision/{decision.pk}/change/"
        assert client.post(url, {"note": "changed"}).status_code in (403, 404, 302)
        assert Decision.objects.get(pk=decision.pk).hash == decision.hash
        return
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = admin_user
    assert not model_admin.has_change_permission(request, decision)
    assert not model_admin.has_delete_permission(request, decision)
    assert not model_admin.has_delete_permission(request)
    client = Client()
    client.force_login(admin_user)
    change = reverse("admin:portal_decision_change", args=[decision.pk])
    delete = reverse("admin:portal_decision_delete", args=[decision.pk])
    client.post(change, {"note": "changed", "outcome": "rejected"})
    assert client.post(delete, {"post": "yes"}).status_code in (403, 302)
    changelist = reverse("admin:portal_decision_changelist")
    client.post(
        changelist, {"action": "delete_selected", "_selected_action": [decision.pk], "post": "yes"}
    )
    after = Decision.objects.get(pk=decision.pk)
    assert (after.note, after.outcome, after.hash) == (
        decision.note,
        decision.outcome,
        decision.hash,
    )


# --- websockets ------------------------------------------------------------------------

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")
SOCKET_ACTIONS = [
    {"action": "decide", "interrupt_id": "{interrupt_id}", "value": {"approved": True}},
    {"action": "claim", "interrupt_id": "{interrupt_id}"},
    {"action": "unclaim", "interrupt_id": "{interrupt_id}"},
    {"action": "cancel", "interrupt_id": "{interrupt_id}"},
    {"action": "resume", "resume": {"approved": True}, "resume_interrupt_id": "{interrupt_id}"},
    {
        "action": "start",
        "agent": "refunds",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
    },
    {"type": "thread.status", "thread_id": "{thread_id}", "status": "done"},
]


def _cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    value = client.cookies[settings.SESSION_COOKIE_NAME].value
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={value}".encode())


def _fill(action: dict, world: dict) -> dict:
    text = json.dumps(action)
    for key in ("interrupt_id", "thread_id"):
        text = text.replace("{" + key + "}", str(world[key]))
    return json.loads(text)


@pytest.mark.django_db(transaction=True)
async def test_an_auditors_socket_messages_change_nothing_and_the_queue_socket_is_refused(
    application, auditor, support_agent, reviewer
):
    world = await sync_to_async(
        lambda: {"thread_id": make_interrupt(owner=support_agent).thread_id}
    )()
    world["interrupt_id"] = await sync_to_async(
        lambda: Interrupt.objects.get(thread_id=world["thread_id"]).pk
    )()
    before = await sync_to_async(_snapshot)()
    cookie = await sync_to_async(_cookie)(auditor)

    # The thread socket: auditors may watch (read), and whatever they send is ignored.
    thread_socket = WebsocketCommunicator(
        application, f"/ws/threads/{world['thread_id']}/", headers=[HOST, ORIGIN, cookie]
    )
    connected, _ = await thread_socket.connect()
    assert connected
    for action in SOCKET_ACTIONS:
        await thread_socket.send_json_to(_fill(action, world))
    assert await thread_socket.receive_nothing(timeout=0.3)
    await thread_socket.disconnect()

    # The queue socket is for reviewers: an auditor's connection is closed with 4403.
    queue_socket = WebsocketCommunicator(application, "/ws/queue/", headers=[HOST, ORIGIN, cookie])
    await queue_socket.connect()
    closed = await queue_socket.receive_output(timeout=2)
    assert closed["type"] == "websocket.close"
    assert closed.get("code") == 4403
    await queue_socket.disconnect()  # as a browser does; see tests/web/test_consumers.py

    assert await sync_to_async(_snapshot)() == before
    # sync_to_async ran the ORM in its own thread; close that thread's connection so the
    # test database can be dropped at the end of the run.
    await sync_to_async(lambda: connection.close())()
