"""External agents: raising a request over the API, answering it, reading the answer.

An external request is an ordinary pause on a thread of its own, so the tests check that
the queue, the decision service, the policies and the audit chain treat it as one, and
that nothing ever tries to run a graph for it.
"""

from __future__ import annotations

import json
import threading
import time
from io import StringIO

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.utils import timezone

from agents import signing
from agents.portal_client import PortalClient
from portal.accounts.tokens import api_token_create
from portal.errors import DecisionForbidden, InvalidDecision
from portal.models import (
    ApiToken,
    AuditEvent,
    Checkpoint,
    Decision,
    Delivery,
    ExternalRequest,
    Interrupt,
    Run,
    Thread,
)
from portal.notify import outbox
from portal.reviews import expiry, external
from portal.reviews.decisions import decision_submit
from portal.reviews.external import RequestInvalid, RequestSpec, external_request_create
from tests.factories import make_user
from tests.loopback import WebhookReceiver

URL = "/api/requests"
SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


class Agent:
    """An external agent's HTTP client: a token with the request scope, JSON bodies."""

    def __init__(self, token: str) -> None:
        self.client, self.token = Client(), token

    def raise_(self, **fields):
        body = {"agent": "invoice-bot", "title": "Pay invoice 7", **fields}
        return self.client.post(
            URL, json.dumps(body), content_type="application/json", **self._auth()
        )

    def get(self, request_id: str, **params):
        return self.client.get(f"{URL}/{request_id}", params, **self._auth())

    def _auth(self):
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}


@pytest.fixture(autouse=True)
def no_rate_limit(settings):
    # These tests make many calls with tokens whose ids later tests reuse; counted, they
    # would spend those tests' allowance (the count lives in the cache, across tests).
    settings.PORTAL_API_RATE = ""


@pytest.fixture
def agent_user(roles):
    return make_user("ivy-invoice-bot", role="agent")


@pytest.fixture
def agent(agent_user) -> Agent:
    return Agent(api_token_create(user=agent_user, name="bot", scopes=["request"])[1])


def _raise(agent: Agent, **fields) -> dict:
    response = agent.raise_(response_schema=SCHEMA, **fields)
    assert response.status_code == 201, response.content
    return response.json()


# --- raising -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_raised_request_waits_in_the_queue_like_an_agents_pause(agent, agent_user, reviewer):
    body = _raise(agent, message="Pay **$120** to ACME?", payload={"amount": 120})

    interrupt = Interrupt.objects.get(pk=body["id"])
    assert interrupt.status == Interrupt.Status.PENDING
    assert (interrupt.agent, interrupt.reason, interrupt.value) == (
        "invoice-bot",
        "input_required",
        {"amount": 120},
    )
    thread = interrupt.thread
    assert (thread.owner, thread.title, thread.status) == (
        agent_user,
        "Pay invoice 7",
        Thread.Status.INTERRUPTED,
    )
    # The checkpoint says it is paused on this request: the decision service's truth.
    latest = Checkpoint.objects.filter(thread=thread).order_by("-seq").first()
    assert (latest.status, latest.interrupt_id) == ("interrupted", interrupt.pk)
    assert body["status"] == "pending" and body["answer"] is None

    page = Client()
    page.force_login(reviewer)
    html = page.get("/queue/").content.decode()
    assert f'id="q-{interrupt.pk}"' in html and "Pay invoice 7" in html
    assert '<option value="invoice-bot"' in html  # the queue's agent filter offers it
    filtered = page.get("/queue/", {"agent": "invoice-bot"}).content.decode()
    assert f'id="q-{interrupt.pk}"' in filtered
    assert page.get(f"/interrupts/{interrupt.pk}/").status_code == 200
    assert not Run.objects.filter(thread=thread).exists()
    event = AuditEvent.objects.get(action="interrupt.raise")
    assert (event.actor, event.target_id) == (agent_user, interrupt.pk)
    assert event.detail["agent"] == "invoice-bot"


