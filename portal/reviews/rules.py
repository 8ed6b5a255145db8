"""Decision rules: what a version matches, and writing, activating and switching off rules.

A version matches a request when its agent, reason and tool (each "" for any) are the
request's and every document the request gives (``documents``: one per tool call, or one
for the request) satisfies its conditions, dates compared (``agents.schema.DATE_BOUNDS``).
Rules that decide: ``rule_decisions``. How a rule reads: docs/rules.md.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from django.db import transaction
from django.utils import timezone

from agents.schema import DATE_BOUNDS, SchemaRefused, schema_problem, validator_for, when_of
from portal.accounts import roles
from portal.errors import Refused
from portal.models import (
    MAX_AUDIT_DETAIL_CHARS,
    Rule,
    RuleSimulation,
    RuleVersion,
    audit_record,
    tool_calls_in,
)
from portal.models.chain import canonical

__all__ = [
    "RuleRefused",
    "documents",
    "rule_activate",
    "rule_switch_off",
    "rule_write",
    "version_diff",
    "version_matcher",
    "version_matches",
]

# What an edit may set, and what each field is called in a refusal.
EDITABLE = (
    "agent",
    "reason",
    "tool",
    "conditions",
    "action",
    "refusal_reason",
    "route_group",
    "route_approvals",
    "names_risk",
    "cap_per_hour",
    "cap_amount_field",
    "cap_amount_per_day",
)


class RuleRefused(Refused):
    """A rule change was refused; ``field`` names what was wrong ("" for the whole)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.message, self.field = message, field


