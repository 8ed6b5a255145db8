"""Who may do what: every route, API endpoint, the admin's decide view and every websocket
path, for each persona, against an answer written out cell by cell.

Each object belongs to Sally, a support user who is none of the personas, so a cell also
shows whether a persona can reach someone else's thread. A cell that changes something
(a decision, a claim, a follow-up) gets fresh objects, so the cells do not depend on each
other. A failure prints the whole table, expected and observed, with the wrong cells marked.

Cells: ``login`` is a redirect to a login page, a number is the HTTP status, ``open`` is a
socket that stays open and ``44xx`` the code a socket is closed with.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from portal.accounts.tokens import api_token_create
from portal.models import Thread
from portal.reviews.external import RequestSpec, external_request_create
from portal.reviews.rule_simulation import rule_simulate
from portal.web.routing import websocket_urlpatterns
from tests.factories import (
    grant_manage_rules,
    make_decision,
    make_interrupt,
    make_rule_version,
    make_thread,
    make_user,
)

PERSONAS = (
    "anon",
    "no group",
    "support",
    "reviewer",
    "auditor",
    "auditor+staff",
    "staff",
    "support+reviewer",
    "superuser",
)

# The admin's view permissions that the "auditor+staff" persona holds (and nothing more).
ADMIN_VIEW_PERMISSIONS = ["view_thread", "view_interrupt", "view_decision", "view_run"]


# (method, route pattern, variant): one cell per persona, in PERSONAS order.
def _table(text: str) -> dict[tuple[str, ...], tuple[str, ...]]:
    """The rows of a table written below: a label (one or more words), then one cell per
    persona. The heading line (starting with blanks) is for the reader."""
    rows = {}
    for line in text.strip("\n").splitlines():
        if not line.strip() or line.startswith(" "):
            continue
        words = line.split()
        label, cells = tuple(words[: -len(PERSONAS)]), tuple(words[-len(PERSONAS) :])
        assert len(label) >= 1 and label not in rows, f"bad or repeated row: {line!r}"
        rows[label] = cells
    return rows


# method, route pattern (as urls.py writes it, after a "/"), variant; then one cell per
# persona: anon, no group, support, reviewer, auditor, auditor+staff, staff,
# support+reviewer, superuser.
HTTP_TABLE = _table("""
                                            anon  nogrp supp  revw  audit a+stf staff s+rev super