@pytest.mark.django_db
def test_a_decision_closes_the_request_without_running_anything(agent, reviewer):
    body = _raise(agent, external_ref="INV-7")

    decision = decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": True, "note": "ok"},
        resume_interrupt_id=body["id"],
    )

    assert decision.resume_run is None
    thread = Thread.objects.get(pk=body["thread_id"])
    assert thread.status == Thread.Status.DONE
    assert not Run.objects.filter(thread=thread).exists()
    assert list(Checkpoint.objects.filter(thread=thread).values_list("seq", "status")) == [
        (1, "interrupted"),
        (2, "done"),
    ]
    answer = agent.get(body["id"]).json()
    assert answer["status"] == "decided" and answer["external_ref"] == "INV-7"
    assert answer["answer"] == {
        "outcome": "approved",
        "value": {"approved": True, "note": "ok"},
        "note": "ok",
        "decided_by": reviewer.username,
        "decided_at": answer["answer"]["decided_at"],
        "decision_id": decision.pk,
        "audit_hash": Decision.objects.get(pk=decision.pk).hash,
        "rule": None,  # a person decided, not a decision rule
    }
    assert ExternalRequest.objects.get(pk=body["id"]).collected_at is not None


@pytest.mark.django_db
def test_the_webhook_and_the_long_poll_give_a_decision_the_same_time(agent, reviewer, monkeypatch):
    # Decided in the first millisecond of a second (one decision in a thousand): the
    # webhook said "...:05.000Z", the long-poll "...:05Z".
    body = _raise(agent)
    at = timezone.now().replace(microsecond=412)
    # (Django keeps the field's default callable in ``_get_default`` once it has read it.)
    monkeypatch.setattr(Decision._meta.get_field("created_at"), "_get_default", lambda: at)
    decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=body["id"],
    )

    sent = external.external_answer(ExternalRequest.objects.get(pk=body["id"]))
    read = agent.get(body["id"]).json()
    assert sent["answer"]["decided_at"] == read["answer"]["decided_at"]
    assert Decision.objects.get().created_at == at  # the moment the test meant


@pytest.mark.django_db
def test_an_answer_that_breaks_the_schema_is_refused_and_nothing_is_recorded(agent, reviewer):
    body = _raise(agent)

    with pytest.raises(InvalidDecision, match=r"\$\.approved: expected boolean"):
        decision_submit(
            interrupt=body["id"],
            reviewer=reviewer,
            value={"approved": "yes"},
            resume_interrupt_id=body["id"],
        )
    assert not Decision.objects.exists()
    assert agent.get(body["id"]).json()["status"] == "pending"


@pytest.mark.django_db
def test_actions_make_an_inbox_request_and_the_answer_is_a_human_response(agent, reviewer):
    body = agent.raise_(actions=["accept", "edit"], args={"amount": 120}).json()

    listed = Client().get(
        f"/api/interrupts/{body['id']}",
        HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=reviewer)[1]}",
    )
    assert listed.json()["actions"] == ["accept", "edit"]
    decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"type": "edit", "args": {"amount": 100}},
        resume_interrupt_id=body["id"],
    )
    answer = agent.get(body["id"]).json()["answer"]
    assert answer["outcome"] == "edited"
    assert answer["value"] == {"type": "edit", "args": {"amount": 100}}


@pytest.mark.django_db
def test_a_request_over_the_thread_resume_endpoint_answers_without_a_run(agent, reviewer):
    body = _raise(agent)

    response = Client().post(
        f"/api/threads/{body['thread_id']}/resume",
        json.dumps(
            {"resume": {"approved": False, "note": "No."}, "resume_interrupt_id": body["id"]}
        ),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=reviewer)[1]}",
    )

    assert response.status_code == 202, response.content
    assert response.json()["run_id"] is None and response.json()["outcome"] == "rejected"


@pytest.mark.django_db
def test_policies_apply_by_the_external_agents_name(agent, reviewer, settings):
    settings.PORTAL_POLICIES = {"invoice-bot:*": {"required_group": "finance"}}
    body = _raise(agent)

    with pytest.raises(DecisionForbidden, match="'finance' group"):
        decision_submit(
            interrupt=body["id"],
            reviewer=reviewer,
            value={"approved": True},
            resume_interrupt_id=body["id"],
        )


