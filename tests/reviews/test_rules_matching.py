"""What a decision rule's version matches: agent, reason and tool, and conditions on the
document a request gives (comparisons, membership, ranges on numbers, strings and dates);
the first switched-on rule that matches is the one that decides."""

from __future__ import annotations

from typing import Any

import pytest

from agents.schema import validator_for
from portal.models import Decision, Interrupt, RuleVersion
from portal.reviews.rule_decisions import rule_for, rules_apply
from portal.reviews.rules import RuleRefused, documents, version_matches
from tests.factories import make_interrupt, make_tool_approval
from tests.reviews.rulebook import active_rule, write_version

pytestmark = pytest.mark.django_db


def _refund(amount: float = 4.99, **value: Any) -> Interrupt:
    return make_interrupt(value={"order_id": "A-1001", "amount": amount, **value})


def _payload(**props: Any) -> dict[str, Any]:
    return {"properties": {"payload": {"properties": props}}}


def _matches(conditions: dict[str, Any], interrupt: Interrupt, **fields: Any) -> bool:
    version = write_version(f"r-{RuleVersion.objects.count()}", conditions=conditions, **fields)
    return version_matches(version, interrupt)


def test_the_document_names_agent_reason_tool_payload_and_message():
    interrupt = _refund()

    (doc,) = documents(interrupt)

    assert doc == {
        "agent": "refunds",
        "reason": "tool_approval",
        "payload": {"order_id": "A-1001", "amount": 4.99},
        "message": "Approve a $42.50 refund for order A-1001?",
        "tool": "issue_refund",
        "arguments": {},
    }


def test_a_tool_approval_gives_one_document_per_call_with_its_arguments():
    interrupt = make_tool_approval(args={"amount": 20.0, "recipient": "Bob"})

    (doc,) = documents(interrupt)

    assert doc["tool"] == "transfer_funds"
    assert doc["arguments"] == {"amount": 20.0, "recipient": "Bob"}


@pytest.mark.parametrize(
    ("bound", "amount", "expected"),
    [
        ({"exclusiveMaximum": 10}, 9.99, True),
        ({"exclusiveMaximum": 10}, 10, False),
        ({"maximum": 10}, 10, True),
        ({"minimum": 1, "maximum": 10}, 0.5, False),
        ({"minimum": 1, "maximum": 10}, 5, True),
        ({"exclusiveMinimum": 100}, 100.01, True),
        ({"const": 4.99}, 4.99, True),
        ({"const": 4.99}, 5, False),
    ],
)
def test_comparisons_and_ranges_on_numbers(bound, amount, expected):
    assert _matches(_payload(amount={"type": "number", **bound}), _refund(amount)) is expected


@pytest.mark.parametrize(
    ("status", "expected"), [("delivered", True), ("shipped", True), ("lost", False)]
)
def test_membership_in_a_list_of_values(status, expected):
    conditions = _payload(status={"enum": ["delivered", "shipped"]})
    conditions["properties"]["payload"]["required"] = ["status"]

    assert _matches(conditions, _refund(status=status)) is expected


def test_a_required_field_that_is_missing_does_not_match():
    conditions = _payload(status={"enum": ["delivered"]})
    conditions["properties"]["payload"]["required"] = ["status"]

    assert _matches(conditions, _refund()) is False


@pytest.mark.parametrize(
    ("schema", "order", "expected"),
    [
        ({"pattern": "^A-[0-9]+$"}, "A-1001", True),
        ({"pattern": "^A-[0-9]+$"}, "B-1001", False),
        ({"minLength": 2, "maxLength": 6}, "A-1001", True),
        ({"minLength": 2, "maxLength": 5}, "A-1001", False),
        ({"not": {"enum": ["A-666"]}}, "A-1001", True),
        ({"not": {"enum": ["A-666"]}}, "A-666", False),
    ],
)
def test_patterns_lengths_and_exclusions_on_strings(schema, order, expected):
    assert _matches(_payload(order_id=schema), _refund(order_id=order)) is expected


