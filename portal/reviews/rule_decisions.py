"""Rules that decide: when a request arrives, the first switched-on rule whose version
matches it approves it, refuses it with the version's reason, or routes it to people.

``rules_apply`` runs after the transaction that created the request commits (the worker's
``arrived`` hook, ``external_request_raise``). Under the rule's row lock (the caps) and the
request's (one decision), it checks the rails, records a ``RuleHit`` and closes the request
through ``resolve``. A crash before that commits leaves the request to people (fail
closed). How a rule reads, its rails and caps: docs/rules.md.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from agents import inbox
from portal.errors import DecisionRefused
from portal.models import (
    Assignment,
    AuditEvent,
    Interrupt,
    Rule,
    RuleHit,
    RuleVersion,
    audit_record,
    policies,
    rows,
)
from portal.notify import broadcast, outbox
from portal.notify.assignments import request_assign
from portal.reviews import external, sql
from portal.reviews.checks import (
    Answer,
    check_decision,
    check_pending_in_checkpoint,
    latest_checkpoint_columns,
)
from portal.reviews.outcomes import outcome_and_args
from portal.reviews.resolve import resolve
from portal.reviews.rules import documents, version_matches

log = logging.getLogger(__name__)

__all__ = [
    "CAP_REACHED",
    "external_request_raise",
    "risks",
    "rule_for",
    "rules_apply",
    "rules_on_pause",
    "switched_on_rules",
]

# The audit action of a cap reached (once per window, with the operators' notification).
CAP_REACHED = "rule.cap_reached"
HOUR = timedelta(hours=1)


def switched_on_rules() -> list[Rule]:
    """The switched-on rules with their active versions, in the order they are tried
    (lowest position, then id): one statement (``sql.SWITCHED_ON_RULES``). Read from the
    database each time, so switching a rule off takes effect at once on every process."""
    with connection.cursor() as cursor:
        cursor.execute(_switched_on_rules_sql(connection.vendor))
        found = cursor.fetchall()
    split = rows.width(Rule)
    rules = []
    for values in found:
        rule = rows.loaded(Rule, values[:split])
        version = rows.loaded(RuleVersion, values[split:])
        if version.rule_id == rule.pk:
            RuleVersion.rule.field.set_cached_value(version, rule)
        Rule.active_version.field.set_cached_value(rule, version)
        rules.append(rule)
    return rules


@cache
def _switched_on_rules_sql(vendor: str) -> str:
    return sql.SWITCHED_ON_RULES.format(
        rule=rows.columns(Rule, "r"), version=rows.columns(RuleVersion, "v")
    )


def rule_for(interrupt: Interrupt, rules: list[Rule] | None = None) -> RuleVersion | None:
    """The active version of the first switched-on rule (lowest position, then id) that
    matches ``interrupt``, or None: people decide. ``rules``: what ``switched_on_rules()``
    returned, when the caller read them for several requests (``rules_on_pause``); without
    it they are read here. Either way from the database on each call, never cached, so
    switching a rule off takes effect at once on every process."""
    if rules is None:
        rules = switched_on_rules()
    for rule in rules:
        version = rule.active_version
        if version is None:
            continue
        if version.content_hash() != version.hash:
            # Changed behind the services' back (the row is written once): it decides
            # nothing until a person looks (verify_audit reports it).
            log.error("%s no longer matches its hash: skipped, people decide", version)
            continue
        if version_matches(version, interrupt):
            return version
    return None


def risks(interrupt: Interrupt) -> list[str]:
    """What a rule must name (``names_risk``) to approve ``interrupt``: every tool of a
    high-risk tool approval (reason ``tool_approval``), and the tool (or, without one, the
    reason) of a request whose payload says ``"risk": "high"``."""
    found = []
    if interrupt.reason == "tool_approval":
        found += [call.name for call in interrupt.tool_calls]
    if isinstance(interrupt.value, dict) and interrupt.value.get("risk") == "high":
        found.append(interrupt.tool or interrupt.reason)
    return sorted(set(found))


def _answer(version: RuleVersion, interrupt: Interrupt) -> Answer | None:
    """The answer a deciding version gives, checked against the request's schema like any
    person's; None when the request takes no yes or no (a question): people answer it."""
    schema = interrupt.response_schema
    if not (inbox.is_yes_no(schema) or inbox.declared(schema) is not None):
        return None
    approve = version.action == RuleVersion.Action.APPROVE
    note = "" if approve else version.refusal_reason
    value: dict[str, Any] = {"approved": approve}
    if note and schema is None:
        value["note"] = note
    try:
        return check_decision(interrupt=interrupt, value=value, note=note)
    except DecisionRefused as exc:
        log.warning("%s cannot answer request %s: %s", version, interrupt.pk, exc)
        return None