@pytest.mark.django_db
def test_an_expired_request_resolves_as_expired_and_says_so(agent):
    body = _raise(agent, expires_in=60)
    interrupt = Interrupt.objects.get(pk=body["id"])
    assert interrupt.expires_at is not None

    expiry.interrupts_expire(now=interrupt.expires_at)

    answer = agent.get(body["id"]).json()
    assert answer["status"] == "expired"
    assert answer["answer"]["outcome"] == "expired"
    assert answer["answer"]["decided_by"] is None
    # Fail closed: a yes/no request expires as an explicit no.
    assert answer["answer"]["value"]["approved"] is False
    assert Thread.objects.get(pk=body["thread_id"]).status == Thread.Status.DONE
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_earlier_of_the_policy_and_the_requested_expiry_wins(agent, settings):
    settings.PORTAL_POLICIES = {"invoice-bot:*": {"expires_after": 30}}
    soon = Interrupt.objects.get(pk=_raise(agent, expires_in=10)["id"])
    late = Interrupt.objects.get(pk=_raise(agent, expires_in=3600)["id"])

    assert (soon.expires_at - soon.created_at).total_seconds() == pytest.approx(10, abs=2)
    assert (late.expires_at - late.created_at).total_seconds() == pytest.approx(30, abs=2)


@pytest.mark.django_db
def test_its_owner_cannot_write_into_an_external_requests_thread(agent, agent_user, reviewer):
    from portal.errors import ThreadNotRetryable
    from portal.reviews.threads import thread_message

    body = _raise(agent)
    decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=body["id"],
    )

    with pytest.raises(ThreadNotRetryable, match="external agent"):
        thread_message(thread=Thread.objects.get(pk=body["thread_id"]), text="hi", user=agent_user)


# --- idempotency ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_same_idempotency_key_twice_returns_the_first_request(agent):
    first = agent.raise_(response_schema=SCHEMA, idempotency_key="inv-7")
    again = agent.raise_(response_schema=SCHEMA, idempotency_key="inv-7")

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Interrupt.objects.count() == 1 and Thread.objects.count() == 1


@pytest.mark.django_db
def test_a_reused_idempotency_key_with_other_fields_is_refused(agent):
    agent.raise_(response_schema=SCHEMA, idempotency_key="inv-7")
    other = agent.raise_(response_schema=SCHEMA, idempotency_key="inv-7", title="Pay invoice 8")

    assert other.status_code == 409
    assert "inv-7" in other.json()["detail"] and "other fields" in other.json()["detail"]
    assert Interrupt.objects.count() == 1


