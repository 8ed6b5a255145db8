"""A rejection or an ignore carries a reason: every door refuses one without a note,
naming the field, and records nothing; a policy may relax it per agent or reason."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from portal.accounts.tokens import api_token_create
from portal.errors import InvalidDecision
from portal.models import Decision, Interrupt, Run
from portal.reviews.decisions import decision_submit
from tests.factories import make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


def nothing_recorded(interrupt: Interrupt) -> None:
    assert not Decision.objects.filter(interrupt=interrupt).exists()
    assert not Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).exists()
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


@pytest.mark.parametrize(
    ("value", "note", "says"),
    [
        ({"approved": False}, "", "a rejection needs a reason"),
        ({"approved": False, "note": "   "}, "", "a rejection needs a reason"),
        ({"type": "ignore"}, "  ", "ignoring needs a reason"),
    ],
)
def test_a_refusal_without_a_note_is_refused_naming_the_note(reviewer, value, note, says):
    interrupt = make_tool_approval() if "type" in value else make_interrupt()

    with pytest.raises(InvalidDecision) as refused:
        decision_submit(
            interrupt=interrupt,
            reviewer=reviewer,
            value=value,
            resume_interrupt_id=interrupt.pk,
            note=note,
        )

    assert refused.value.status_code == 422
    assert refused.value.errors == [
        f"$.note: {says}: write a note (the agent and whoever asked read it)"
    ]
    nothing_recorded(interrupt)


def test_a_refusal_with_a_note_is_recorded_with_it(reviewer):
    interrupt = make_interrupt()

    decision = decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"approved": False},
        resume_interrupt_id=interrupt.pk,
        note="Outside the return window.",
    )

    assert decision.outcome == "rejected" and decision.note == "Outside the return window."
    assert decision.value == {"approved": False, "note": "Outside the return window."}


def test_an_approval_and_a_response_need_no_note(reviewer):
    approved = make_interrupt()
    responded = make_tool_approval()

    yes = decision_submit(
        interrupt=approved,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=approved.pk,
    )
    said = decision_submit(
        interrupt=responded,
        reviewer=reviewer,
        value={"type": "response", "args": "Send half now."},
        resume_interrupt_id=responded.pk,
    )

    assert (yes.outcome, said.outcome) == ("approved", "responded")


def test_a_policy_can_let_one_agent_refuse_without_a_note(settings, reviewer):
    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:tool_approval": {"refusal_needs_note": False}}
    relaxed = make_interrupt(agent="refunds")
    strict = make_interrupt(agent="transfers")

    decision = decision_submit(
        interrupt=relaxed,
        reviewer=reviewer,
        value={"approved": False},
        resume_interrupt_id=relaxed.pk,
    )
    with pytest.raises(InvalidDecision):
        decision_submit(
            interrupt=strict,
            reviewer=reviewer,
            value={"approved": False},
            resume_interrupt_id=strict.pk,
        )

    assert decision.outcome == "rejected"
    nothing_recorded(strict)


def test_a_policy_that_is_not_true_or_false_is_refused(settings):
    from portal.models import policies

    settings.PORTAL_POLICIES = {"*:*": {"refusal_needs_note": "no"}}
    with pytest.raises(ValueError, match=r"refusal_needs_note.*true or false"):
        policies.policy_for("refunds", "tool_approval")


def test_the_dashboard_refuses_an_empty_rejection_with_the_error_on_the_note(client, reviewer):
    interrupt = make_interrupt()
    client.force_login(reviewer)

    response = client.post(
        reverse("interrupt_decide", args=[interrupt.pk]),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": ""},
    )

    assert response.status_code == 422
    form = response.context["form"]
    assert form.errors["note"] == [
        "$.note: a rejection needs a reason: write a note (the agent and whoever asked read it)"
    ]
    nothing_recorded(interrupt)


def test_the_admin_refuses_an_empty_ignore_naming_the_note(admin_client):
    interrupt = make_tool_approval()

    response = admin_client.post(
        reverse("admin:portal_interrupt_decide", args=[quote(interrupt.pk)]),
        {"resume_interrupt_id": interrupt.pk, "action": "ignore"},
    )

    assert response.status_code == 422
    assert "$.note: ignoring needs a reason" in response.content.decode()
    nothing_recorded(interrupt)


def test_the_api_refuses_an_empty_rejection_with_422_naming_note(reviewer):
    interrupt = make_interrupt()

    response = Client().post(
        f"/api/threads/{interrupt.thread_id}/resume",
        json.dumps({"resume": {"approved": False}, "resume_interrupt_id": interrupt.pk}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=reviewer)[1]}",
    )

    assert response.status_code == 422, response.content
    assert any(line.startswith("$.note:") for line in response.json()["errors"])
    nothing_recorded(interrupt)


def test_the_note_help_speaks_of_the_refusal_the_request_offers(client, reviewer):
    client.force_login(reviewer)
    approval = client.get(reverse("interrupt_detail", args=[make_interrupt().pk])).content
    inbox = client.get(reverse("interrupt_detail", args=[make_tool_approval().pk])).content

    assert "If you reject, the agent" in approval.decode()
    assert "If you ignore it, the agent" in inbox.decode()
    assert "reject" not in inbox.decode().split('id="decision-form"')[1].split("</form>")[0]
