"""A LangGraph graph reviewed in the portal end to end (``agents.portal_langgraph``).

LangGraph is a test dependency (the dev group), never the runtime's, so these run in
``make test`` like every other test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from agents.portal_client import PortalClient
from agents.portal_langgraph import (
    invoke_until_answered,
    portal_request,
    resume_with,
)
from examples.langgraph_invoice import build
from portal.accounts.tokens import api_token_create
from portal.models import ExternalRequest, Interrupt
from portal.notify import outbox
from portal.reviews.decisions import decision_submit
from tests.factories import make_user
from tests.liveserver import live_portal
from tests.loopback import WebhookReceiver

# One live server for the module: its tests stay on one xdist worker (make test: loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("langgraph_adapter")]

INVOICE = {"vendor": "ACME", "amount": 120.0}


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    # The webhook receiver listens on loopback.
    logs = tmp_path_factory.mktemp("langgraph")
    with django_db_blocker.unblock(), live_portal(logs, PORTAL_ALLOW_PRIVATE_TARGETS="1") as base:
        yield base


@pytest.fixture
def portal(server, transactional_db, roles) -> PortalClient:
    row, token = api_token_create(user=make_user("lg-bot", role="agent"), scopes=["request"])
    return PortalClient(server, token, webhook_secret=row.webhook_secret, timeout=20)


def decide(request_id: str, reviewer, value, note: str = "") -> None:
    decision_submit(
        interrupt=request_id,
        reviewer=reviewer,
        value=value,
        resume_interrupt_id=request_id,
        note=note,
    )


def test_a_graph_pauses_on_a_portal_request_and_continues_with_the_edit(portal, reviewer):
    graph = build(portal)
    config = {"configurable": {"thread_id": "invoice-7"}}

    paused = graph.invoke(INVOICE, config)
    request_id = portal_request(paused)

    interrupt = Interrupt.objects.get(pk=request_id)
    assert (interrupt.status, interrupt.agent) == ("pending", "invoice-bot")
    assert interrupt.value == {"vendor": "ACME", "amount": 120.0}
    raised = ExternalRequest.objects.get(pk=request_id)
    assert (raised.external_ref, raised.source) == ("invoice-7", "langgraph")

    decide(request_id, reviewer, {"type": "edit", "args": {"amount": 100.0}})
    done = graph.invoke(resume_with(portal.wait(request_id, timeout=30)), config)

    assert done["paid"] == 100.0
    assert done["said"] == f"Paid $100.00, approved by {reviewer.username}."
    # The node ran twice (LangGraph's re-run rule); the portal holds one request.
    assert Interrupt.objects.count() == 1


def test_invoke_until_answered_waits_by_long_poll_and_an_ignore_pays_nothing(portal, reviewer):
    graph = build(portal)
    config = {"configurable": {"thread_id": "invoice-8"}}

    def reviewer_ignores() -> None:
        try:
            deadline = time.monotonic() + 30
            while not (pending := Interrupt.objects.filter(status="pending").first()):
                assert time.monotonic() < deadline, "the graph never asked"
                time.sleep(0.1)
            decide(pending.pk, reviewer, {"type": "ignore"}, note="Not today.")
        finally:
            connection.close()

    helper = threading.Thread(target=reviewer_ignores)
    helper.start()
    done = invoke_until_answered(graph, INVOICE, config, portal, timeout=30)
    helper.join()

    assert done["paid"] is None and done["said"] == "Not paid (ignored)."


def test_a_webhook_resumes_the_graph_with_the_decision(
    server, transactional_db, roles, reviewer, settings
):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # this process may send it too, to loopback
    row, token = api_token_create(user=make_user("hook-bot", role="agent"), scopes=["request"])
    portal = PortalClient(server, token, webhook_secret=row.webhook_secret, timeout=20)
    receiver = WebhookReceiver(row.webhook_secret).start()
    try:
        graph = build(portal, callback_url=receiver.url)
        paused = graph.invoke(INVOICE, {"configurable": {"thread_id": "invoice-10"}})
        request_id = portal_request(paused)
        decide(request_id, reviewer, {"type": "accept"})
        deadline = time.monotonic() + 30
        while not receiver.handled:  # the live server's notifier, or this process
            assert time.monotonic() < deadline, "no webhook arrived"
            outbox.outbox_deliver()
            time.sleep(0.2)
    finally:
        receiver.stop()

    # What the receiver's handler does: verify, then resume the graph the request names.
    headers, body = receiver.requests[-1]
    answered = portal.verify_webhook(body, headers["portal-signature"])
    done = graph.invoke(
        resume_with(answered), {"configurable": {"thread_id": answered.external_ref}}
    )

    assert done["paid"] == 120.0
    assert done["said"] == f"Paid $120.00, approved by {reviewer.username}."


def test_a_resume_that_is_not_the_requests_answer_is_refused(portal):
    from langgraph.types import Command

    graph = build(portal)
    config = {"configurable": {"thread_id": "invoice-9"}}
    graph.invoke(INVOICE, config)

    with pytest.raises(ValueError, match="other than the answer"):
        graph.invoke(Command(resume={"type": "accept"}), config)