@pytest.mark.django_db
def test_idempotency_keys_belong_to_their_requester(agent, roles):
    other = Agent(api_token_create(user=make_user("otto-bot", role="agent"), scopes=["request"])[1])
    a = agent.raise_(response_schema=SCHEMA, idempotency_key="k").json()
    b = other.raise_(response_schema=SCHEMA, idempotency_key="k").json()

    assert a["id"] != b["id"]
    assert other.get(a["id"]).status_code == 404  # nor can one read the other's


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_key_sent_at_once_creates_one_request(roles):
    user = make_user("racing-bot", role="agent")
    token = api_token_create(user=user, scopes=["request"])[1]
    n = 10
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def send(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            response = Agent(token).raise_(response_schema=SCHEMA, idempotency_key="same")
            results[i] = (response.status_code, response.json()["id"])
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert all(isinstance(r, tuple) for r in results), results
    codes = sorted(code for code, _ in results)
    assert codes == [200] * (n - 1) + [201], results
    assert len({request_id for _, request_id in results}) == 1
    assert Interrupt.objects.count() == Thread.objects.count() == 1


# --- refusals ------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_oversized_payload_is_refused_naming_the_limit(agent, settings):
    settings.PORTAL_MAX_INPUT_BYTES = 1000
    response = agent.raise_(payload={"text": "x" * 2000})

    assert response.status_code == 422
    assert response.json()["errors"] == [
        "$.payload: 2,011 bytes of JSON, over the limit of 1,000 (PORTAL_MAX_INPUT_BYTES)"
    ]
    assert not Interrupt.objects.exists() and not Thread.objects.exists()


@pytest.mark.django_db
def test_an_oversized_message_is_refused_naming_the_limit(agent, settings):
    settings.PORTAL_MAX_INPUT_BYTES = 1000
    response = agent.raise_(message="é" * 600)  # 600 characters, 1,200 bytes

    assert response.status_code == 422
    assert response.json()["errors"] == [
        "$.message: 1,200 bytes of text, over the limit of 1,000 (PORTAL_MAX_INPUT_BYTES); "
        "link to the detail instead"
    ]
    assert not Interrupt.objects.exists() and not Thread.objects.exists()
    assert agent.raise_(message="é" * 500).status_code == 201


@pytest.mark.django_db
def test_a_schema_with_a_remote_ref_is_refused_and_nothing_is_fetched(agent):
    from tests.loopback import CountingServer

    with CountingServer() as server:
        response = agent.raise_(response_schema={"$ref": server.url})

    assert response.status_code == 422
    assert "$.response_schema.$ref" in response.json()["errors"][0]
    assert "never fetched" in response.json()["errors"][0]
    assert server.hits == 0
    assert not Interrupt.objects.exists()


@pytest.mark.django_db
def test_a_pattern_that_needs_backtracking_is_refused(agent):
    schema = {"type": "string", "pattern": r"^(a+)\1$"}
    response = agent.raise_(response_schema=schema)

    assert response.status_code == 422
    assert "RE2" in response.json()["errors"][0]
    assert response.json()["errors"][0].startswith("$.response_schema.pattern")


@pytest.mark.django_db
def test_a_catastrophic_pattern_is_matched_in_linear_time(agent, reviewer):
    # Exponential for a backtracking engine on "aaa...!", linear for RE2.
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["code"],
    }
    body = agent.raise_(response_schema=schema).json()

    started = time.monotonic()
    with pytest.raises(InvalidDecision, match="does not match"):
        decision_submit(
            interrupt=body["id"],
            reviewer=reviewer,
            value={"code": "a" * 5000 + "!"},
            resume_interrupt_id=body["id"],
        )
    assert time.monotonic() - started < 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    ["ftp://example.test/hook", "javascript:alert(1)", "file:///etc/passwd", "//no-scheme/x"],
)
def test_a_callback_that_is_not_http_is_refused(agent, url):
    response = agent.raise_(callback_url=url)

    assert response.status_code == 422
    assert response.json()["errors"][0].startswith("$.callback_url: the scheme")
    assert "http:// or https://" in response.json()["errors"][0]
    assert not Interrupt.objects.exists()


def _refused_callback(agent: Agent, url: str) -> str:
    """Raising a request with ``url`` as its callback: refused (422) with one error, which
    is returned, and nothing recorded."""
    response = agent.raise_(callback_url=url)
    assert response.status_code == 422, response.content
    [error] = response.json()["errors"]
    assert not Interrupt.objects.exists()
    return error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
        ("http://127.0.0.1:5432/", "a loopback address"),
        ("http://localhost:6379/", "this machine (localhost)"),
        ("http://LocalHost./hook", "this machine (localhost)"),
        ("http://hooks.localhost/hook", "this machine (localhost)"),
        ("http://10.0.0.5/hook", "a private address"),
        ("https://192.168.1.1/hook", "a private address"),
        ("http://100.64.0.1/hook", "a private address"),
        ("http://[::1]:8000/hook", "a loopback address"),
        ("http://[::ffff:127.0.0.1]/hook", "a loopback address"),
        ("http://[fe80::1%25eth0]/hook", "a link-local address"),
        ("http://[fd00::5]/hook", "a private address"),
        ("http://0.0.0.0:8000/hook", "an unspecified address"),
        ("http://224.0.0.1/hook", "a multicast address"),
        ("http://240.0.0.1/hook", "a reserved address"),
        ("http://2130706433/hook", "a loopback address"),
        ("http://127.1/hook", "a loopback address"),
    ],
)
def test_a_callback_into_the_portals_own_network_is_refused(agent, url, kind):
    error = _refused_callback(agent, url)

    assert error.startswith("$.callback_url: the host ")
    assert f"is {kind}, which the portal does not post to" in error
    assert "PORTAL_ALLOW_PRIVATE_TARGETS" in error


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "https://bot.example/hook",
        "https://localhost.example.com/hook",
        "http://93.184.216.34:8080/hook",
        "https://[2606:4700:4700::1111]/hook",
    ],
)
def test_a_callback_to_a_public_address_is_taken(agent, url):
    assert agent.raise_(callback_url=url).status_code == 201