def _amount(version: RuleVersion, interrupt: Interrupt) -> Decimal | None:
    """The amount the daily cap counts: the number at ``cap_amount_field`` (a JSON pointer
    into the document the conditions saw), summed over the request's tool calls. Raises
    ``ValueError`` when a document has no number there: it cannot be counted."""
    pointer = version.cap_amount_field
    if not pointer:
        return None
    total = Decimal(0)
    for doc in documents(interrupt):
        found: Any = doc
        for part in pointer.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(found, dict) and part in found:
                found = found[part]
            elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
                found = found[int(part)]
            else:
                raise ValueError(f"no {pointer} in the request")
        if isinstance(found, bool) or not isinstance(found, int | float | str):
            raise ValueError(f"{pointer} is not a number")
        try:
            amount = Decimal(str(found))
        except InvalidOperation:
            raise ValueError(f"{pointer} is not a number: {found!r}") from None
        if not amount.is_finite():
            raise ValueError(f"{pointer} is not a number: {found!r}")
        if amount < 0:
            # The agent's data: a negative amount would lower the day's sum and reopen
            # the cap for the requests after it. People decide this one.
            raise ValueError(f"{pointer} is negative: {found!r}")
        total += amount
    return total


def _midnight(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _cap_reached(rule: Rule, version: RuleVersion, amount: Decimal | None, now: datetime) -> Any:
    """(cap, limit, since) of the first cap acting on this request would break, or None.
    Counted over the rule's hits (every version's): the hour before ``now``, and since
    midnight UTC for the amount."""
    if version.cap_per_hour is not None:
        count = RuleHit.objects.filter(rule=rule, created_at__gt=now - HOUR).count()
        if count >= version.cap_per_hour:
            return "per_hour", version.cap_per_hour, now - HOUR
    if version.cap_amount_per_day is not None and amount is not None:
        since = _midnight(now)
        spent = RuleHit.objects.filter(rule=rule, created_at__gte=since).aggregate(
            total=Sum("amount")
        )["total"] or Decimal(0)
        if spent + amount > version.cap_amount_per_day:
            return "amount_per_day", version.cap_amount_per_day, since
    return None


def _cap_notice(rule: Rule, version: RuleVersion, reached: Any, locked: Interrupt) -> None:
    """Tell the operators a cap held ``locked`` back: once per cap and window (an audit
    event and a ``rule.cap_reached`` notification), in the caller's transaction."""
    cap, limit, since = reached
    told = AuditEvent.objects.filter(
        action=CAP_REACHED,
        target_type="rule",
        target_id=str(rule.pk),
        detail__cap=cap,
        created_at__gte=since,
    ).exists()
    if told:
        return
    detail = {
        "rule": rule.name,
        "version": version.number,
        "hash": version.hash,
        "cap": cap,
        "limit": str(limit),
        "request": locked.pk,
    }
    audit_record(action=CAP_REACHED, actor=None, target=("rule", rule.pk), detail=detail)
    outbox.outbox_enqueue(
        kind=outbox.RULE_CAP_REACHED,
        payload={**detail, "request": outbox.request_payload(locked)},
        interrupt=locked,
    )


def _route(locked: Interrupt, version: RuleVersion) -> None:
    if version.route_group:
        request_assign(
            interrupt=locked, names=[f"group:{version.route_group}"], source=Assignment.Source.RULE
        )
    locked.approvals_required = version.route_approvals
    locked.routed_by = version
    locked.save(update_fields=["approvals_required", "routed_by"])
    broadcast.queue_change_on_commit(locked, news=f"routed by {version}")


def rules_apply(interrupt_id: str, rules: list[Rule] | None = None) -> RuleHit | None:
    """Let the first matching switched-on rule act on the pending request
    ``interrupt_id``: approve or refuse it (a ``Decision`` by the rule's version, through
    ``resolve``, which resumes the run) or route it. Returns the ``RuleHit``, or None when
    no rule acted (none matched, a rail or a cap held it back, it was not pending): people
    decide. ``rules``: handed to ``rule_for``. A rule switched off, or given another
    version, since they were read decides nothing: it is read again under its lock. Call
    it after the request's transaction commits."""
    interrupt = (
        Interrupt.objects.select_related("thread")
        .filter(pk=interrupt_id, status=Interrupt.Status.PENDING)
        .first()
    )
    version = rule_for(interrupt, rules) if interrupt is not None else None
    if interrupt is None or version is None:
        return None
    answer = None
    if version.action != RuleVersion.Action.ROUTE:
        if policies.policy_of(interrupt).needs_several:
            # Its policy asks several people to sign: one rule is not several people.
            log.info("%s leaves request %s to people: it needs votes", version, interrupt.pk)
            return None
        answer = _answer(version, interrupt)
        if answer is None:
            return None
        named = set(version.names_risk)
        unnamed = [name for name in risks(interrupt) if name not in named]
        if version.action == RuleVersion.Action.APPROVE and unnamed:
            log.info("%s may not approve request %s: high risk %s", version, interrupt.pk, unnamed)
            return None
    try:
        amount = _amount(version, interrupt)
    except ValueError as exc:
        log.info("%s leaves request %s to people: %s", version, interrupt.pk, exc)
        return None
    with transaction.atomic():
        # Row lock on the rule. The race: requests arriving at once, each counting the
        # rule's hits against its caps; without the lock all would count the same hits and
        # all act. With it each counts the hits committed before it. Read with the lock,
        # so a rule switched off (or another version activated) since decides nothing.
        rule = (
            Rule.objects.select_for_update()
            .filter(pk=version.rule_id, enabled=True, active_version=version)
            .first()
        )
        # Row lock on the request. The race: a reviewer (or the expiry) deciding it now;
        # whoever locks first closes it, and the other finds it no longer pending.
        locked = (
            Interrupt.objects.select_for_update(of=("self",))
            .select_related("thread")
            .annotate(**latest_checkpoint_columns())
            .filter(pk=interrupt_id)
            .first()
        )
        if rule is None or locked is None or locked.status != Interrupt.Status.PENDING:
            return None
        if RuleHit.objects.filter(interrupt=locked).exists():
            return None  # a rule acted on it already (routed it)
        try:
            check_pending_in_checkpoint(locked)
        except DecisionRefused:
            return None
        reached = _cap_reached(rule, version, amount, timezone.now())
        if reached is not None:
            _cap_notice(rule, version, reached, locked)
            return None
        hit = RuleHit.objects.create(
            rule=rule, version=version, interrupt=locked, action=version.action, amount=amount
        )
        if answer is None:
            _route(locked, version)
            return hit
        outcome, original, executed = outcome_and_args(locked, answer.value, said_no=answer.said_no)
        resolve(
            locked,
            status=Interrupt.Status.RESOLVED,
            outcome=outcome,
            value=answer.value,
            by=None,
            note=answer.note,
            original_args=original,
            executed_args=executed,
            rule_version=version,
        )
    return hit


def rules_on_pause(thread_id: Any) -> list[RuleHit]:
    """``rules_apply`` for each pending request of a thread whose run just paused (the
    worker's ``arrived`` hook). The switched-on rules are read first, once for all the
    thread's requests: with none, that one statement is all a pause costs. One request
    that fails is logged and left to people."""
    rules = switched_on_rules()
    if not rules:
        return []
    hits = []
    pending = Interrupt.objects.filter(thread_id=thread_id, status=Interrupt.Status.PENDING)
    for pk in pending.values_list("pk", flat=True):
        try:
            hit = rules_apply(pk, rules)
        except Exception:
            log.exception("rules could not act on request %s; people decide it", pk)
            continue
        if hit is not None:
            hits.append(hit)
    return hits


def external_request_raise(
    *, user: Any, spec: external.RequestSpec, token: Any = None
) -> tuple[Any, bool]:
    """``external_request_create``, then, for a request created now, ``rules_apply`` once
    it is committed: the outside agent's answer may be a rule's at once."""
    row, created = external.external_request_create(user=user, spec=spec, token=token)
    if created:
        try:
            rules_apply(row.interrupt_id)
        except Exception:
            log.exception("rules could not act on request %s; people decide it", row.interrupt_id)
        row.refresh_from_db()
    return row, created
