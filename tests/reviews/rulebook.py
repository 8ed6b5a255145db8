"""Decision rules for tests, written, simulated and switched on the way the app does it:
one person writes the version, another activates it after a simulation."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission

from portal.models import Rule, RuleSimulation, RuleVersion
from portal.reviews.rules import rule_activate, rule_write
from tests.factories import make_user


def rule_manager(username: str) -> Any:
    user = make_user(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_rules"))
    return user


def _people() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    writer = users.filter(username="rule-writer").first() or rule_manager("rule-writer")
    activator = users.filter(username="rule-activator").first() or rule_manager("rule-activator")
    return writer, activator


def write_version(name: str, *, rule: Rule | None = None, **fields: Any) -> RuleVersion:
    writer, _ = _people()
    fields.setdefault("action", "approve")
    return rule_write(by=writer, rule=rule, name=name if rule is None else "", **fields)


def switch_on(version: RuleVersion, *, position: int | None = None) -> Rule:
    _, activator = _people()
    RuleSimulation.objects.create(version=version, run_by=activator, days=7, result={})
    rule = rule_activate(version, by=activator)
    if position is not None:
        Rule.objects.filter(pk=rule.pk).update(position=position)
        rule.refresh_from_db()
    return rule


def active_rule(name: str, *, position: int | None = None, **fields: Any) -> RuleVersion:
    """A switched-on rule called ``name`` deciding with a version of ``fields``."""
    version = write_version(name, **fields)
    switch_on(version, position=position)
    return version
