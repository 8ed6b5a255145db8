"""Simulating a rule version against the decisions of the last N days: each figure exactly
right on a constructed history, the disagreements kept newest first, who ran it audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.models import AuditEvent, Decision, RuleSimulation
from portal.reviews import rule_simulation
from portal.reviews.rule_simulation import rule_simulate
from portal.reviews.rules import RuleRefused, rule_activate, version_matches
from tests.factories import (
    grant_manage_rules,
    make_interrupt,
    make_rule_version,
    make_tool_approval,
)

pytestmark = pytest.mark.django_db


def _decided(outcome, *, amount, status="delivered", agent="refunds", days_ago=0, door="dashboard"):
    interrupt = make_interrupt(
        agent=agent, value={"order_id": "A-1", "amount": amount, "order_status": status}
    )
    decision = Decision(
        interrupt=interrupt,
        thread=interrupt.thread,
        outcome=outcome,
        value={"approved": outcome in ("approved", "edited")},
        door=door,
        created_at=timezone.now() - timedelta(days=days_ago, minutes=1),
    )
    decision.save()
    return decision


@pytest.fixture
def writer(reviewer):
    return grant_manage_rules(reviewer)


@pytest.fixture
def checker(second_reviewer):
    return grant_manage_rules(second_reviewer)


@pytest.fixture
def history():
    """Each decision in the window, by name; the last three are not looked at or matched."""
    return {
        "agrees_if_approve": _decided("approved", amount=4),
        "rejected": _decided("rejected", amount=5),
        "edited": _decided("edited", amount=6),
        "ignored": _decided("ignored", amount=7),
        "expired": _decided("expired", amount=8),
        "cancelled": _decided("cancelled", amount=9),
        "responded": _decided("responded", amount=1),
        # Looked at, not matched: too much, not delivered, another agent.
        "too_much": _decided("approved", amount=20),
        "in_transit": _decided("approved", amount=3, status="in_transit"),
        "transfers": _decided("approved", amount=2, agent="transfers"),
        # Not looked at: before the window, and a rule's own decision.
        "old": _decided("approved", amount=4, days_ago=10),
        "by_rule": _decided("rejected", amount=4, door="rule"),
    }


def test_an_approving_rule_counts_what_it_matches_and_agrees_only_with_approvals(writer, history):
    version = make_rule_version(by=writer)
    simulation = rule_simulate(version, by=writer, days=7)
    result = simulation.result
    assert result["decisions"] == 10
    assert result["matched"] == 7
    assert result["by_action"] == {"approve": 7, "refuse": 0, "route": 0}
    assert result["outcomes"] == {
        "approved": 1,
        "cancelled": 1,
        "edited": 1,
        "expired": 1,
        "ignored": 1,
        "rejected": 1,
        "responded": 1,
    }
    # Expired and cancelled were nobody's answer: not compared.
    assert (result["compared"], result["agreed"], result["disagreed"]) == (5, 1, 4)
    assert result["agreement"] == 0.2
    # An edit went ahead with other arguments than asked: it disagrees with an approval.
    newest_first = ["responded", "ignored", "edited", "rejected"]
    assert result["disagreements"] == [
        {
            "decision": history[name].pk,
            "request": history[name].interrupt_id,
            "outcome": history[name].outcome,
        }
        for name in newest_first
    ]
    assert simulation.run_by == writer and simulation.days == 7 and simulation.seconds > 0


def test_a_refusing_rule_agrees_with_rejections_ignores_and_responses(writer, history):
    version = make_rule_version(by=writer, action="refuse", refusal_reason="Ask the shop.")
    result = rule_simulate(version, by=writer, days=7).result
    assert result["by_action"] == {"approve": 0, "refuse": 7, "route": 0}
    assert (result["compared"], result["agreed"], result["disagreed"]) == (5, 3, 2)
    assert result["agreement"] == 0.6
    assert [row["outcome"] for row in result["disagreements"]] == ["edited", "approved"]


def test_a_routing_rule_is_counted_but_not_compared(writer, history):
    version = make_rule_version(by=writer, action="route", route_group="finance")
    result = rule_simulate(version, by=writer, days=7).result
    assert result["by_action"] == {"approve": 0, "refuse": 0, "route": 7}
    assert (result["compared"], result["agreed"], result["disagreed"]) == (0, 0, 0)
    assert result["agreement"] is None and result["disagreements"] == []


def test_the_window_takes_in_older_decisions_when_it_is_longer(writer, history):
    version = make_rule_version(by=writer)
    result = rule_simulate(version, by=writer, days=30).result
    assert (result["decisions"], result["matched"], result["agreed"]) == (11, 8, 2)


def test_only_the_newest_disagreements_are_kept_but_all_are_counted(writer, history, monkeypatch):
    monkeypatch.setattr(rule_simulation, "KEPT", 2)
    result = rule_simulate(make_rule_version(by=writer), by=writer, days=7).result
    assert result["disagreed"] == 4
    assert [row["decision"] for row in result["disagreements"]] == [
        history["responded"].pk,
        history["ignored"].pk,
    ]


def test_a_tool_approval_is_matched_on_its_calls_arguments(writer):
    request = make_tool_approval(args={"amount": 5000.0, "recipient": "Alice"})
    Decision(interrupt=request, thread=request.thread, outcome="rejected", door="api").save()
    make_interrupt()  # a refund pending: no decision, never looked at
    conditions = {
        "properties": {"arguments": {"properties": {"amount": {"exclusiveMaximum": 10000}}}}
    }
    names = iter(range(10))

    def simulated(**fields):
        version = make_rule_version(by=writer, name=f"r{next(names)}", **fields)
        return version, rule_simulate(version, by=writer, days=1).result

    version, result = simulated(agent="", reason="", tool="transfer_funds", conditions=conditions)
    assert (result["decisions"], result["matched"], result["disagreed"]) == (1, 1, 1)
    assert version_matches(version, request)  # the one rule, with the same answer
    for fields in (
        {"tool": "issue_refund"},
        {"tool": "transfer_funds", "agent": "refunds"},
        {
            "tool": "transfer_funds",
            "conditions": {"properties": {"arguments": {"required": ["x"]}}},
        },
    ):
        version, result = simulated(**{"agent": "", "reason": "", "conditions": {}} | fields)
        assert result["matched"] == 0, fields
        assert not version_matches(version, request)


def test_a_simulation_is_audited_and_lets_another_person_activate(writer, checker, history):
    version = make_rule_version(by=writer)
    with pytest.raises(RuleRefused, match="not been simulated"):
        rule_activate(version, by=checker)
    simulation = rule_simulate(version, by=checker, days=7)
    event = AuditEvent.objects.get(action="rule.simulate")
    assert event.actor == checker and event.target_id == str(version.rule_id)
    assert event.detail["simulation"] == simulation.pk and event.detail["disagreed"] == 4
    assert rule_activate(version, by=checker).active_version == version


def test_simulating_needs_the_permission_and_a_sensible_window(writer, outsider, history):
    version = make_rule_version(by=writer)
    with pytest.raises(RuleRefused, match="manage_rules"):
        rule_simulate(version, by=outsider, days=7)
    for days in (0, rule_simulation.MAX_DAYS + 1, "7", True):
        with pytest.raises(RuleRefused) as refused:
            rule_simulate(version, by=writer, days=days)
        assert refused.value.field == "days"
    assert not RuleSimulation.objects.exists()


DOCS = [
    {"amount": 4.99, "status": "delivered", "note": "a"},
    {"amount": 4.99, "status": "delivered"},
    {"amount": 4.99, "status": "delivered", "note": "b", "extra": [1]},
    {"amount": 4.99, "status": "shipped"},
    {"amount": 12, "status": "delivered"},
    {"amount": True, "status": "delivered"},
    {"amount": 1, "status": "delivered"},
    {"amount": 1.0, "status": "delivered"},
    {"status": "delivered"},
    {"amount": "4", "status": "delivered"},
    {"amount": 4, "status": ["delivered"]},
    [4.99],
    "delivered",
]


@pytest.mark.parametrize(
    "arguments",
    [
        {
            "properties": {
                "amount": {"type": "number", "maximum": 10},
                "status": {"const": "delivered"},
            },
            "required": ["amount"],
        },
        {"properties": {"amount": {"type": "integer"}}, "additionalProperties": False},
        {"type": "object", "required": ["amount", "status"], "maxProperties": 2},
        {"properties": {"amount": {"enum": [1, 4.99]}, "status": {"minLength": 8}}},
        {"anyOf": [{"required": ["note"]}, {"properties": {"amount": {"exclusiveMaximum": 2}}}]},
    ],
)
def test_the_remembered_verdicts_are_the_validators_own(writer, arguments):
    """The matcher remembers a verdict by the part of a document its conditions can see:
    every document, in any order, gets the answer a fresh validator gives it."""
    from agents.schema import validator_for
    from portal.reviews.rules import documents, version_matcher

    conditions = {"properties": {"arguments": arguments}}
    version = make_rule_version(by=writer, agent="", reason="", tool="", conditions=conditions)
    validator = validator_for(conditions)
    for order in (DOCS, DOCS[::-1]):
        matches = version_matcher(version)
        for args in order:
            request = make_tool_approval(args=args) if isinstance(args, dict) else None
            if request is None:
                request = make_interrupt(
                    value={"tool_calls": [{"id": "c", "name": "t", "arguments": args}]}
                )
            expected = all(validator.is_valid(doc) for doc in documents(request))
            assert matches(request) is expected, (arguments, args)