class Requested(Protocol):
    """What matching reads of a request: an ``Interrupt``, or a row read for a simulation."""

    @property
    def agent(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def message(self) -> str: ...


def documents(interrupt: Requested) -> list[dict[str, Any]]:
    """What a version's conditions are checked against: one document per tool call the
    request asks about, or one for the request; each names the agent, reason, tool, the
    call's arguments (``{}`` without one), the whole payload and the message."""
    base = {
        "agent": interrupt.agent,
        "reason": interrupt.reason,
        "payload": interrupt.value,
        "message": interrupt.message,
    }
    calls = tool_calls_in(interrupt.value)
    if not calls:
        return [base | {"tool": interrupt.tool, "arguments": {}}]
    return [
        base | {"tool": call.name, "arguments": call.args if isinstance(call.args, dict) else {}}
        for call in calls
    ]


def version_matches(version: RuleVersion, interrupt: Requested) -> bool:
    """Whether ``version`` matches ``interrupt`` (see the module docstring). A version whose
    conditions can no longer be compiled matches nothing: people decide."""
    return version_matcher(version)(interrupt)


# Keywords under which an object's validity depends only on the keys its ``properties``
# and ``required`` name (the rest look at strings and numbers only).
_LOCAL = frozenset(
    {"properties", "required", "type", "title", "description", "$comment", "default"}
    | {"examples", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    | {"minLength", "maxLength", "pattern", "format"}
)
_REMEMBERED, _KEY_CHARS = 100_000, 500  # verdicts a matcher keeps, and of what size


def _view(schema: Any) -> Callable[[Any], Any] | None:
    """A function giving the part of a value that ``schema`` can see (None: all of it).
    Where a schema holds only ``_LOCAL`` keywords, an object's keys it does not name
    cannot change the verdict, so they are left out."""
    if not isinstance(schema, dict) or not schema.keys() <= _LOCAL:
        return None
    names, required = schema.get("properties", {}), schema.get("required", [])
    if not isinstance(names, dict) or not isinstance(required, list):
        return None
    inner = {key: _view(names.get(key, True)) for key in dict.fromkeys([*names, *required])}

    def view(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return tuple(
            (key, value[key] if part is None else part(value[key]))
            for key, part in inner.items()
            if key in value
        )

    return view


def version_matcher(version: RuleVersion) -> Callable[[Requested], bool]:
    """``version_matches`` for many requests: the conditions are compiled once, and the
    verdict on what they can see of a document is remembered (amounts and states repeat)."""
    validator: Any = None
    if version.conditions:
        try:
            validator = validator_for(version.conditions, dates=True)
        except SchemaRefused:
            return lambda interrupt: False
    agent, reason, tool = version.agent, version.reason, version.tool
    view = _view(version.conditions)
    verdicts: dict[str, bool] = {}

    def satisfies(doc: dict[str, Any]) -> bool:
        if view is None:
            return bool(validator.is_valid(doc))
        key = repr(view(doc))  # repr tells 1, 1.0 and True apart, as the validator does
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = bool(validator.is_valid(doc))
            if len(verdicts) < _REMEMBERED and len(key) <= _KEY_CHARS:
                verdicts[key] = verdict
        return verdict

    def matches(interrupt: Requested) -> bool:
        if agent and agent != interrupt.agent:
            return False
        if reason and reason != interrupt.reason:
            return False
        docs = documents(interrupt)
        if tool and any(doc["tool"] != tool for doc in docs):
            return False
        return validator is None or all(satisfies(doc) for doc in docs)

    return matches


def _checked_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as a version stores them, or ``RuleRefused`` naming the first wrong one."""
    unknown = sorted(set(fields) - set(EDITABLE))
    if unknown:
        raise RuleRefused(f"a rule has no field {unknown[0]!r}", field=unknown[0])
    out = {name: fields.get(name) for name in EDITABLE}
    for name in ("agent", "reason", "tool", "refusal_reason", "route_group", "cap_amount_field"):
        out[name] = str(out[name] or "").strip()
    out["conditions"] = out["conditions"] or {}
    problem = schema_problem(out["conditions"]) or _date_bounds_problem(out["conditions"])
    if problem is not None:
        raise RuleRefused(
            f"the conditions are not a usable JSON Schema: {problem}", field="conditions"
        )
    action = out["action"]
    if action not in RuleVersion.Action.values:
        choices = ", ".join(RuleVersion.Action.values)
        raise RuleRefused(f"the action must be one of {choices}, not {action!r}", field="action")
    if action == RuleVersion.Action.REFUSE and not out["refusal_reason"]:
        raise RuleRefused(
            "a rule that refuses must say why: the agent and support read the reason",
            field="refusal_reason",
        )
    if action == RuleVersion.Action.ROUTE and not (out["route_group"] or out["route_approvals"]):
        raise RuleRefused(
            "a rule that routes must name a group, a number of approvals, or both",
            field="route_group",
        )
    names_risk = out["names_risk"] or []
    if not isinstance(names_risk, list) or not all(isinstance(n, str) and n for n in names_risk):
        raise RuleRefused("the named risks must be a list of tool names", field="names_risk")
    out["names_risk"] = sorted(set(names_risk))
    for name in ("cap_per_hour", "route_approvals"):
        value = out[name]
        if value in (None, ""):
            out[name] = None
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RuleRefused(f"{name} must be a whole number of at least 1", field=name)
    amount = out["cap_amount_per_day"]
    if amount in (None, ""):
        out["cap_amount_per_day"] = None
    else:
        try:
            cap = Decimal(str(amount)).quantize(Decimal("0.01"))
        except (InvalidOperation, ValueError):
            raise RuleRefused(
                f"cap_amount_per_day must be an amount, not {amount!r}", field="cap_amount_per_day"
            ) from None
        out["cap_amount_per_day"] = cap
        if not cap.is_finite() or cap <= 0 or cap >= 10**12:
            raise RuleRefused("cap_amount_per_day must be above 0", field="cap_amount_per_day")
        if not str(out["cap_amount_field"]).startswith("/"):
            raise RuleRefused(
                "a daily amount cap needs the amount's field, as a JSON pointer "
                "(for example /arguments/amount)",
                field="cap_amount_field",
            )
    return out


def _date_bounds_problem(schema: Any) -> str | None:
    """A ``formatMinimum``-like bound (``DATE_BOUNDS``) that is not a date or date-time of
    its subschema's ``format``: it would match nothing, so it is refused when written."""
    stack = [("$", schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{path}[{n}]", item) for n, item in enumerate(node))
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in DATE_BOUNDS and when_of(value, node.get("format")) is None:
                return (
                    f"{path}.{key}: {value!r} is not a {node.get('format') or 'date'}; a date "
                    'bound needs "format": "date" (2026-01-31) or "date-time" beside it'
                )
            stack.append((f"{path}.{key}", value))
    return None


def version_diff(old: RuleVersion | None, new: RuleVersion) -> list[tuple[str, Any, Any]]:
    """What changed from ``old`` to ``new``: (field, before, after) for each field that
    differs, in the order a version lists them (all of them for a first version)."""
    changed = []
    for name in (*EDITABLE, "position"):
        before = getattr(old, name) if old is not None else None
        after = getattr(new, name)
        if before != after:
            changed.append((name, before, after))
    return changed


def _diff_detail(diff: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """The diff as an audit event keeps it: each field's before and after, or, when that
    would not fit the event, the changed fields' names (both versions keep the whole)."""
    plain = {
        name: [str(b) if isinstance(b, Decimal) else b, str(a) if isinstance(a, Decimal) else a]
        for name, b, a in diff
    }
    if len(canonical(plain)) <= MAX_AUDIT_DETAIL_CHARS - 500:
        return plain
    return {name: "changed (too long for the event: compare the versions)" for name in plain}


def _require(user: Any) -> None:
    if not roles.can_manage_rules(user):
        raise RuleRefused("you may not change rules: that needs the manage_rules permission")


def rule_write(
    *,
    by: Any,
    rule: Rule | None = None,
    name: str = "",
    position: int | None = None,
    **fields: Any,
) -> RuleVersion:
    """Write a new version of ``rule`` (or a new rule called ``name``) from ``fields``; the
    old version is kept and whatever is switched on stays so until a new one is activated.
    ``position``: the rule's place in the order once this version is activated (lower
    first; None keeps the rule's). Audited with the diff."""
    _require(by)
    checked = _checked_fields(fields)
    if position is not None and (
        isinstance(position, bool) or not isinstance(position, int) or position < 0
    ):
        raise RuleRefused("the position must be a whole number, 0 or more", field="position")
    with transaction.atomic():
        if rule is None:
            name = name.strip()
            if not name:
                raise RuleRefused("a new rule needs a name", field="name")
            if Rule.objects.filter(name=name).exists():
                raise RuleRefused(f"a rule called {name!r} exists already", field="name")
            rule = Rule.objects.create(
                name=name, **({} if position is None else {"position": position})
            )
        else:
            rule = Rule.objects.select_for_update().get(pk=rule.pk)
        last = rule.versions.order_by("-number").first()
        # The order changes with the version, once a second person activates it.
        version = RuleVersion.objects.create(
            rule=rule,
            number=(last.number + 1 if last else 1),
            written_by=by,
            position=rule.position if position is None else position,
            **checked,
        )
        diff = version_diff(last, version)
        audit_record(
            action="rule.write",
            actor=by,
            target=("rule", rule.pk),
            detail={
                "rule": rule.name,
                "version": version.number,
                "hash": version.hash,
                "diff": _diff_detail(diff),
            },
        )
    return version


def rule_activate(version: RuleVersion, *, by: Any) -> Rule:
    """Switch ``version``'s rule on with ``version`` deciding. Refused to its writer
    (separation of duties) and for a version that was never simulated."""
    _require(by)
    with transaction.atomic():
        rule = Rule.objects.select_for_update().get(pk=version.rule_id)
        version = RuleVersion.objects.get(pk=version.pk)
        if version.written_by_id == getattr(by, "pk", None):
            raise RuleRefused(
                f"you wrote {version}: another person who may manage rules must activate it"
            )
        if not RuleSimulation.objects.filter(version=version).exists():
            raise RuleRefused(f"{version} has not been simulated: simulate it before activating")
        if version.activated_at is None:
            version.activated_by, version.activated_at = by, timezone.now()
            version.save(update_fields=["activated_by", "activated_at"])
        previous = rule.active_version_id
        rule.active_version, rule.enabled = version, True
        rule.position = version.position  # its place in the order comes with it
        rule.save(update_fields=["active_version", "enabled", "position"])
        audit_record(
            action="rule.activate",
            actor=by,
            target=("rule", rule.pk),
            detail={
                "rule": rule.name,
                "version": version.number,
                "hash": version.hash,
                "replaced_version_id": previous,
            },
        )
    return rule


def rule_switch_off(rule: Rule, *, by: Any) -> Rule:
    """Switch ``rule`` off: from the next request on, on every process, it decides nothing."""
    _require(by)
    with transaction.atomic():
        rule = Rule.objects.select_for_update().get(pk=rule.pk)
        if rule.enabled:
            rule.enabled = False
            rule.save(update_fields=["enabled"])
            audit_record(
                action="rule.switch_off",
                actor=by,
                target=("rule", rule.pk),
                detail={"rule": rule.name, "version_id": rule.active_version_id},
            )
    return rule
