"""Decision policies, per agent and reason, from ``settings.PORTAL_POLICIES``.

More in docs/architecture.md (`models/policies.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone


class PolicyViolation(Exception):
    """The user may decide in general, but a policy forbids this decision."""


@dataclass(frozen=True)
class Policy:
    key: str  # the PORTAL_POLICIES key that matched ("" when none did)
    separation_of_duties: bool = True
    required_group: str | None = None
    expires_after: timedelta | None = None
    approvals_required: int = 1
    rejections_required: int = 1
    refusal_needs_note: bool = True

    @property
    def needs_several(self) -> bool:
        """Whether requests under this policy are decided by votes (``Approval`` rows)."""
        return self.approvals_required > 1 or self.rejections_required > 1

    assign_to: tuple[str, ...] = ()
    remind_before: timedelta | None = None
    escalate_after: timedelta | None = None
    escalate_to: str | None = None


def _policies() -> dict[str, dict[str, Any]]:
    return getattr(settings, "PORTAL_POLICIES", {}) or {}


def _keys(agent: str, reason: str) -> tuple[str, ...]:
    return (f"{agent}:{reason}", f"{agent}:*", f"*:{reason}", "*:*")


def _seconds(value: Any, key: str, name: str = "expires_after") -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=float(value))
    except (TypeError, ValueError):
        raise ValueError(
            f"PORTAL_POLICIES[{key!r}][{name!r}] must be seconds or a timedelta, got {value!r}"
        ) from None


def _count(value: Any, key: str, name: str) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"PORTAL_POLICIES[{key!r}][{name!r}] must be a whole number of reviewers, 1 or "
            f"more, got {value!r}"
        )
    return value


def _flag(value: Any, key: str, name: str = "refusal_needs_note") -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"PORTAL_POLICIES[{key!r}][{name!r}] must be true or false, got {value!r}")
    return value


def check_assignees(names: Any, where: str) -> tuple[str, ...]:
    """``names`` as a tuple of ``"user:<username>"``/``"group:<name>"`` strings; a
    ``ValueError`` saying what is wrong otherwise."""
    if names is None:
        return ()
    if isinstance(names, str) or not isinstance(names, list | tuple):
        raise ValueError(f"{where} must be a list like ['group:finance', 'user:alice']")
    for name in names:
        kind, _, rest = str(name).partition(":")
        if not isinstance(name, str) or kind not in ("user", "group") or not rest:
            raise ValueError(
                f"{where} has {name!r}; each entry is 'user:<username>' or 'group:<name>'"
            )
    return tuple(names)


def policy_for(agent: str, reason: str) -> Policy:
    """The policy for requests of ``agent`` with ``reason`` (see the module docstring)."""
    policies = _policies()
    for key in _keys(agent or "", reason or ""):
        if key in policies:
            entry = policies[key] or {}
            _check_routing(entry, key)
            return Policy(
                key=key,
                separation_of_duties=bool(entry.get("separation_of_duties", True)),
                required_group=entry.get("required_group") or None,
                expires_after=_seconds(entry.get("expires_after"), key),
                approvals_required=_count(
                    entry.get("approvals_required"), key, "approvals_required"
                ),
                rejections_required=_count(
                    entry.get("rejections_required"), key, "rejections_required"
                ),
                assign_to=check_assignees(
                    entry.get("assign_to"), f"PORTAL_POLICIES[{key!r}]['assign_to']"
                ),
                remind_before=_seconds(entry.get("remind_before"), key, "remind_before"),
                escalate_after=_seconds(entry.get("escalate_after"), key, "escalate_after"),
                escalate_to=entry.get("escalate_to") or None,
                refusal_needs_note=_flag(entry.get("refusal_needs_note", True), key),
            )
    return Policy(key="")


def policy_of(interrupt: Any) -> Policy:
    """The policy of one request: ``policy_for`` its agent and reason, needing more
    approvals when a decision rule routed it with a higher count
    (``Interrupt.approvals_required``; never fewer than the policy's)."""
    policy = policy_for(interrupt.agent, interrupt.reason)
    more = getattr(interrupt, "approvals_required", None)
    if more is not None and more > policy.approvals_required:
        return replace(policy, approvals_required=more)
    return policy


def _check_routing(entry: dict[str, Any], key: str) -> None:
    # A reminder counts back from the expiry and the escalation on from the reminder: a
    # setting without the one it counts from would silently never fire.
    where = f"PORTAL_POLICIES[{key!r}]"
    if entry.get("remind_before") is not None and entry.get("expires_after") is None:
        raise ValueError(f"{where} sets remind_before but no expires_after to count back from")
    if entry.get("escalate_after") is not None and entry.get("remind_before") is None:
        raise ValueError(
            f"{where} sets escalate_after but no remind_before: the escalation counts on "
            "from the reminder"
        )
    if (entry.get("escalate_after") is None) != (not entry.get("escalate_to")):
        raise ValueError(f"{where} needs both escalate_after and escalate_to, or neither")


def configured_keys() -> list[str]:
    """The ``PORTAL_POLICIES`` keys, as written."""
    return list(_policies())


def expiry_names_agents(reason: str) -> bool:
    """Whether a request's expiry with ``reason`` can depend on its agent: some key for
    that reason (or for any reason) names an agent rather than ``*``."""
    policies = _policies()
    for key in policies:
        agent, _, for_reason = key.partition(":")
        if agent != "*" and for_reason in (reason, "*"):
            return True
    return False


def expires_at_for(agent: str, reason: str, *, now: datetime | None = None) -> datetime | None:
    """When a request created ``now`` for ``agent``/``reason`` expires (None: never)."""
    after = policy_for(agent, reason).expires_after
    if after is None:
        return None
    return (now or timezone.now()) + after


def check_decider(*, interrupt: Any, user: Any) -> None:
    """Raise ``PolicyViolation`` when a policy forbids ``user`` deciding ``interrupt``.

    Role permission is checked by the caller; this is only what the policy adds.
    """
    policy = policy_for(interrupt.agent, interrupt.reason)
    if policy.separation_of_duties and interrupt.thread.written_into_by(user):
        raise PolicyViolation(
            "You wrote into this conversation, so someone else must decide its requests "
            "(separation of duties). Ask another reviewer."
        )
    if policy.required_group and not user.groups.filter(name=policy.required_group).exists():
        raise PolicyViolation(
            f"Requests of {interrupt.agent or 'this agent'} ({interrupt.reason}) can only be "
            f"decided by members of the {policy.required_group!r} group."
        )