@pytest.mark.django_db
def test_an_operator_may_allow_callbacks_into_the_portals_own_network(agent, settings):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True

    for url in ("http://127.0.0.1:8000/hook", "http://localhost/hook", "http://10.0.0.5/"):
        assert agent.raise_(callback_url=url).status_code == 201


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://bot.example:99999/hook", "the port is not a number from 1 to 65535"),
        ("http://bot.example:abc/hook", "the port is not a number from 1 to 65535"),
        ("http://bot.example:0/hook", "the port is not a number from 1 to 65535 (it is 0)"),
        ("http://u:p@bot.example/hook", "the URL holds a user name or password"),
        ("https://u@bot.example/hook", "the URL holds a user name or password"),
    ],
)
def test_a_callback_that_could_never_be_posted_to_is_refused(agent, url, says):
    assert _refused_callback(agent, url).startswith(f"$.callback_url: {says}")


@pytest.mark.django_db
def test_a_token_without_the_request_scope_is_refused_naming_it(agent_user):
    token = api_token_create(user=agent_user, scopes=["read", "start", "decide"])[1]
    response = Agent(token).raise_()

    assert response.status_code == 403
    assert "lacks the 'request' scope" in response.json()["detail"]
    assert not Interrupt.objects.exists()


@pytest.mark.django_db
def test_a_user_who_may_not_raise_requests_is_refused_whatever_the_token(reviewer):
    response = Agent(api_token_create(user=reviewer)[1]).raise_()

    assert response.status_code == 403
    assert response.json()["detail"] == "Your role cannot raise approval requests."


@pytest.mark.django_db
def test_an_external_agent_may_not_take_the_name_of_one_the_portal_runs(agent):
    response = agent.raise_(agent="refunds")

    assert response.status_code == 422
    assert response.json()["errors"] == [
        "$.agent: 'refunds' is an agent this portal runs itself; give your agent a name of its own"
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["Refunds", "TRANSFERS", "rEfUnDs"])
def test_the_name_of_one_the_portal_runs_is_refused_in_any_case(agent, name):
    response = agent.raise_(agent=name)

    assert response.status_code == 422
    assert response.json()["errors"] == [
        f"$.agent: {name!r} is an agent this portal runs itself; give your agent a name of its own"
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "refunds ",
        " refunds",
        "refunds\u200b",
        "refunds\n",
        "\tinvoice-bot",
        "invoice bot",
        "-bot",
        ".bot",
        "bot/1",
        "bot:1",
        "b\u00f6t",
    ],
)
def test_an_agent_name_that_is_not_a_plain_name_is_refused(agent, name):
    response = agent.raise_(agent=name)

    assert response.status_code == 422
    assert response.json()["errors"] == [
        f"$.agent: {name!r} is not a plain name; use letters, digits, '-', '_' or '.', "
        "starting with a letter or digit"
    ]
    assert not Interrupt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["invoice-bot", "Invoice_Bot.2", "9lives", "refunds-bot"])
def test_a_plain_agent_name_of_its_own_is_taken(agent, name):
    assert agent.raise_(agent=name).status_code == 201


@pytest.mark.django_db
def test_several_problems_are_named_at_once(agent):
    response = agent.raise_(agent="", reason="r" * 65, expires_in=0)

    assert response.status_code == 422
    assert response.json()["errors"] == [
        "$.agent: required (it is empty)",
        "$.reason: 65 characters, over the limit of 64; use a short label and put the "
        "detail in the message",
        "$.expires_in: 0 seconds; give 1 to 2,592,000 (30 days)",
    ]