@pytest.mark.parametrize(
    ("bound", "day", "expected"),
    [
        ({"formatMinimum": "2026-01-01"}, "2026-01-01", True),
        ({"formatMinimum": "2026-01-01"}, "2025-12-31", False),
        ({"formatExclusiveMinimum": "2026-01-01"}, "2026-01-01", False),
        ({"formatMaximum": "2026-03-31"}, "2026-03-31", True),
        ({"formatExclusiveMaximum": "2026-03-31"}, "2026-03-31", False),
        ({"formatMinimum": "2026-01-01", "formatMaximum": "2026-01-31"}, "2026-02-01", False),
        ({"formatMinimum": "2026-01-01"}, "not a date", False),
        ({"formatMinimum": "2026-01-01"}, "2026-01-15T10:00:00Z", False),
    ],
)
def test_ranges_on_dates(bound, day, expected):
    conditions = _payload(delivered_on={"type": "string", "format": "date", **bound})

    assert _matches(conditions, _refund(delivered_on=day)) is expected


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        ("2026-01-01T09:00:00+00:00", True),
        ("2026-01-01T09:00:00+01:00", False),  # 08:00 UTC
        ("2026-01-01T09:00:00", True),  # no offset: UTC
        ("2026-01-01", False),  # a date is not a date-time
    ],
)
def test_ranges_on_date_times_compare_instants(moment, expected):
    conditions = _payload(
        ordered_at={"type": "string", "format": "date-time", "formatMinimum": "2026-01-01T09:00Z"}
    )

    assert _matches(conditions, _refund(ordered_at=moment)) is expected


def test_date_bounds_are_only_compared_in_rules_conditions():
    # Elsewhere (an agent's response schema) they stay annotations, as the draft says.
    schema = {"type": "string", "format": "date", "formatMinimum": "2026-01-01"}

    assert validator_for(schema).is_valid("2020-01-01")
    assert not validator_for(schema, dates=True).is_valid("2020-01-01")


def test_a_date_bound_that_is_not_a_date_is_refused_when_written():
    conditions = _payload(day={"type": "string", "format": "date", "formatMinimum": "soon"})

    with pytest.raises(RuleRefused) as refused:
        write_version("bad dates", conditions=conditions)

    assert refused.value.field == "conditions"
    assert "'soon' is not a date" in refused.value.message


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"agent": "refunds"}, True),
        ({"agent": "transfers"}, False),
        ({"reason": "tool_approval"}, True),
        ({"reason": "input_required"}, False),
        ({"tool": "issue_refund"}, True),
        ({"tool": "delete_account"}, False),
        ({"agent": "refunds", "reason": "tool_approval", "tool": "issue_refund"}, True),
    ],
)
def test_agent_reason_and_tool(fields, expected):
    assert _matches({}, _refund(), **fields) is expected


def test_conditions_can_name_the_agent_reason_and_tool_too():
    conditions = {"properties": {"tool": {"enum": ["issue_refund", "refund_shipping"]}}}

    assert _matches(conditions, _refund()) is True
    assert _matches(conditions, make_tool_approval()) is False


def test_every_call_of_a_tool_approval_must_match():
    conditions = {
        "properties": {"arguments": {"properties": {"amount": {"type": "number", "maximum": 50}}}}
    }
    interrupt = make_tool_approval(args={"amount": 20.0, "recipient": "Bob"})
    calls = interrupt.value["tool_calls"]
    calls.append({**calls[0], "id": "call_2", "arguments": {"amount": 500, "recipient": "Eve"}})
    Interrupt.objects.filter(pk=interrupt.pk).update(value=interrupt.value)
    interrupt.refresh_from_db()

    assert len(documents(interrupt)) == 2
    assert _matches(conditions, interrupt) is False


def test_the_first_switched_on_rule_that_matches_wins(roles):
    interrupt = _refund(4.99)
    active_rule(
        "refuse big",
        position=1,
        action="refuse",
        refusal_reason="Too big.",
        conditions=_payload(amount={"minimum": 100}),
    )
    small = active_rule("approve small", position=2, conditions=_payload(amount={"maximum": 10}))
    active_rule("refuse refunds", position=3, action="refuse", refusal_reason="No refunds.")

    assert rule_for(interrupt) == small
    hit = rules_apply(interrupt.pk)

    assert hit is not None and hit.version == small
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.APPROVED
    assert decision.rule_version == small


def test_ties_in_position_go_to_the_older_rule(roles):
    interrupt = _refund()
    first = active_rule("first", position=5)
    active_rule("second", position=5, action="refuse", refusal_reason="No.")

    assert rule_for(interrupt) == first


def test_rules_switched_off_or_never_activated_match_nothing(roles):
    interrupt = _refund()
    write_version("draft only")  # written, never activated

    assert rule_for(interrupt) is None
    assert rules_apply(interrupt.pk) is None
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not Decision.objects.filter(interrupt=interrupt).exists()
