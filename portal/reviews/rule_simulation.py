"""Simulating a rule version: what it would have done to the decisions of the last N days.

Each decision people (or the portal) recorded in the window, apart from rules' own, is
matched with ``version_matches``' own rule (``version_matcher``) against its request as it
was asked. A matched request counts under the version's action; an approval or a refusal is
then compared with what was decided (``AGREES``); a route is not (people still decide). The
figures and the newest disagreements are kept in a ``RuleSimulation``. Only the needed
columns are read, streamed, after a pre-filter on agent, reason and tool in SQL.
"""

from __future__ import annotations

import heapq
import time
from datetime import timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from portal.accounts import roles
from portal.models import Decision, RuleSimulation, RuleVersion, audit_record
from portal.reviews.rules import RuleRefused, version_matcher

__all__ = ["AGREES", "COMPARED", "MAX_DAYS", "rule_simulate"]

Outcome, Action = Decision.Outcome, RuleVersion.Action

# What a person's decision must have been for the rule's to agree. An edit went ahead with
# arguments a person changed: the rule would have approved what was asked, so an edit
# disagrees with an approval (and with a refusal, since it went ahead).
AGREES = {
    Action.APPROVE: {Outcome.APPROVED},
    Action.REFUSE: {Outcome.REJECTED, Outcome.IGNORED, Outcome.RESPONDED},
}
# Outcomes somebody chose; expiries and cancellations were nobody's answer to compare with.
COMPARED = {Outcome.APPROVED, Outcome.EDITED, Outcome.REJECTED, Outcome.IGNORED, Outcome.RESPONDED}
MAX_DAYS = 366
KEPT = 200  # disagreements kept with a simulation, the newest first
CHUNK = 5000


class _Seen(NamedTuple):
    """A decided request as matching reads it (``rules.Requested``), without a model."""

    agent: str
    reason: str
    tool: str
    value: Any
    message: str


def _candidates(version: RuleVersion, since: Any) -> Any:
    """The decisions in the window whose request might match: a superset of the matches,
    narrowed in SQL by what the version names."""
    decisions = Decision.objects.filter(created_at__gte=since).exclude(door=Decision.Door.RULE)
    if version.agent:
        decisions = decisions.filter(interrupt__agent=version.agent)
    if version.reason:
        decisions = decisions.filter(interrupt__reason=version.reason)
    if version.tool:
        calls = (
            Q(interrupt__value__tool_calls__contains=[{"name": version.tool}])
            if connection.vendor == "postgresql"
            else Q(interrupt__value__has_key="tool_calls")  # SQLite has no JSON containment
        )
        decisions = decisions.filter(Q(interrupt__tool=version.tool) | calls)
    return decisions


def rule_simulate(version: RuleVersion, *, by: Any, days: int) -> RuleSimulation:
    """Run ``version`` against the decisions of the last ``days`` days and keep the figures
    (``RuleSimulation.result``, read by the simulation page), with who ran it; audited."""
    if not roles.can_manage_rules(by):
        raise RuleRefused("you may not simulate rules: that needs the manage_rules permission")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise RuleRefused(f"days must be a whole number from 1 to {MAX_DAYS}", field="days")
    began = time.perf_counter()
    since = timezone.now() - timedelta(days=days)
    matches = version_matcher(version)
    agrees = AGREES.get(Action(version.action))
    looked_at = Decision.objects.filter(created_at__gte=since).exclude(door=Decision.Door.RULE)
    matched = agreed = disagreed = 0
    outcomes: dict[str, int] = {}
    newest: list[tuple[int, str, str]] = []  # a heap of the newest disagreements
    rows = _candidates(version, since).values_list(
        "id",
        "outcome",
        "interrupt_id",
        "interrupt__agent",
        "interrupt__reason",
        "interrupt__tool",
        "interrupt__value",
        "interrupt__message",
    )
    for pk, outcome, interrupt_id, agent, reason, tool, value, message in rows.iterator(
        chunk_size=CHUNK
    ):
        if not matches(_Seen(agent, reason, tool, value, message)):
            continue
        matched += 1
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if agrees is None or outcome not in COMPARED:
            continue
        if outcome in agrees:
            agreed += 1
            continue
        disagreed += 1
        entry = (pk, interrupt_id, outcome)
        if len(newest) < KEPT:
            heapq.heappush(newest, entry)
        else:
            heapq.heappushpop(newest, entry)
    compared = agreed + disagreed
    result = {
        "since": since.isoformat(),
        "decisions": looked_at.count(),
        "matched": matched,
        "by_action": {a.value: (matched if a == version.action else 0) for a in Action},
        "outcomes": dict(sorted(outcomes.items())),
        "compared": compared,
        "agreed": agreed,
        "disagreed": disagreed,
        "agreement": round(agreed / compared, 4) if compared else None,
        "disagreements": [
            {"decision": pk, "request": interrupt_id, "outcome": outcome}
            for pk, interrupt_id, outcome in sorted(newest, reverse=True)
        ],
    }
    with transaction.atomic():
        simulation = RuleSimulation.objects.create(
            version=version,
            run_by=by,
            days=days,
            result=result,
            seconds=time.perf_counter() - began,
        )
        audit_record(
            action="rule.simulate",
            actor=by,
            target=("rule", version.rule_id),
            detail={
                "version": version.number,
                "version_id": version.pk,
                "hash": version.hash,
                "simulation": simulation.pk,
                "days": days,
                "matched": matched,
                "agreed": agreed,
                "disagreed": disagreed,
            },
        )
    return simulation
