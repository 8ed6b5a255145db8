"""Rules are versioned and audited: an edit writes a new version and keeps the old one,
each change is an audit event with its diff, and whoever wrote a version cannot be the
one who switches it on."""

from __future__ import annotations

import pytest

from portal.audit.chains import verify_chain
from portal.models import AuditEvent, ImmutableRecordError, Rule, RuleSimulation, RuleVersion, chain
from portal.reviews.rule_decisions import rules_apply
from portal.reviews.rules import RuleRefused, rule_activate, rule_switch_off, rule_write
from tests.factories import make_interrupt
from tests.reviews.rulebook import rule_manager, switch_on, write_version

pytestmark = pytest.mark.django_db


def test_an_edit_writes_a_new_version_and_keeps_the_old_one():
    first = write_version("refunds", conditions={}, cap_per_hour=5)

    second = write_version("", rule=first.rule, cap_per_hour=10)

    assert [v.number for v in first.rule.versions.all()] == [2, 1]
    first.refresh_from_db()
    assert (first.cap_per_hour, second.cap_per_hour) == (5, 10)
    assert first.hash != second.hash and first.hash == first.content_hash()


def test_a_version_cannot_be_changed_or_deleted():
    version = write_version("refunds")
    version.cap_per_hour = 99

    with pytest.raises(ImmutableRecordError):
        version.save()
    with pytest.raises(ImmutableRecordError):
        version.delete()


def test_each_edit_is_an_audit_event_with_its_diff():
    first = write_version("refunds", cap_per_hour=5)
    write_version("", rule=first.rule, cap_per_hour=10, action="refuse", refusal_reason="No.")

    events = AuditEvent.objects.filter(action="rule.write").order_by("id")
    assert [e.detail["version"] for e in events] == [1, 2]
    assert events[1].detail["diff"] == {
        "action": ["approve", "refuse"],
        "refusal_reason": ["", "No."],
        "cap_per_hour": [5, 10],
    }
    assert events[1].actor_name == "rule-writer"
    assert verify_chain(AuditEvent.objects.all(), chain=chain.EVENTS).ok


def test_the_writer_of_a_version_cannot_activate_it():
    version = write_version("refunds")
    RuleSimulation.objects.create(version=version, run_by=version.written_by, days=7, result={})

    with pytest.raises(RuleRefused) as refused:
        rule_activate(version, by=version.written_by)

    assert "another person who may manage rules must activate it" in refused.value.message
    assert Rule.objects.get(pk=version.rule_id).enabled is False


def test_a_version_that_was_never_simulated_cannot_be_activated():
    version = write_version("refunds")

    with pytest.raises(RuleRefused) as refused:
        rule_activate(version, by=rule_manager("second"))

    assert "has not been simulated" in refused.value.message


def test_activation_and_switching_off_are_audited_and_stamp_who_activated():
    version = write_version("refunds")
    rule = switch_on(version)
    version.refresh_from_db()

    assert version.activated_by.username == "rule-activator"
    rule_switch_off(rule, by=version.written_by)

    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["rule.write", "rule.activate", "rule.switch_off"]


def test_only_holders_of_manage_rules_may_change_rules(roles, reviewer):
    with pytest.raises(RuleRefused) as refused:
        rule_write(by=reviewer, name="mine", action="approve")

    assert "manage_rules" in refused.value.message
    assert not RuleVersion.objects.exists()


def test_a_new_version_decides_only_once_it_is_activated(roles):
    first = write_version("refunds", action="approve")
    switch_on(first)
    second = write_version("", rule=first.rule, action="refuse", refusal_reason="Stop.")

    rules_apply(make_interrupt().pk)  # still the first version's rule
    switch_on(second)
    rules_apply(make_interrupt().pk)

    decided = [h.version for h in first.rule.hits.order_by("id")]
    assert decided == [first, second]
