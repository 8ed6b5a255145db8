"""The refunds demo takes a partial refund: a reviewer edits the amount, the schema caps it
at the amount asked for (the tool checks again), and support reads what changed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.examples import refunds
from portal.models import Decision, Interrupt
from portal.reviews import threads
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.worker import Worker

pytestmark = pytest.mark.django_db


def drain() -> int:
    return Worker(name="test-worker").run_forever(once=True)


def refund_request(support_agent, text="Refund $120.00 for order A-1001, it arrived broken."):
    thread, _ = threads.thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": text}]},
        user=support_agent,
    )
    drain()
    return Interrupt.objects.get(thread=thread)


def decide(client, reviewer, request, **data):
    client.force_login(reviewer)
    return client.post(
        reverse("interrupt_decide", args=[request.pk]),
        {"resume_interrupt_id": request.pk, **data},
    )


def test_the_refund_form_offers_the_amount_prefilled_and_capped(client, support_agent, reviewer):
    request = refund_request(support_agent)
    client.force_login(reviewer)

    html = client.get(reverse("interrupt_detail", args=[request.pk])).content.decode()

    assert 'name="args.amount"' in html and 'value="120.0"' in html
    assert "Approve with these arguments" in html and "At most $120.00" in html


def test_an_edited_amount_is_paid_recorded_as_edited_and_told_to_support(
    client, support_agent, reviewer
):
    refunds.ISSUED.clear()
    request = refund_request(support_agent)

    response = decide(client, reviewer, request, action="edit", **{"args.amount": "60"})
    drain()

    assert response.status_code == 302, response.content.decode()[:3000]
    decision = Decision.objects.get(interrupt=request)
    assert decision.outcome == Decision.Outcome.EDITED
    assert decision.value == {"approved": True, "args": {"amount": 60}}
    assert decision.executed_args == {request.tool_call_id: {"order_id": "A-1001", "amount": 60}}
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 60.0}]
    chat = client.get(reverse("thread_detail", args=[request.thread_id])).content.decode()
    assert "amount: $120.00 → $60.00" in chat
    messages = DjangoCheckpointer().get_sync(str(request.thread_id)).messages
    assert "amount: $120.00 → $60.00" in messages[-1]["content"]


@pytest.mark.parametrize("amount", ["500", "0", "-5"])
def test_an_amount_above_the_one_asked_for_or_not_above_zero_is_refused(
    client, support_agent, reviewer, amount
):
    refunds.ISSUED.clear()
    request = refund_request(support_agent)

    response = decide(client, reviewer, request, action="edit", **{"args.amount": amount})

    assert response.status_code == 422
    assert "$.args.amount" in response.context["form"].errors["args.amount"][0]
    assert not Decision.objects.filter(interrupt=request).exists()


def test_the_tool_itself_refuses_an_amount_above_the_one_asked_for():
    # Fail closed: were the schema ever bypassed, the tool pays nothing.
    assert refunds._paid({"approved": True, "args": {"amount": 500}}, 120.0) is None
    assert refunds._paid({"approved": True, "args": {"amount": True}}, 120.0) is None
    assert refunds._paid({"approved": True, "args": {"amount": 60}}, 120.0) == 60.0
    assert refunds._paid({"approved": True}, 120.0) == 120.0