GET  /                                      login 200   302   302   302   302   302   302   302
GET  /healthz                               200   200   200   200   200   200   200   200   200
GET  /login/                                200   302   302   302   302   302   302   302   302
POST /logout/                               login login login login login login login login login
GET  /chat/                                 login 403   200   403   403   403   403   200   200
POST /chat/                                 login 403   302   403   403   403   403   302   302
GET  /chat/<str:thread_id>/                 login 404   404   403   403   403   404   403   403
POST /chat/<str:thread_id>/                 login 404   404   403   403   403   404   403   403
POST /chat/<str:thread_id>/withdraw         login 404   404   403   403   403   404   403   403
GET  /threads/                              login 200   200   200   200   200   200   200   200
GET  /threads/<str:thread_id>/              login 404   404   200   200   200   404   200   200
GET  /threads/<str:thread_id>/ htmx         login 404   404   200   200   200   404   200   200
GET  /threads/<str:thread_id>/transcript/   login 404   404   200   200   200   404   200   200
POST /threads/<str:thread_id>/retry         login 404   404   403   403   403   404   403   302
POST /threads/<str:thread_id>/cancel        login 404   404   403   403   403   404   403   302
GET  /queue/                                login 403   403   200   403   403   403   200   200
GET  /queue/ htmx                           login 403   403   200   403   403   403   200   200
GET  /queue/next                            login 403   403   302   403   403   403   302   302
GET  /interrupts/<str:interrupt_id>/        login 404   404   200   200   200   404   200   200
GET  /interrupts/<str:interrupt_id>/catch-up login 404  404   200   200   200   404   200   200
POST /interrupts/<str:interrupt_id>/decide  login 404   404   302   403   403   404   302   302
POST /interrupts/<str:interrupt_id>/claim   login 404   404   302   403   403   404   302   302
POST /interrupts/<str:interrupt_id>/unclaim login 404   404   302   403   403   404   302   302
GET  /history/                              login 403   403   200   200   200   403   200   200
GET  /history/ htmx                         login 403   403   200   200   200   403   200   200
GET  /history/export.csv                    login 403   403   200   200   200   403   200   200
GET  /history/export.jsonl                  login 403   403   200   200   200   403   200   200
GET  /history/<int:decision_id>/            login 404   404   200   200   200   404   200   200
GET  /history/actions/                      login 403   403   403   200   200   403   403   200
GET  /history/actions/ htmx                 login 403   403   403   200   200   403   403   200
GET  /history/actions/export.csv            login 403   403   403   200   200   403   403   200
GET  /history/actions/export.jsonl          login 403   403   403   200   200   403   403   200
GET  /metrics/                              login 403   403   200   200   200   403   200   200
GET  /rules/                                login 403   403   200   200   200   403   200   200
GET  /rules/new/                            login 403   403   403   403   403   403   403   200
POST /rules/new/                            login 403   403   403   403   403   403   403   302
GET  /rules/<int:pk>/                       login 403   403   200   200   200   403   200   200
GET  /rules/<int:pk>/edit/                  login 403   403   403   403   403   403   403   200
POST /rules/<int:pk>/switch-off/            login 403   403   403   403   403   403   403   302
GET  /rules/versions/<int:pk>/              login 403   403   200   200   200   403   200   200
POST /rules/versions/<int:pk>/simulate/     login 403   403   403   403   403   403   403   302
POST /rules/versions/<int:pk>/activate/     login 403   403   403   403   403   403   403   302
GET  /rules/simulations/<int:pk>/           login 403   403   200   200   200   403   200   200
GET  /metrics/prometheus                    401   403   403   200   200   200   403   200   200
GET  /profile/                              login   200   200   200   200   200   200   200   200
POST /profile/slack/link                    login   400   400   400   400   400   400   400   400
POST /profile/slack/unlink                  login   302   302   302   302   302   302   302   302
POST /integrations/slack/interactions       404   404   404   404   404   404   404   404   404
GET  /api/                                  404   404   404   404   404   404   404   404   404
GET  /api/openapi.json                      200   200   200   200   200   200   200   200   200
GET  /api/docs                              200   200   200   200   200   200   200   200   200
GET  /api/interrupts                        401   200   200   200   200   200   200   200   200
GET  /api/interrupts/<interrupt_id>         401   404   404   200   200   200   404   200   200
POST /api/threads                           401   403   202   403   403   403   403   202   202
GET  /api/threads/<thread_id>               401   404   404   200   200   200   404   200   200
POST /api/threads/<thread_id>/resume        401   403   403   202   403   403   403   202   202
GET  /api/threads/<thread_id>/events        401   404   404   200   200   200   404   200   200
GET  /api/threads                           401   200   200   200   200   200   200   200   200
GET  /api/decisions                         401   403   403   200   200   200   403   200   200
POST /api/interrupts/<interrupt_id>/claim   401   404   404   200   403   403   404   200   200
POST /api/interrupts/<interrupt_id>/release 401   404   404   200   403   403   404   200   200
POST /api/interrupts/<interrupt_id>/withdraw 401  404   404   403   403   403   404   403   403
POST /api/threads/<thread_id>/retry         401   404   404   403   403   403   404   403   202
POST /api/threads/<thread_id>/cancel        401   404   404   403   403   403   404   403   200
POST /api/requests                          401   403   403   403   403   403   403   403   201
GET  /api/requests/<request_id>             401   404   404   404   404   404   404   404   404
GET  /admin/                                login login login login login 200   200   login 200
GET  /admin/portal/interrupt/<id>/change/   login login login login login 200   403   login 200
POST /admin/portal/interrupt/<id>/decide/   login login login login login 403   403   login 302
""")

WS_TABLE = _table("""
                                            anon  nogrp supp  revw  audit a+stf staff s+rev super