@pytest.mark.django_db
def test_an_unknown_assignee_is_refused(agent):
    response = agent.raise_(assign_to={"users": ["nobody"], "groups": ["reviewer"]})

    assert response.status_code == 422
    assert response.json()["errors"] == ["$.assign_to.users: there is no user 'nobody'"]


# --- reading the answer --------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_is_readable_only_by_whoever_raised_it(agent, reviewer):
    body = _raise(agent)

    stranger = Agent(api_token_create(user=reviewer)[1])
    assert stranger.get(body["id"]).status_code == 404
    assert agent.get("int_nope").status_code == 404


@pytest.mark.django_db
def test_a_wait_longer_than_the_server_allows_is_refused(agent):
    body = _raise(agent)

    response = agent.get(body["id"], wait=31)
    assert response.status_code == 422
    assert response.json()["errors"] == ["$.wait: Input should be less than or equal to 30"]


@pytest.mark.django_db
def test_a_pending_request_is_not_marked_collected(agent):
    body = _raise(agent)
    agent.get(body["id"])

    assert ExternalRequest.objects.get(pk=body["id"]).collected_at is None


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_returns_as_soon_as_the_decision_is_recorded(agent, reviewer):
    body = _raise(agent)

    def decide() -> None:
        time.sleep(0.5)
        try:
            decision_submit(
                interrupt=body["id"],
                reviewer=reviewer,
                value={"approved": True},
                resume_interrupt_id=body["id"],
            )
        finally:
            connection.close()

    helper = threading.Thread(target=decide)
    started = time.monotonic()
    helper.start()
    answer = agent.get(body["id"], wait=20).json()
    helper.join()

    assert answer["status"] == "decided" and answer["answer"]["outcome"] == "approved"
    assert time.monotonic() - started < 10


@pytest.mark.django_db
def test_a_long_poll_gives_up_after_its_wait_with_the_request_pending(agent):
    body = _raise(agent)
    started = time.monotonic()

    answer = agent.get(body["id"], wait=0.3).json()

    assert answer["status"] == "pending" and answer["answer"] is None
    assert 0.3 <= time.monotonic() - started < 5


# --- tokens --------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_with_the_request_scope_gets_a_webhook_secret_shown_once(agent_user):
    out = StringIO()
    call_command(
        "create_api_token", agent_user.username, "--name", "bot", "--scope", "request", stdout=out
    )

    lines = out.getvalue().splitlines()
    row = ApiToken.objects.get(name="bot")
    assert row.webhook_secret.startswith("whsec_")
    assert lines[-2].endswith(row.webhook_secret)
    assert lines[-1].startswith("prt_")
    assert api_token_create(user=agent_user, scopes=["read"])[0].webhook_secret == ""


# --- the admin -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_shows_which_decided_requests_were_never_collected(agent, reviewer, admin_user):
    waiting = _raise(agent, title="Still waiting")
    uncollected = _raise(agent, title="Nobody came")
    collected = _raise(agent, title="Picked up")
    for body in (uncollected, collected):
        decision_submit(
            interrupt=body["id"],
            reviewer=reviewer,
            value={"approved": True},
            resume_interrupt_id=body["id"],
        )
    agent.get(collected["id"])
    page = Client()
    page.force_login(admin_user)
    url = "/admin/portal/externalrequest/"

    listed = page.get(url, {"answer": "uncollected"}).content.decode()
    assert "Nobody came" in listed and "decided, not collected" in listed
    assert "Still waiting" not in listed and "Picked up" not in listed
    everything = page.get(url).content.decode()
    assert "waiting for a decision" in everything and "decided, collected" in everything
    detail = page.get(f"{url}{quote(uncollected['id'])}/change/")
    assert detail.status_code == 200
    assert "whsec_" not in detail.content.decode()
    assert waiting["id"] in everything


