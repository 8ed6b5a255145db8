"""Rules decide through the one closing path: approve, refuse with the version's reason
(which reaches the agent), or route to people; the rails and caps send requests to people
instead, and a rule switched off decides nothing from the next request on."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection

from agents.examples import refunds
from portal.models import (
    Approval,
    Assignment,
    AuditEvent,
    Checkpoint,
    Decision,
    ImmutableRecordError,
    Interrupt,
    Notification,
    RuleHit,
    RuleVersion,
    Run,
    Thread,
)
from portal.reviews import rule_decisions
from portal.reviews.rule_decisions import (
    CAP_REACHED,
    risks,
    rule_for,
    rules_apply,
    rules_on_pause,
)
from portal.reviews.rules import rule_switch_off
from portal.reviews.threads import thread_start
from portal.runs.worker import Worker
from portal.web.threads import transcript
from tests.factories import (
    make_decision,
    make_interrupt,
    make_tool_approval,
    make_user,
    pause_again,
)
from tests.reviews.rulebook import active_rule, switch_on, write_version

pytestmark = pytest.mark.django_db


def _refund(amount: float = 4.99, **value: Any) -> Interrupt:
    return make_interrupt(value={"order_id": "A-1001", "amount": amount, **value})


SMALL = {"properties": {"payload": {"properties": {"amount": {"type": "number", "maximum": 10}}}}}


def test_an_approving_rule_records_a_decision_by_its_version_and_queues_the_resume(roles):
    version = active_rule("small refunds", conditions=SMALL)
    interrupt = _refund(4.99)

    hit = rules_apply(interrupt.pk)

    assert hit is not None and hit.action == "approve"
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.reviewer is None
    assert decision.door == Decision.Door.RULE
    assert (decision.rule_version, decision.rule_hash) == (version, version.hash)
    assert decision.outcome == Decision.Outcome.APPROVED
    assert decision.value == {"approved": True}
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.RESOLVED
    (run,) = Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME)
    assert run.input == {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}


def test_no_rule_matched_leaves_the_request_to_people(roles, reviewer):
    active_rule("small refunds", conditions=SMALL)
    interrupt = _refund(42.50)

    assert rules_apply(interrupt.pk) is None

    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not RuleHit.objects.exists()
    assert make_decision(interrupt=interrupt, reviewer=reviewer).reviewer == reviewer


def test_a_rule_acts_once_on_a_request(roles):
    active_rule("small refunds", conditions=SMALL)
    interrupt = _refund()

    assert rules_apply(interrupt.pk) is not None
    assert rules_apply(interrupt.pk) is None

    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).count() == 1


def test_a_request_a_person_decided_first_is_left_alone(roles, reviewer):
    active_rule("small refunds", conditions=SMALL)
    interrupt = _refund()
    make_decision(interrupt=interrupt, reviewer=reviewer, value={"approved": False})

    assert rules_apply(interrupt.pk) is None
    assert Decision.objects.get(interrupt=interrupt).reviewer == reviewer


def test_a_refusing_rule_gives_its_reason_as_the_note(roles):
    active_rule("no refunds on A", action="refuse", refusal_reason="Orders A-* are final sale.")
    interrupt = _refund()

    rules_apply(interrupt.pk)

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.REJECTED
    assert decision.note == "Orders A-* are final sale."
    assert decision.value == {"approved": False, "note": "Orders A-* are final sale."}


def test_a_refusing_rules_reason_reaches_the_agent_and_the_chat(roles, support_agent, settings):
    settings.PORTAL_POLICIES = {}
    refunds.ISSUED.clear()
    active_rule(
        "no refunds", agent="refunds", action="refuse", refusal_reason="Refunds are paused today."
    )
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )

    Worker(name="rules-test", arrived=rules_on_pause).run_forever(once=True)

    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert refunds.ISSUED == []
    steps = Checkpoint.objects.filter(thread=thread).conversation()
    (result,) = [m for m in steps if m.get("role") == "tool"]
    assert "Refunds are paused today." in result["content"]  # what the model reads
    assert Decision.objects.get(thread=thread).door == Decision.Door.RULE
    # What support reads in the chat: who declined, and why.
    (shown,) = [m for m in transcript(thread, steps) if m["role"] == "tool"]
    assert shown["content"] == (
        "Issue refund declined by rule no refunds v1: Refunds are paused today."
    )


def test_an_approving_rule_resumes_the_run_and_the_refund_is_issued_once(roles, support_agent):
    refunds.ISSUED.clear()
    active_rule("refunds", agent="refunds")
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $4.99 for order A-1001."}]},
        user=support_agent,
    )

    Worker(name="rules-test", arrived=rules_on_pause).run_forever(once=True)

    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 4.99}]
    assert Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).count() == 1


def test_a_request_that_asks_a_question_is_not_answered_by_a_rule(roles):
    active_rule("anything", action="approve")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    interrupt = pause_again(make_interrupt().thread, schema=schema, reason="input_required")

    assert rules_apply(interrupt.pk) is None
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_a_tool_approval_is_high_risk_and_needs_the_rule_to_name_its_tools(roles):
    interrupt = make_tool_approval(args={"amount": 5.0, "recipient": "Bob"})
    assert risks(interrupt) == ["transfer_funds"]
    active_rule("small transfers", agent="transfers")

    assert rules_apply(interrupt.pk) is None
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_a_rule_that_names_the_risk_approves_a_tool_approval_as_its_schema_expects(roles):
    interrupt = make_tool_approval(args={"amount": 5.0, "recipient": "Bob"})
    active_rule("small transfers", agent="transfers", names_risk=["transfer_funds"])

    assert rules_apply(interrupt.pk) is not None

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"type": "accept"}
    assert decision.outcome == Decision.Outcome.APPROVED
    call_id = interrupt.value["tool_calls"][0]["id"]
    assert decision.executed_args == {call_id: {"amount": 5.0, "recipient": "Bob"}}


def test_a_payload_marked_high_risk_needs_its_tool_named(roles):
    interrupt = _refund(risk="high")
    assert risks(interrupt) == ["issue_refund"]
    active_rule("refunds", agent="refunds", names_risk=["delete_account"])

    assert rules_apply(interrupt.pk) is None


def test_refusing_a_high_risk_request_needs_no_named_risk(roles):
    interrupt = make_tool_approval()
    active_rule("no transfers", action="refuse", refusal_reason="Transfers go through the bank.")

    rules_apply(interrupt.pk)

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.REJECTED
    assert decision.value == {"type": "ignore", "note": "Transfers go through the bank."}


def test_a_routing_rule_assigns_the_group_and_requires_more_approvals(roles, reviewer, settings):
    settings.PORTAL_POLICIES = {}
    finance = Group.objects.create(name="finance")
    reviewer.groups.add(finance)
    version = active_rule("big refunds", action="route", route_group="finance", route_approvals=2)
    interrupt = _refund(420.0)

    hit = rules_apply(interrupt.pk)

    assert hit is not None and hit.action == "route"
    interrupt.refresh_from_db()
    assert (interrupt.approvals_required, interrupt.routed_by) == (2, version)
    assert interrupt.status == Interrupt.Status.PENDING
    assignment = Assignment.objects.get(interrupt=interrupt)
    assert (assignment.group, assignment.source) == (finance, Assignment.Source.RULE)
    # Two approvals now: the first is a vote, the second decides.
    first = make_decision(interrupt=interrupt, reviewer=reviewer)
    assert isinstance(first, Approval)
    second = make_decision(interrupt=interrupt, reviewer=make_user("r2", role="reviewer"))
    assert isinstance(second, Decision) and second.rule_version is None


def test_switching_a_rule_off_takes_effect_on_the_next_request(roles):
    version = active_rule("small refunds", conditions=SMALL)
    first, second = _refund(), _refund()
    assert rules_apply(first.pk) is not None

    rule_switch_off(version.rule, by=version.written_by)

    assert rules_apply(second.pk) is None
    second.refresh_from_db()
    assert second.status == Interrupt.Status.PENDING


def test_past_the_hourly_cap_requests_go_to_people_and_operators_are_told_once(roles):
    active_rule("small refunds", conditions=SMALL, cap_per_hour=2)
    requests = [_refund() for _ in range(4)]

    hits = [rules_apply(r.pk) for r in requests]

    assert [h is not None for h in hits] == [True, True, False, False]
    (notice,) = AuditEvent.objects.filter(action=CAP_REACHED)
    assert notice.detail["cap"] == "per_hour" and notice.detail["limit"] == "2"
    assert notice.actor is None
    (told,) = Notification.objects.filter(kind="rule.cap_reached")
    assert told.payload["rule"] == "small refunds"
    assert told.payload["request"]["id"] == requests[2].pk


def test_the_daily_amount_cap_sums_the_field_since_midnight_utc(roles):
    active_rule(
        "small refunds",
        conditions=SMALL,
        cap_amount_field="/payload/amount",
        cap_amount_per_day="12.00",
    )
    amounts = [4.99, 5.00, 2.02, 0.01]

    hits = [rules_apply(_refund(a).pk) for a in amounts]

    # 4.99 + 5.00 = 9.99; + 2.02 would be 12.01, over 12; 0.01 still fits.
    assert [h is not None for h in hits] == [True, True, False, True]
    assert sorted(str(h.amount) for h in RuleHit.objects.all()) == ["0.01", "4.99", "5.00"]
    assert AuditEvent.objects.get(action=CAP_REACHED).detail["cap"] == "amount_per_day"


def test_a_negative_amount_goes_to_people_and_never_reopens_the_daily_cap(roles):
    active_rule(
        "small refunds",
        conditions=SMALL,
        cap_amount_field="/payload/amount",
        cap_amount_per_day="20.00",
    )
    negative = _refund(-1000)

    assert rules_apply(negative.pk) is None
    hits = [rules_apply(_refund(9.99).pk) for _ in range(3)]

    assert not Decision.objects.filter(interrupt=negative).exists()
    assert [h is not None for h in hits] == [True, True, False]  # 19.98, then over 20


def test_a_version_changed_behind_the_services_back_decides_nothing(roles):
    version = active_rule("small refunds", conditions=SMALL)
    with pytest.raises(ImmutableRecordError):
        RuleVersion.objects.filter(pk=version.pk).update(conditions={})
    # A raw write the ORM cannot refuse: the content no longer matches its hash.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {RuleVersion._meta.db_table} SET action = 'refuse' WHERE id = %s",
            [version.pk],
        )

    assert rules_apply(_refund(4.99).pk) is None
    with pytest.raises(CommandError, match="no longer matches its hash"):
        call_command("verify_audit", stdout=StringIO())


def test_a_new_place_in_the_order_waits_for_the_second_person(roles):
    refuse = active_rule(
        "refuse refunds", position=10, action="refuse", refusal_reason="Not today."
    )
    approve = active_rule("approve small", position=20, conditions=SMALL)
    # The writer alone moves the approving rule first: nothing changes until activated.
    moved = write_version("", rule=approve.rule, conditions=SMALL, position=0)

    assert rule_for(_refund(4.99)) == refuse
    switch_on(moved)
    assert rule_for(_refund(4.99)) == moved


def test_an_amount_the_cap_cannot_read_leaves_the_request_to_people(roles):
    active_rule("refunds", cap_amount_field="/payload/total", cap_amount_per_day="100")

    assert rules_apply(_refund().pk) is None


def test_a_person_still_decides_a_request_a_rule_refused_to_approve(roles, reviewer):
    interrupt = make_tool_approval()
    active_rule("transfers", agent="transfers")
    rules_apply(interrupt.pk)

    decision = make_decision(interrupt=interrupt, reviewer=reviewer)

    assert decision.reviewer == reviewer and decision.rule_version is None


def test_a_rule_decision_is_in_the_chain_and_verify_audit_passes(roles, reviewer):
    make_decision(interrupt=_refund(), reviewer=reviewer)
    version = active_rule("small refunds", conditions=SMALL)
    rules_apply(_refund().pk)
    make_decision(interrupt=_refund(42.0), reviewer=reviewer, value={"approved": False})

    first, by_rule, last = Decision.objects.order_by("id")
    assert by_rule.rule_version == version
    assert by_rule.prev_hash == first.hash and last.prev_hash == by_rule.hash
    out = StringIO()
    call_command("verify_audit", stdout=out)
    assert out.getvalue().startswith("ok")


def test_a_request_whose_policy_needs_several_people_is_not_decided_by_a_rule(roles, settings):
    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    active_rule("small refunds", conditions=SMALL)
    interrupt = _refund()

    assert rules_apply(interrupt.pk) is None
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_rules_that_fail_leave_the_request_to_people_and_the_worker_goes_on(
    roles, support_agent, monkeypatch
):
    active_rule("refunds", agent="refunds")

    def broken(interrupt, rules=None):
        raise RuntimeError("the rules' database went away")

    monkeypatch.setattr("portal.reviews.rule_decisions.rule_for", broken)
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $4.99 for order A-1001."}]},
        user=support_agent,
    )

    Worker(name="rules-test", arrived=rules_on_pause).run_forever(once=True)

    thread.refresh_from_db()
    assert thread.status == Thread.Status.INTERRUPTED
    assert Interrupt.objects.get(thread=thread).status == Interrupt.Status.PENDING
    assert not Decision.objects.filter(thread=thread).exists()


def test_with_no_rule_switched_on_a_pause_costs_one_statement(roles, django_assert_num_queries):
    # A rule written but never switched on, and one switched off: neither is read as on.
    write_version("not yet", conditions=SMALL)
    off = active_rule("switched off", conditions=SMALL)
    rule_switch_off(off.rule, by=off.written_by)
    interrupt = _refund()

    with django_assert_num_queries(1):  # the switched-on rules; the requests are not read
        assert rules_on_pause(interrupt.thread_id) == []

    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not RuleHit.objects.exists()


def test_the_switched_on_rules_come_in_order_with_their_versions_in_one_statement(
    roles, django_assert_num_queries
):
    late = active_rule("late", position=30, conditions=SMALL)
    first = active_rule("first", position=10, conditions=SMALL)
    tie = active_rule("tie", position=30, conditions=SMALL)  # after "late": a higher id
    write_version("not yet", conditions=SMALL)
    off = active_rule("switched off", position=0, conditions=SMALL)
    rule_switch_off(off.rule, by=off.written_by)

    with django_assert_num_queries(1):
        read = rule_decisions.switched_on_rules()
        seen = [(r.name, r.active_version, r.active_version.rule.name) for r in read]

    assert seen == [("first", first, "first"), ("late", late, "late"), ("tie", tie, "tie")]
    # Loaded as the ORM loads them: what the version's hash seals reads the same.
    assert [r.active_version.content_hash() for r in read] == [
        v.content_hash() for v in (first, late, tie)
    ]
    assert all(r.active_version.content_hash() == r.active_version.hash for r in read)


def test_on_a_pause_the_rules_are_read_once_and_decide_as_before(roles, monkeypatch):
    version = active_rule("small refunds", conditions=SMALL)
    interrupt = _refund()
    reads = []
    read = rule_decisions.switched_on_rules

    def counted():
        reads.append(1)
        return read()

    monkeypatch.setattr(rule_decisions, "switched_on_rules", counted)

    (hit,) = rules_on_pause(interrupt.thread_id)

    assert len(reads) == 1  # handed down to rules_apply and rule_for, not read again
    assert (hit.interrupt, hit.version, hit.action) == (interrupt, version, "approve")
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.RESOLVED
    assert Decision.objects.get(interrupt=interrupt).rule_version == version