/ws/threads/<Sally's-thread>/               4401  4403  4403  open  open  open  4403  open  open
/ws/queue/                                  4401  4403  4403  open  4403  4403  4403  open  open
/ws/no-such-path/                           4404  4404  4404  4404  4404  4404  4404  4404  4404
""")

# Rows whose request changes something: each cell gets objects of its own.
MUTATING = {
    ("POST", "/chat/<str:thread_id>/"),
    ("POST", "/chat/<str:thread_id>/withdraw"),
    ("POST", "/threads/<str:thread_id>/retry"),
    ("POST", "/threads/<str:thread_id>/cancel"),
    ("POST", "/interrupts/<str:interrupt_id>/decide"),
    ("POST", "/interrupts/<str:interrupt_id>/claim"),
    ("POST", "/interrupts/<str:interrupt_id>/unclaim"),
    ("POST", "/api/threads/<thread_id>/resume"),
    ("POST", "/api/interrupts/<interrupt_id>/claim"),
    ("POST", "/api/interrupts/<interrupt_id>/release"),
    ("POST", "/api/interrupts/<interrupt_id>/withdraw"),
    ("POST", "/api/threads/<thread_id>/retry"),
    ("POST", "/api/threads/<thread_id>/cancel"),
    ("POST", "/admin/portal/interrupt/<id>/decide/"),
    ("POST", "/rules/new/"),
    ("POST", "/rules/<int:pk>/switch-off/"),
    ("POST", "/rules/versions/<int:pk>/simulate/"),
    ("POST", "/rules/versions/<int:pk>/activate/"),
}


def _personas() -> dict[str, Any]:
    from portal.accounts.groups import ensure_roles

    groups = {g.name: g for g in ensure_roles()}

    def user(name: str, *group_names: str, **extra: Any) -> Any:
        u = make_user(f"p-{name.replace(' ', '-').replace('+', '-')}", **extra)
        u.groups.set([groups[g] for g in group_names])
        return u

    staff_auditor = user("auditor+staff", "auditor", is_staff=True)
    staff_auditor.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="portal", codename__in=ADMIN_VIEW_PERMISSIONS
        )
    )
    return {
        "anon": None,
        "no group": user("no group"),
        "support": user("support", "support"),
        "reviewer": user("reviewer", "reviewer"),
        "auditor": user("auditor", "auditor"),
        "auditor+staff": staff_auditor,
        "staff": user("staff", is_staff=True),
        "support+reviewer": user("support+reviewer", "support", "reviewer"),
        "superuser": user("superuser", is_staff=True, is_superuser=True),
    }


class World:
    """Sally's objects: a finished chat, a failed one, a pending request, and a decided
    one."""

    def __init__(self, sally: Any, rex: Any) -> None:
        self.done = make_thread(owner=sally, text="Where is my parcel?")
        Thread.objects.filter(pk=self.done.pk).update(status=Thread.Status.DONE)
        self.failed = make_thread(owner=sally, text="Refund order F-1.")
        Thread.objects.filter(pk=self.failed.pk).update(status=Thread.Status.FAILED)
        self.interrupt = make_interrupt(owner=sally)
        decided = make_interrupt(owner=sally)
        self.decision = make_decision(interrupt=decided, reviewer=rex)
        # An external agent's request: only the agent that raised it reads it over the API.
        bot = make_user(f"bot-{Thread.objects.count()}", role="agent")
        self.external, _ = external_request_create(
            user=bot, spec=RequestSpec(agent="invoice-bot", title="Pay invoice 7")
        )
        # A rule written and simulated by someone who manages rules and is no persona.
        wanda = grant_manage_rules(make_user(f"wanda-{Thread.objects.count()}"))
        self.version = make_rule_version(by=wanda, name=f"Table rule {wanda.pk}")
        self.simulation = rule_simulate(self.version, by=wanda, days=1)


def _request(key: tuple[str, ...], world: World) -> tuple[str, str, dict[str, Any], Any]:
    """(method, url, extra headers, body) for a row."""
    method, route, variant = key[0], key[1], key[2] if len(key) > 2 else ""
    i, v = world.interrupt, world.version
    approve = {"resume_interrupt_id": i.pk, "action": "approve"}
    htmx = {"HTTP_HX_REQUEST": "true"} if variant == "htmx" else {}
    urls: dict[tuple[str, str], tuple[str, Any]] = {
        ("GET", "/"): ("/", None),
        ("GET", "/healthz"): ("/healthz", None),
        ("GET", "/login/"): ("/login/", None),
        ("POST", "/logout/"): ("/logout/", {}),
        ("GET", "/chat/"): ("/chat/", None),
        ("POST", "/chat/"): ("/chat/", {"agent": "refunds", "message": "Refund order A-7."}),
        ("GET", "/chat/<str:thread_id>/"): (f"/chat/{world.done.pk}/", None),
        ("POST", "/chat/<str:thread_id>/"): (
            f"/chat/{world.done.pk}/",
            {"message": "Refund $10 for order B-2."},
        ),
        ("POST", "/chat/<str:thread_id>/withdraw"): (f"/chat/{i.thread_id}/withdraw", {}),
        ("GET", "/threads/"): ("/threads/", None),
        ("GET", "/threads/<str:thread_id>/"): (f"/threads/{i.thread_id}/", None),
        ("GET", "/threads/<str:thread_id>/transcript/"): (
            f"/threads/{i.thread_id}/transcript/",
            None,
        ),
        ("POST", "/threads/<str:thread_id>/retry"): (f"/threads/{world.failed.pk}/retry", {}),
        ("POST", "/threads/<str:thread_id>/cancel"): (
            f"/threads/{i.thread_id}/cancel",
            {"confirm": "yes"},
        ),
        ("GET", "/queue/"): ("/queue/", None),
        ("GET", "/queue/next"): ("/queue/next", None),
        ("GET", "/interrupts/<str:interrupt_id>/"): (f"/interrupts/{i.pk}/", None),
        ("GET", "/interrupts/<str:interrupt_id>/catch-up"): (f"/interrupts/{i.pk}/catch-up", None),
        ("POST", "/interrupts/<str:interrupt_id>/decide"): (f"/interrupts/{i.pk}/decide", approve),
        ("POST", "/interrupts/<str:interrupt_id>/claim"): (f"/interrupts/{i.pk}/claim", {}),
        ("POST", "/interrupts/<str:interrupt_id>/unclaim"): (f"/interrupts/{i.pk}/unclaim", {}),
        ("GET", "/history/"): ("/history/", None),
        ("GET", "/history/export.csv"): ("/history/export.csv", None),
        ("GET", "/history/export.jsonl"): ("/history/export.jsonl", None),
        ("GET", "/history/<int:decision_id>/"): (f"/history/{world.decision.pk}/", None),
        ("GET", "/history/actions/"): ("/history/actions/", None),
        ("GET", "/history/actions/export.csv"): ("/history/actions/export.csv", None),
        ("GET", "/history/actions/export.jsonl"): ("/history/actions/export.jsonl", None),
        ("GET", "/metrics/"): ("/metrics/", None),
        ("GET", "/metrics/prometheus"): ("/metrics/prometheus", None),
        ("GET", "/rules/"): ("/rules/", None),
        ("GET", "/rules/new/"): ("/rules/new/", None),
        ("POST", "/rules/new/"): (
            "/rules/new/",
            {"name": f"New rule {world.version.pk}", "agent": "refunds", "action": "approve"},
        ),
        ("GET", "/rules/<int:pk>/"): (f"/rules/{v.rule_id}/", None),
        ("GET", "/rules/<int:pk>/edit/"): (f"/rules/{v.rule_id}/edit/", None),
        ("POST", "/rules/<int:pk>/switch-off/"): (f"/rules/{v.rule_id}/switch-off/", {}),
        ("GET", "/rules/versions/<int:pk>/"): (f"/rules/versions/{v.pk}/", None),
        ("POST", "/rules/versions/<int:pk>/simulate/"): (
            f"/rules/versions/{v.pk}/simulate/",
            {"days": "7"},
        ),
        ("POST", "/rules/versions/<int:pk>/activate/"): (f"/rules/versions/{v.pk}/activate/", {}),
        ("GET", "/rules/simulations/<int:pk>/"): (
            f"/rules/simulations/{world.simulation.pk}/",
            None,
        ),
        ("GET", "/profile/"): ("/profile/", None),
        ("POST", "/profile/slack/link"): ("/profile/slack/link", {"code": "forged"}),
        ("POST", "/profile/slack/unlink"): ("/profile/slack/unlink", {}),
        # Slack signs it instead of a session; without PORTAL_SLACK_SIGNING_SECRET it is off.
        ("POST", "/integrations/slack/interactions"): ("/integrations/slack/interactions", {}),
        ("GET", "/api/"): ("/api/", None),
        ("GET", "/api/openapi.json"): ("/api/openapi.json", None),
        ("GET", "/api/docs"): ("/api/docs", None),
        ("GET", "/api/interrupts"): ("/api/interrupts", None),
        ("GET", "/api/interrupts/<interrupt_id>"): (f"/api/interrupts/{i.pk}", None),
        ("POST", "/api/threads"): (
            "/api/threads",
            {"agent": "refunds", "input": {"messages": [{"role": "user", "content": "Hi"}]}},
        ),
        ("GET", "/api/threads/<thread_id>"): (f"/api/threads/{i.thread_id}", None),
        ("GET", "/api/threads"): ("/api/threads", None),
        ("GET", "/api/threads/<thread_id>/events"): (f"/api/threads/{i.thread_id}/events", None),
        ("GET", "/api/decisions"): ("/api/decisions", None),
        ("POST", "/api/threads/<thread_id>/retry"): (f"/api/threads/{world.failed.pk}/retry", {}),
        ("POST", "/api/threads/<thread_id>/cancel"): (f"/api/threads/{i.thread_id}/cancel", {}),
        ("POST", "/api/interrupts/<interrupt_id>/claim"): (f"/api/interrupts/{i.pk}/claim", {}),
        ("POST", "/api/interrupts/<interrupt_id>/release"): (
            f"/api/interrupts/{i.pk}/release",
            {},
        ),
        ("POST", "/api/interrupts/<interrupt_id>/withdraw"): (
            f"/api/interrupts/{i.pk}/withdraw",
            {},
        ),
        ("POST", "/api/threads/<thread_id>/resume"): (
            f"/api/threads/{i.thread_id}/resume",
            {"resume": {"approved": True}, "resume_interrupt_id": i.pk},
        ),
        ("POST", "/api/requests"): ("/api/requests", {"agent": "invoice-bot", "title": "Pay"}),
        ("GET", "/api/requests/<request_id>"): (f"/api/requests/{world.external.pk}", None),
        ("GET", "/admin/"): ("/admin/", None),
        ("GET", "/admin/portal/interrupt/<id>/change/"): (
            f"/admin/portal/interrupt/{quote(i.pk)}/change/",
            None,
        ),
        ("POST", "/admin/portal/interrupt/<id>/decide/"): (
            f"/admin/portal/interrupt/{quote(i.pk)}/decide/",
            approve,
        ),
    }
    url, body = urls[(method, route)]
    return method, url, htmx, body


def _outcome(response: Any) -> str:
    if response.status_code == 302 and "/login/" in response.get("Location", ""):
        return "login"
    return str(response.status_code)


def _call(user: Any, key: tuple[str, ...], world: World, token: str | None) -> str:
    method, url, headers, body = _request(key, world)
    client = Client()
    if url.startswith("/api/"):
        if token is not None:
            headers = {**headers, "HTTP_AUTHORIZATION": f"Bearer {token}"}
        if method == "POST":
            response = client.post(url, body, content_type="application/json", **headers)
        else:
            response = client.get(url, **headers)
        return _outcome(response)
    if user is not None:
        client.force_login(user)
    if method == "POST":
        return _outcome(client.post(url, body, **headers))
    return _outcome(client.get(url, **headers))


def _show(
    title: str,
    rows: list[str],
    expected: list[tuple[str, ...]],
    seen: list[tuple[str, ...]],
    personas: tuple[str, ...] = PERSONAS,
) -> str:
    width = max(len(r) for r in rows)
    lines = [title, " " * width + " | " + " | ".join(f"{p:>16}" for p in personas)]
    for row, want, got in zip(rows, expected, seen, strict=True):
        cells = []
        for w, g in zip(want, got, strict=True):
            cells.append(f"{g:>16}" if w == g else f"{'!' + w + '->' + g:>16}")
        lines.append(f"{row:<{width}} | " + " | ".join(cells))
    return "\n".join(lines)


def _routes() -> set[str]:
    """Every route of the site but the admin's, as its pattern text."""

    def walk(patterns: list[Any], prefix: str) -> Any:
        for p in patterns:
            if isinstance(p, URLResolver):
                if str(p.pattern) != "admin/":
                    yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern)

    return set(walk(get_resolver().url_patterns, ""))


