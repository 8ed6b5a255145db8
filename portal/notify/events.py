"""The portal's notification events: their kinds, where they may go, and what they say.

``outbox`` writes them, ``delivery`` sends them; both take the words from here (the
request payload, the one-line summary, a webhook's JSON envelope, the headers).
More in docs/architecture.md (``## notify``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from portal.models import Interrupt, Notification, Subscription, outcome_name
from portal.notify.targets import url_problem

EVENT_ID_HEADER = "Portal-Event-Id"
EVENT_TYPE_HEADER = "Portal-Event-Type"

REQUEST_CREATED = "request.created"
REQUEST_DECIDED = "request.decided"
REQUEST_EXPIRED = "request.expired"
REQUEST_WITHDRAWN = "request.withdrawn"
REQUEST_REMINDER = "request.reminder"
REQUEST_ASSIGNED = "request.assigned"
REQUEST_ESCALATED = "request.escalated"
RUN_FAILED = "run.failed"
# A decision rule's cap held requests back (once per cap and window): for operators.
RULE_CAP_REACHED = "rule.cap_reached"
CAP_WORDS = {"per_hour": "cap of decisions an hour", "amount_per_day": "cap of amount a day"}
# Not a subscription's kind: the reply to one Slack click, to that click's response_url.
SLACK_REPLY = "slack.reply"
KINDS = (
    REQUEST_CREATED,
    REQUEST_DECIDED,
    REQUEST_EXPIRED,
    REQUEST_WITHDRAWN,
    REQUEST_REMINDER,
    REQUEST_ASSIGNED,
    REQUEST_ESCALATED,
    RUN_FAILED,
    RULE_CAP_REACHED,
)
# Events about people being asked: those also go to the assigned users' addresses.
TO_ASSIGNEES = (REQUEST_ASSIGNED, REQUEST_REMINDER, REQUEST_ESCALATED)

Channel = Subscription.Channel
SLACK_CHANNEL = re.compile(r"[A-Z0-9][A-Z0-9_-]{1,79}")


class SendError(Exception):
    """A delivery that did not arrive; the message says why."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class TargetError(ValueError):
    """A delivery target that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class Target:
    """Where one notification goes, when its writer names it rather than subscriptions
    choosing (an external agent's callback URL, say)."""

    channel: str
    target: str
    secret: str = ""

    @classmethod
    def webhook(cls, url: str, *, secret: str) -> Target:
        return cls(Channel.WEBHOOK, url, secret)

    @classmethod
    def slack(cls, url: str) -> Target:
        return cls(Channel.SLACK, url)

    @classmethod
    def slack_reply(cls, response_url: str) -> Target:
        """The ``response_url`` of a Slack interaction (``portal/web/slack.py``)."""
        return cls(Channel.SLACK_RESPONSE, response_url)

    @classmethod
    def email(cls, *addresses: str) -> Target:
        return cls(Channel.EMAIL, ", ".join(addresses))

    def check(self) -> None:
        """Raise ``TargetError`` unless this target can be delivered to."""
        check_target(self.channel, self.target, self.secret)


def check_target(channel: str, target: str, secret: str) -> None:
    """Raise ``TargetError`` naming what is wrong with a delivery target."""
    if channel not in Channel.values:
        raise TargetError(f"unknown channel {channel!r}; use one of {', '.join(Channel.values)}")
    if channel == Channel.EMAIL:
        if any("@" not in a for a in addresses(target)):
            raise TargetError(f"{target!r} is not a list of email addresses")
        return
    if channel == Channel.SLACK_APP:
        if not SLACK_CHANNEL.fullmatch(target):
            raise TargetError(f"{target[:200]!r} is not a Slack channel id (such as C0123ABCD)")
        if not settings.PORTAL_SLACK_BOT_TOKEN:
            raise TargetError("a Slack channel needs the app's bot token: PORTAL_SLACK_BOT_TOKEN")
        target = settings.PORTAL_SLACK_API_URL  # where it is posted: the same rule
    if (problem := url_problem(target)) is not None:
        raise TargetError(f"{target[:200]!r}: {problem}")
    if channel == Channel.WEBHOOK and not secret:
        # Fail closed: a receiver could not tell our webhook from anyone else's.
        raise TargetError("a webhook needs a secret to sign its requests with")


def addresses(target: str) -> list[str]:
    return [a.strip() for a in target.split(",") if a.strip()]


# --- what the portal's events say ------------------------------------------------------


def request_payload(interrupt: Interrupt) -> dict[str, Any]:
    """The part of every request event that describes the request."""
    data: dict[str, Any] = {
        "id": interrupt.pk,
        "thread": str(interrupt.thread_id),
        "agent": interrupt.agent,
        "reason": interrupt.reason,
        "tool": interrupt.tool,
        "summary": interrupt.summary,
        "message": interrupt.message,
        "status": interrupt.status,
        "created_at": iso(interrupt.created_at),
        "expires_at": iso(interrupt.expires_at),
    }
    if settings.PORTAL_BASE_URL:
        data["url"] = f"{settings.PORTAL_BASE_URL}/interrupts/{interrupt.pk}/"
    return data


def iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def summary(note: Notification) -> str:
    """One line a person reads: the email subject, the Slack text's first line."""
    return " ".join(_summary(note).split())[:300]  # a header: one line, no newline


def _outcome_words(outcome: Any) -> str:
    """An outcome as every page names it, in a sentence: "approved with edited arguments"."""
    return outcome_name(outcome).lower() or "decided"


def _summary(note: Notification) -> str:
    request = note.payload.get("request") or {}
    what = (
        request.get("summary")
        or request.get("message")
        or request.get("tool")
        or request.get("reason")
        or ""
    )
    who = note.agent or "an agent"
    if note.kind == RUN_FAILED:
        error = (note.payload.get("run") or {}).get("error", "")
        return f"A run of {who} failed: {error}"
    if note.kind == RULE_CAP_REACHED:
        rule = f"{note.payload.get('rule')} v{note.payload.get('version')}"
        cap = CAP_WORDS.get(str(note.payload.get("cap")), "cap")
        return f"Rule {rule} reached its {cap} of {note.payload.get('limit')}: people decide"
    decision = note.payload.get("decision") or {}
    by = decision.get("rule_words") or decision.get("reviewer")
    titles = {
        REQUEST_CREATED: f"New request from {who}",
        REQUEST_DECIDED: f"Request from {who} {_outcome_words(decision.get('outcome'))}"
        + (f" by {by}" if by else ""),
        REQUEST_EXPIRED: f"Request from {who} expired without a decision",
        REQUEST_WITHDRAWN: f"Request from {who} withdrawn",
        REQUEST_REMINDER: f"Reminder: a request from {who} expires at {request.get('expires_at')}",
        REQUEST_ASSIGNED: f"Request from {who} assigned to you",
        REQUEST_ESCALATED: f"Request from {who} escalated",
    }
    title = titles.get(note.kind, note.kind)
    return f"{title}: {what}" if what else title


def envelope(note: Notification) -> dict[str, Any]:
    """The JSON body of a webhook: the event's id, kind, time and data."""
    return {
        "id": str(note.pk),
        "type": note.kind,
        "created_at": iso(note.created_at),
        "data": note.payload,
    }
