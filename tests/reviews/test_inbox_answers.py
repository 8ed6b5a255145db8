"""Requests that declare their answers (accept, edit, response, ignore): the form offers
exactly those, each is recorded as its own outcome, and the API refuses the others."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from agents import inbox
from portal.audit import metrics
from portal.models import Decision, Run
from tests.api.test_api import api_for, resume_body, resume_url
from tests.audit.test_exports import _body
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db

REFUND_ARGS = {"order_id": "A-1001", "amount": 42.5}
REFUND_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


def declaring(*actions: str, **kwargs):
    """A request raised inside a refund tool, allowing ``actions`` (as the runtime builds it)."""
    schema = inbox.response_schema(actions, args=REFUND_ARGS, args_schema=REFUND_PARAMETERS)
    return make_interrupt(schema=schema, reason="refund", **kwargs)


def decide(client, user, interrupt, **data):
    client.force_login(user)
    return client.post(
        reverse("interrupt_decide", args=[interrupt.pk]),
        {"resume_interrupt_id": interrupt.pk, **data},
    )


def buttons(html: str) -> set[str]:
    found = set()
    for action in ("accept", "edit", "response", "ignore", "approve", "reject", "submit"):
        if f'name="action" value="{action}"' in html:
            found.add(action)
    return found


@pytest.mark.parametrize(
    "actions",
    [("accept", "edit", "response", "ignore"), ("accept", "response"), ("edit", "ignore")],
)
def test_the_form_offers_exactly_the_answers_the_request_declares(client, reviewer, actions):
    interrupt = declaring(*actions)
    client.force_login(reviewer)

    html = client.get(reverse("interrupt_detail", args=[interrupt.pk])).content.decode()

    assert buttons(html) == set(actions)
    assert ('name="response"' in html) == ("response" in actions)
    # The edit form starts from the arguments the tool was called with.
    assert ('name="args.amount" value="42.5"' in html) == ("edit" in actions)


@pytest.mark.parametrize(
    ("data", "outcome", "value", "executed"),
    [
        ({"action": "accept"}, "approved", {"type": "accept"}, REFUND_ARGS),
        (
            {"action": "edit", "args.order_id": "A-1001", "args.amount": "10"},
            "edited",
            {"type": "edit", "args": {"order_id": "A-1001", "amount": 10}},
            {"order_id": "A-1001", "amount": 10},
        ),
        (
            {"action": "response", "response": "Ask for a photo first."},
            "responded",
            {"type": "response", "args": "Ask for a photo first."},
            None,
        ),
        (
            {"action": "ignore", "note": "Not ours."},
            "ignored",
            {"type": "ignore", "note": "Not ours."},
            None,
        ),
    ],
)
def test_each_answer_is_recorded_as_its_own_outcome_and_resumes_the_thread_with_it(
    client, reviewer, data, outcome, value, executed
):
    interrupt = declaring("accept", "edit", "response", "ignore")

    response = decide(client, reviewer, interrupt, **data)

    assert response.status_code in (200, 302, 303), response.content.decode()[:2000]
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == outcome
    assert decision.value == value
    key = interrupt.tool_call_id
    assert decision.original_args == {key: REFUND_ARGS}
    assert decision.executed_args == ({key: executed} if executed is not None else None)
    run = Run.objects.get(thread=interrupt.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"] == value


def test_an_answer_the_request_did_not_declare_is_refused_by_the_form(client, reviewer):
    interrupt = declaring("accept", "response")

    response = decide(client, reviewer, interrupt, action="ignore")

    assert response.status_code == 422
    assert "This request allows only: accept, send response." in response.content.decode()
    assert not Decision.objects.exists()


def test_a_response_needs_its_text(client, reviewer):
    interrupt = declaring("accept", "response")

    response = decide(client, reviewer, interrupt, action="response", response="")

    assert response.status_code == 422
    assert response.context["form"].errors["response"]
    assert not Decision.objects.exists()


def test_edited_arguments_are_checked_against_the_tools_schema(client, reviewer):
    interrupt = declaring("accept", "edit")

    response = decide(
        client, reviewer, interrupt, action="edit", **{"args.order_id": "", "args.amount": "5"}
    )

    assert response.status_code == 422
    assert response.context["form"].errors["args.order_id"] == ["$.args.order_id: required"]
    assert not Decision.objects.exists()


def test_the_api_lists_the_declared_answers_and_refuses_others_with_a_clear_422(client, reviewer):
    interrupt = declaring("accept", "response")
    api = api_for(client, reviewer)

    listed = api.get(f"/api/interrupts/{interrupt.pk}").json()
    refused = api.post(resume_url(interrupt), resume_body(interrupt, {"type": "ignore"}))

    assert listed["actions"] == ["accept", "response"]
    assert refused.status_code == 422
    problem = refused.json()
    assert "allows only these answers: accept, response" in problem["detail"]
    assert problem["errors"] == [
        "$.type: this request does not allow 'ignore'; it allows 'accept', 'response'"
    ]
    assert not Decision.objects.exists()


def test_the_api_records_a_response_as_responded(client, reviewer):
    interrupt = declaring("accept", "response")

    answer = {"type": "response", "args": "Not without a receipt."}
    response = api_for(client, reviewer).post(resume_url(interrupt), resume_body(interrupt, answer))

    assert response.status_code == 202
    assert response.json()["outcome"] == "responded"


def test_history_metrics_exports_and_the_audit_chain_carry_the_new_outcomes(
    client, reviewer, auditor, capsys
):
    responded = declaring("accept", "response")
    ignored = declaring("accept", "ignore")
    make_decision(interrupt=responded, reviewer=reviewer, value={"type": "response", "args": "No."})
    make_decision(interrupt=ignored, reviewer=reviewer, value={"type": "ignore"})
    client.force_login(auditor)

    page = client.get(reverse("history"), {"outcome": "responded"})
    lines = _body(client.get(reverse("history_export_jsonl"))).splitlines()

    assert [row["outcome"] for row in page.context["page"].rows] == ["responded"]
    assert sorted(json.loads(line)["outcome"] for line in lines) == ["ignored", "responded"]
    assert {"responded", "ignored"} <= set(metrics.OUTCOMES)
    call_command("verify_audit")
    assert "2 decisions" in capsys.readouterr().out


def test_a_breakpoint_before_the_tools_can_be_approved_with_edited_arguments(client, reviewer):
    interrupt = make_tool_approval()
    interrupt.reason = "breakpoint"
    interrupt.save(update_fields=["reason"])
    call_id = interrupt.value["tool_calls"][0]["id"]
    client.force_login(reviewer)

    html = client.get(reverse("interrupt_detail", args=[interrupt.pk])).content.decode()
    decide(
        client,
        reviewer,
        interrupt,
        action="edit",
        **{f"args.{call_id}.amount": "50", f"args.{call_id}.recipient": "Alice"},
    )

    assert 'name="action" value="edit"' in html
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == "edited"
    assert decision.original_args == {call_id: {"amount": 5000.0, "recipient": "Alice"}}
    assert decision.executed_args == {call_id: {"amount": 50, "recipient": "Alice"}}


# --- through the worker ------------------------------------------------------------------


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def drain() -> int:
    from portal.runs.worker import Worker

    return Worker(name="test-worker").run_forever(once=True)


def tool_message(thread) -> dict:
    from portal.runs.checkpointer import DjangoCheckpointer

    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    return next(m for m in reversed(snapshot.messages) if m["role"] == "tool")


@pytest.mark.usefixtures("test_agents")
@pytest.mark.parametrize(
    ("data", "given", "result"),
    [
        ({"action": "edit", "args.amount": "7"}, ["7"], "Gave $7.00."),
        ({"action": "accept"}, ["42.0"], "Gave $42.00."),
        ({"action": "ignore", "note": "no"}, [], '"answer": "ignore"'),
        ({"action": "response", "response": "Not today."}, [], '"text": "Not today."'),
    ],
)
def test_the_agent_receives_the_typed_answer_and_acts_only_on_accept_or_edit(
    client, support_agent, reviewer, effects, data, given, result
):
    from portal.models import Interrupt
    from portal.reviews import threads
    from tests.testagents import read_effects

    thread, _ = threads.thread_start(agent="inbox", input=say("give 42"), user=support_agent)
    drain()
    request = Interrupt.objects.get(thread=thread)
    assert inbox.declared(request.response_schema).args == {"amount": 42.0}

    decide(client, reviewer, request, **data)
    drain()

    assert [line.split()[1] for line in read_effects(effects, "give")] == given
    assert result in tool_message(thread)["content"]


@pytest.mark.usefixtures("test_agents")
def test_an_edit_at_the_accounts_breakpoint_deletes_the_edited_account(
    client, support_agent, reviewer
):
    from agents.examples import accounts
    from portal.models import Interrupt
    from portal.reviews import threads

    accounts.DELETED.clear()
    thread, _ = threads.thread_start(
        agent="accounts", input=say("Please delete the account for user u-381."), user=support_agent
    )
    drain()
    request = Interrupt.objects.get(thread=thread)
    call_id = request.value["tool_calls"][0]["id"]
    client.force_login(reviewer)
    page = client.get(reverse("interrupt_detail", args=[request.pk])).content.decode()
    assert f'name="args.{call_id}.user_id" value="u-381"' in page

    decide(client, reviewer, request, action="edit", **{f"args.{call_id}.user_id": "u-382"})
    drain()

    assert accounts.DELETED == ["u-382"]
    result = tool_message(thread)
    assert result["meta"]["original_args"] == {"user_id": "u-381"}
    assert result["meta"]["executed_args"] == {"user_id": "u-382"}
    decision = Decision.objects.get(interrupt=request)
    assert decision.outcome == "edited"
    assert decision.executed_args == {call_id: {"user_id": "u-382"}}


@pytest.mark.usefixtures("test_agents")
@pytest.mark.parametrize(
    ("data", "outcome", "reason"),
    [
        ({"action": "ignore", "note": "wrong user"}, "ignored", "wrong user"),
        ({"action": "response", "response": "Deactivate it instead."}, "responded", "Deactivate"),
        ({"action": "reject", "note": "Not allowed."}, "rejected", "Not allowed."),  # a yes/no "no"
    ],
)
def test_the_accounts_breakpoint_takes_typed_answers_each_its_own_outcome_and_runs_nothing(
    client, support_agent, reviewer, data, outcome, reason
):
    from agents.examples import accounts
    from portal.models import Interrupt
    from portal.reviews import threads

    accounts.DELETED.clear()
    thread, _ = threads.thread_start(
        agent="accounts", input=say("Please delete the account for user u-381."), user=support_agent
    )
    drain()
    request = Interrupt.objects.get(thread=thread)
    client.force_login(reviewer)
    page = client.get(reverse("interrupt_detail", args=[request.pk])).content.decode()
    assert buttons(page) == {"accept", "edit", "response", "ignore"}

    decide(client, reviewer, request, **data)
    drain()

    assert accounts.DELETED == []
    assert json.loads(tool_message(thread)["content"])["status"] == "declined"
    assert reason in tool_message(thread)["content"]
    decision = Decision.objects.get(interrupt=request)
    assert (decision.outcome, decision.executed_args) == (outcome, None)


def test_an_expired_request_that_declared_its_answers_resumes_with_no_answer():
    from datetime import timedelta

    from django.utils import timezone

    from portal.reviews.expiry import interrupts_expire

    interrupt = declaring("accept", "edit", "response", "ignore")
    interrupt.expires_at = timezone.now() - timedelta(seconds=1)
    interrupt.save(update_fields=["expires_at"])

    [decision] = interrupts_expire()

    # No answer is not an accept: the tool sees None and does not go ahead.
    assert (decision.outcome, decision.value, decision.executed_args) == ("expired", None, None)
    run = Run.objects.get(thread=interrupt.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"] is None


def test_a_tool_approvals_ignore_rejection_and_response_are_told_apart_everywhere(
    client, reviewer, auditor
):
    ignored, rejected, responded = (make_tool_approval() for _ in range(3))
    make_decision(interrupt=ignored, reviewer=reviewer, value={"type": "ignore"})
    make_decision(interrupt=rejected, reviewer=reviewer, value={"approved": False})
    make_decision(interrupt=responded, reviewer=reviewer, value={"type": "response", "args": "No."})
    client.force_login(auditor)

    def found(**criteria):
        page = client.get(reverse("history"), {"tool": "transfer_funds", **criteria})
        return [row["decision_id"] for row in page.context["page"].rows]

    assert found(outcome="ignored") == [ignored.decision.pk]
    assert found(outcome="rejected") == [rejected.decision.pk]
    assert found(outcome="responded") == [responded.decision.pk]
    now = timezone.now()
    [row] = metrics.summary(now - timedelta(hours=1), now + timedelta(hours=1))["by_agent"]
    assert {o: n for o, n in row.counts.items() if n} == {
        "ignored": 1,
        "rejected": 1,
        "responded": 1,
    }


def test_the_thread_history_and_metrics_pages_name_each_outcome_in_words(
    client, support_agent, reviewer, auditor
):
    responded = make_tool_approval(owner=support_agent)
    make_decision(interrupt=responded, reviewer=reviewer, value={"type": "response", "args": "No."})

    client.force_login(support_agent)
    thread = client.get(reverse("thread_detail", args=[responded.thread_id])).content.decode()
    client.force_login(auditor)
    history = client.get(reverse("history")).content.decode()
    metrics_page = client.get(reverse("metrics")).content.decode()

    for page in (thread, history, metrics_page):
        assert "Answered in words instead" in page
    assert ">responded<" not in thread + history + metrics_page


@pytest.mark.django_db
def test_a_schema_that_only_carries_the_marker_is_decided_and_expired_as_any_other(
    client, reviewer
):
    from portal.models import Interrupt
    from portal.reviews.decisions import decision_submit
    from portal.reviews.expiry import interrupts_expire

    # An agent's own schema with the marker on it, but not the shape the runtime builds.
    spoofed = make_interrupt(
        schema={
            "$comment": inbox.MARKER,
            "type": "object",
            "properties": {"approved": {"type": "boolean"}},
            "allOf": [True],
        }
    )
    client.force_login(reviewer)
    page = client.get(reverse("interrupt_detail", args=[spoofed.pk]))
    assert page.status_code == 200
    answered = make_interrupt(schema=spoofed.response_schema)
    decision = decision_submit(
        interrupt=answered,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=answered.pk,
    )
    assert decision.outcome == Decision.Outcome.APPROVED
    other = make_interrupt()
    overdue = timezone.now() - timedelta(seconds=5)
    Interrupt.objects.filter(pk__in=[spoofed.pk, other.pk]).update(expires_at=overdue)
    interrupts_expire()
    assert set(
        Interrupt.objects.filter(pk__in=[spoofed.pk, other.pk]).values_list("status", flat=True)
    ) == {Interrupt.Status.EXPIRED}