@pytest.mark.django_db
def test_every_route_of_the_site_has_a_row_in_the_table():
    table_routes = {key[1][1:] for key in HTTP_TABLE if not key[1].startswith("/admin/")}
    assert table_routes == _routes(), "each route needs a row in HTTP_TABLE"


# A test per persona (a column of the table), so the test workers share the table out.
@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
def test_every_route_answers_each_persona_as_the_table_says(persona):
    user = _personas()[persona]
    token = api_token_create(user=user)[1] if user is not None else None
    sally = make_user("sally", role="support")
    rex = make_user("rex", role="reviewer")
    shared = World(sally, rex)
    column = PERSONAS.index(persona)
    seen: list[tuple[str, ...]] = []
    for key in HTTP_TABLE:
        world = World(sally, rex) if key[:2] in MUTATING else shared
        seen.append((_call(user, key, world, token),))
    rows = [" ".join(key) for key in HTTP_TABLE]
    expected = [(answers[column],) for answers in HTTP_TABLE.values()]
    title = "HTTP (!expected->observed)"
    assert seen == expected, "\n" + _show(title, rows, expected, seen, (persona,))


def _cookie(user: Any) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return (b"cookie", f"{name}={client.cookies[name].value}".encode())


async def _socket(application: Any, path: str, cookie: tuple[bytes, bytes] | None) -> str:
    headers = [(b"host", b"testserver"), (b"origin", b"http://testserver")]
    if cookie is not None:
        headers.append(cookie)
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected, f"the handshake on {path} was refused"
    if await communicator.receive_nothing(timeout=0.3):
        await communicator.disconnect()
        return "open"
    message = await communicator.receive_output(timeout=1)
    await communicator.disconnect()
    return str(message.get("code")) if message["type"] == "websocket.close" else message["type"]