@pytest.mark.django_db
def test_a_decided_request_is_in_the_history_the_metrics_and_the_exports(agent, reviewer):
    body = _raise(agent, title="Pay invoice 7", message="Pay ACME?")
    decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=body["id"],
    )
    page = Client()
    page.force_login(reviewer)

    history = page.get("/history/", {"agent": "invoice-bot"}).content.decode()
    assert "Pay ACME?" in history
    assert "invoice-bot" in page.get("/metrics/").content.decode()
    export = b"".join(page.get("/history/export.jsonl").streaming_content).decode()
    assert body["id"] in export


@pytest.mark.django_db
def test_assignees_are_named_in_the_pause_as_an_agents_interrupt_names_them(agent, reviewer):
    body = _raise(agent, assign_to={"users": [reviewer.username], "groups": ["reviewer"]})

    pause = Checkpoint.objects.get(interrupt_id=body["id"])
    assert pause.interrupt["assign_to"] == [f"user:{reviewer.username}", "group:reviewer"]


@pytest.mark.django_db
def test_a_callback_without_a_secret_to_sign_it_is_refused(agent_user):
    token = api_token_create(user=agent_user, scopes=["request"])[0]
    ApiToken.objects.filter(pk=token.pk).update(webhook_secret="")

    with pytest.raises(RequestInvalid, match="no webhook secret"):
        external_request_create(
            user=agent_user,
            token=ApiToken.objects.get(pk=token.pk),
            spec=RequestSpec(agent="invoice-bot", callback_url="https://bot.test/hook"),
        )


# --- the webhook ---------------------------------------------------------------------


@pytest.fixture
def hooked(agent_user, settings):
    """An agent with a webhook receiver on loopback that checks the token's secret."""
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receiver listens on loopback
    row, token = api_token_create(user=agent_user, name="hooked", scopes=["request"])
    receiver = WebhookReceiver(row.webhook_secret).start()
    yield (
        Agent(token),
        receiver,
        PortalClient("http://unused", token, webhook_secret=row.webhook_secret),
    )
    receiver.stop()


def _deliver_due() -> None:
    Delivery.objects.filter(status=Delivery.Status.PENDING).update(next_attempt_at=Now())
    outbox.outbox_deliver()


@pytest.mark.django_db(transaction=True)
def test_the_answer_goes_to_the_callback_signed_and_the_agent_can_verify_it(hooked, reviewer):
    agent, receiver, client = hooked
    body = _raise(agent, callback_url=receiver.url, external_ref="INV-7")

    decision = decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": True, "note": "ok"},
        resume_interrupt_id=body["id"],
    )
    _deliver_due()

    assert len(receiver.handled) == 1 and receiver.refused == []
    headers, raw = receiver.requests[0]
    answered = client.verify_webhook(raw, headers["portal-signature"])
    assert answered.id == body["id"] and answered.external_ref == "INV-7"
    assert answered.answer.outcome == "approved" and answered.answer.goes_ahead
    assert answered.answer.decided_by == reviewer.username
    assert answered.answer.audit_hash == Decision.objects.get(pk=decision.pk).hash
    assert headers["portal-event-type"] == "request.decided"