@pytest.mark.django_db(transaction=True)
async def test_every_websocket_path_answers_each_persona_as_the_table_says(application):
    def setup() -> tuple[dict[str, Any], Any]:
        personas = _personas()
        cookies = {n: (_cookie(u) if u is not None else None) for n, u in personas.items()}
        thread = make_thread(owner=make_user("sally", role="support"))
        return cookies, thread

    cookies, thread = await sync_to_async(setup)()
    paths: dict[tuple[str, ...], str] = {
        ("/ws/threads/<Sally's-thread>/",): f"/ws/threads/{thread.pk}/",
        ("/ws/queue/",): "/ws/queue/",
        ("/ws/no-such-path/",): "/ws/no-such-path/",
    }
    # Each row stands for one websocket route (the last catches every other path).
    routes = {
        ("/ws/threads/<Sally's-thread>/",): "ws/threads/<uuid:thread_id>/",
        ("/ws/queue/",): "ws/queue/",
        ("/ws/no-such-path/",): "",
    }
    assert set(routes) == set(paths) == set(WS_TABLE)
    assert set(routes.values()) == {str(p.pattern) for p in websocket_urlpatterns}, (
        "each websocket route needs a row in WS_TABLE"
    )
    seen = []
    for row in WS_TABLE:
        seen.append(
            tuple([await _socket(application, paths[row], cookies[name]) for name in PERSONAS])
        )
    await sync_to_async(lambda: connection.close())()
    rows, expected = [row[0] for row in WS_TABLE], list(WS_TABLE.values())
    assert seen == expected, "\n" + _show("websocket (!expected->observed)", rows, expected, seen)