@pytest.mark.django_db(transaction=True)
def test_after_its_token_is_replaced_the_agent_still_verifies_answers_to_its_old_requests(
    agent_user, reviewer, settings
):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True
    old_row, old_token = api_token_create(user=agent_user, name="old", scopes=["request"])
    receiver = WebhookReceiver(old_row.webhook_secret).start()
    try:
        body = _raise(Agent(old_token), callback_url=receiver.url)
        # The agent gets a new token and the old one is deleted (which revokes it).
        new_row, new_token = api_token_create(user=agent_user, name="new", scopes=["request"])
        old_row.delete()
        decision_submit(
            interrupt=body["id"],
            reviewer=reviewer,
            value={"approved": True},
            resume_interrupt_id=body["id"],
        )
        _deliver_due()
    finally:
        receiver.stop()

    headers, raw = receiver.requests[0]
    signature = headers["portal-signature"]
    # The answer keeps the secret of the token the request was raised with...
    only_new = PortalClient("http://unused", new_token, webhook_secret=new_row.webhook_secret)
    with pytest.raises(signing.SignatureError, match="does not match"):
        only_new.verify_webhook(raw, signature)
    # ...so the agent holds both while such answers may come, and either one verifies.
    both = [new_row.webhook_secret, old_row.webhook_secret]
    client = PortalClient("http://unused", new_token, webhook_secret=both)
    assert client.verify_webhook(raw, signature).answer.outcome == "approved"
    answer = Agent(new_token).get(body["id"])  # the new token reads it too
    assert answer.status_code == 200 and answer.json()["answer"]["outcome"] == "approved"


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_is_down_never_blocks_the_decision_and_gets_the_answer_later(
    hooked, reviewer, admin_user
):
    agent, receiver, client = hooked
    body = _raise(agent, callback_url=receiver.url)
    receiver.stop()

    decision_submit(
        interrupt=body["id"],
        reviewer=reviewer,
        value={"approved": False},
        resume_interrupt_id=body["id"],
        note="Not this one.",
    )
    _deliver_due()

    assert Decision.objects.filter(interrupt_id=body["id"]).exists()
    delivery = Delivery.objects.get(notification__interrupt_id=body["id"])
    assert delivery.status == Delivery.Status.PENDING and delivery.attempts == 1
    page = Client()
    page.force_login(admin_user)
    url = "/admin/portal/externalrequest/"
    assert body["id"] in page.get(url, {"answer": "uncollected"}).content.decode()

    receiver.start()
    _deliver_due()
    _deliver_due()  # nothing left to send: it arrives once

    assert len(receiver.handled) == 1 and receiver.repeats == 0
    headers, raw = receiver.requests[-1]
    assert client.verify_webhook(raw, headers["portal-signature"]).answer.outcome == "rejected"
    assert body["id"] not in page.get(url, {"answer": "uncollected"}).content.decode()
    assert "collected by its webhook" in page.get(url).content.decode()


@pytest.mark.django_db(transaction=True)
def test_an_expired_request_says_so_in_its_webhook(hooked):
    agent, receiver, client = hooked
    body = _raise(agent, callback_url=receiver.url, expires_in=60)

    expiry.interrupts_expire(now=Interrupt.objects.get(pk=body["id"]).expires_at)
    _deliver_due()

    headers, raw = receiver.requests[0]
    assert headers["portal-event-type"] == "request.expired"
    expired = client.verify_webhook(raw, headers["portal-signature"])
    assert expired.status == "expired" and expired.answer.outcome == "expired"
    assert not expired.answer.goes_ahead


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_thread_tells_its_agent_by_webhook(hooked, admin_user):
    from portal.reviews.threads import thread_cancel

    agent, receiver, client = hooked
    body = _raise(agent, callback_url=receiver.url)

    thread_cancel(thread=Thread.objects.get(pk=body["thread_id"]), user=admin_user)
    _deliver_due()

    headers, raw = receiver.requests[0]
    cancelled = client.verify_webhook(raw, headers["portal-signature"])
    assert cancelled.status == "cancelled" and cancelled.answer.outcome == "cancelled"
    assert cancelled.answer.decided_by == admin_user.username
    assert not cancelled.answer.goes_ahead
    assert headers["portal-event-type"] == "request.decided"


@pytest.mark.django_db
def test_a_policy_can_require_two_approvals_of_an_external_request(
    agent, reviewer, second_reviewer, settings
):
    settings.PORTAL_POLICIES = {"invoice-bot:*": {"approvals_required": 2}}
    body = _raise(agent)

    for who in (reviewer, second_reviewer):
        decision_submit(
            interrupt=body["id"],
            reviewer=who,
            value={"approved": True},
            resume_interrupt_id=body["id"],
        )
        if who is reviewer:
            assert agent.get(body["id"]).json()["status"] == "pending"

    answer = agent.get(body["id"]).json()
    assert answer["status"] == "decided" and answer["answer"]["outcome"] == "approved"
    assert answer["answer"]["decided_by"] == second_reviewer.username
    assert Thread.objects.get(pk=body["thread_id"]).status == Thread.Status.DONE
    assert not Run.objects.exists()
