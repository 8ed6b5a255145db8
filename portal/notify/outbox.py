"""Notifications that are never lost: the outbox, its fan-out and its deliveries.

An event is a ``Notification`` row written by ``outbox_enqueue`` in the same transaction
as its cause (a new request, a decision, a failed run...): rolled back together, committed
together. Nothing is sent from inside a request or a run. The notifier
(``manage.py run_notifier``, or the demo's embedded thread) then:

1. fans each new notification out (``outbox_dispatch``) into one ``Delivery`` per matching
   ``Subscription`` (or the one ``Target`` its writer named), in one transaction with
   marking it dispatched; rows are claimed ``FOR UPDATE SKIP LOCKED`` so several notifiers
   share the work and none fans a notification out twice;
2. sends due deliveries (``outbox_deliver``). Claiming one pushes its ``next_attempt_at``
   past the send's timeout and counts the attempt, and commits, before anything is sent:
   a notifier killed mid-send leaves it due again, so a crash delays a notification but
   never loses it. Just before its send the claim is renewed, unless another notifier has
   claimed the delivery since (then that one sends it). A send, connecting and reading
   the answer included, gets ``PORTAL_NOTIFY_TIMEOUT`` in all. A failed try is retried
   with exponential backoff (``PORTAL_NOTIFY_BACKOFF_SECONDS`` doubling up to
   ``..._MAX_SECONDS``) and given up after ``PORTAL_NOTIFY_MAX_ATTEMPTS``; every try is a
   ``DeliveryAttempt``.

Delivery is at least once: a send that reached the receiver but whose answer was lost is
sent again, with the same ``Portal-Event-Id``. A receiver that remembers the ids it has
handled therefore sees each event exactly once.

Channels: email through Django's email backend; webhooks as JSON signed with
``agents.signing.sign`` (``Portal-Signature``); Slack-style incoming webhooks
(``{"text": ...}``, unsigned: the URL is the secret).
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.utils import timezone

from agents import signing
from portal.models import (
    AuditEvent,
    Decision,
    Delivery,
    DeliveryAttempt,
    Interrupt,
    Notification,
    Run,
    Subscription,
    audit_record,
    waiting,
)

log = logging.getLogger(__name__)

__all__ = [
    "EVENT_ID_HEADER",
    "KINDS",
    "Target",
    "TargetError",
    "outbox_deliver",
    "outbox_enqueue",
    "subscription_delete",
    "subscription_save",
]

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
KINDS = (
    REQUEST_CREATED,
    REQUEST_DECIDED,
    REQUEST_EXPIRED,
    REQUEST_WITHDRAWN,
    REQUEST_REMINDER,
    REQUEST_ASSIGNED,
    REQUEST_ESCALATED,
    RUN_FAILED,
)
# Events about people being asked: those also go to the assigned users' addresses.
TO_ASSIGNEES = (REQUEST_ASSIGNED, REQUEST_REMINDER, REQUEST_ESCALATED)

Channel = Subscription.Channel


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
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"{target!r} is not an http(s) URL")
    if channel == Channel.WEBHOOK and not secret:
        # Fail closed: a receiver could not tell our webhook from anyone else's.
        raise TargetError("a webhook needs a secret to sign its requests with")


def addresses(target: str) -> list[str]:
    return [a.strip() for a in target.split(",") if a.strip()]


# A notifier waits on this; it is set by this process's commits, and on PostgreSQL by any
# process's (the notifier listens for ``waiting.OUTBOX_KEY``).
wake_event = threading.Event()


def wake_on_commit() -> None:
    """Wake the notifiers once the current transaction commits: the in-process one at once
    and, on PostgreSQL, those of other processes by NOTIFY (a rollback wakes nobody)."""
    waiting.changed(waiting.OUTBOX_KEY)
    transaction.on_commit(wake_event.set)


def outbox_enqueue(
    *,
    kind: str,
    payload: dict[str, Any] | None = None,
    agent: str = "",
    reason: str = "",
    interrupt: Interrupt | None = None,
    thread_id: Any = None,
    to: Target | None = None,
) -> Notification:
    """Record an event to announce, in the caller's transaction (or one of its own).

    Without ``to`` it goes to every active subscription that matches its kind, agent,
    reason and the groups its request is routed to; with ``to``, to that one target only
    (a webhook, a Slack URL or email addresses; ``TargetError`` when it cannot be used).
    The notifier sends it once this commits; ``Notification.id`` is the event id the
    receiver sees in ``Portal-Event-Id``.
    """
    if to is not None:
        to.check()
    if interrupt is not None:
        agent, reason = agent or interrupt.agent, reason or interrupt.reason
        thread_id = thread_id or interrupt.thread_id
    now = timezone.now()
    # No savepoint inside a caller's transaction (a round trip each way): nothing recovers
    # from a failure here, which fails the caller's transaction as a whole.
    with transaction.atomic(savepoint=False):
        note = Notification.objects.create(
            kind=kind,
            payload=payload or {},
            agent=agent,
            reason=reason,
            interrupt=interrupt,
            thread_id=thread_id,
            created_at=now,
            # A named target needs no fan-out: its one delivery is written here.
            dispatched_at=now if to is not None else None,
        )
        if to is not None:
            Delivery.objects.create(
                notification=note, channel=to.channel, target=to.target, secret=to.secret
            )
        wake_on_commit()
    return note


# --- subscriptions (the admin's writes) -------------------------------------------------


def check_subscription(
    *, channel: str, target: str, secret: str, events: Any, has_group: bool
) -> None:
    """Raise ``TargetError`` naming what makes a subscription undeliverable."""
    if channel != Channel.EMAIL or target:
        check_target(channel, target, secret)
    elif not has_group:
        raise TargetError("an email subscription needs addresses, or a group to mail")
    if not isinstance(events, list) or any(k not in KINDS for k in events):
        raise TargetError(f"events must be a list of any of {', '.join(KINDS)}; got {events!r}")


def subscription_save(*, subscription: Subscription, user: Any) -> Subscription:
    """Create or change a subscription (the admin's form calls this). Raises
    ``TargetError`` when it could not be delivered to."""
    check_subscription(
        channel=subscription.channel,
        target=subscription.target,
        secret=subscription.secret,
        events=subscription.events,
        has_group=subscription.group_id is not None,
    )
    with transaction.atomic():
        created = subscription.pk is None
        subscription.save()
        audit_record(
            action=(
                AuditEvent.Action.SUBSCRIPTION_CREATE
                if created
                else AuditEvent.Action.SUBSCRIPTION_CHANGE
            ),
            actor=user,
            target=subscription,
            detail=_subscription_detail(subscription),
        )
    return subscription


def _subscription_detail(subscription: Subscription) -> dict[str, Any]:
    # Never the secret, nor a Slack URL (which is one).
    shown = subscription.target if subscription.channel != Channel.SLACK else ""
    return {
        "name": subscription.name,
        "channel": subscription.channel,
        "target": shown[:200],
        "events": subscription.events,
        "agent": subscription.agent,
        "reason": subscription.reason,
        "group": subscription.group.name if subscription.group is not None else "",
        "active": subscription.active,
    }


def subscription_delete(*, subscription: Subscription, user: Any) -> None:
    """Remove a subscription; deliveries already written keep going out."""
    with transaction.atomic():
        detail = _subscription_detail(subscription)
        target = ("subscription", subscription.pk)
        subscription.delete()
        audit_record(
            action=AuditEvent.Action.SUBSCRIPTION_DELETE, actor=user, target=target, detail=detail
        )


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
        "created_at": _iso(interrupt.created_at),
        "expires_at": _iso(interrupt.expires_at),
    }
    if settings.PORTAL_BASE_URL:
        data["url"] = f"{settings.PORTAL_BASE_URL}/interrupts/{interrupt.pk}/"
    return data


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def notify_decision(decision: Decision, interrupt: Interrupt) -> Notification:
    """The event for a request that left the queue with ``decision`` (decided, expired
    or withdrawn); written by the decision services in their transaction."""
    if decision.outcome == Decision.Outcome.EXPIRED:
        kind = REQUEST_EXPIRED
    elif decision.is_withdrawal(interrupt.thread):
        kind = REQUEST_WITHDRAWN
    else:
        kind = REQUEST_DECIDED
    reviewer = decision.reviewer.get_username() if decision.reviewer is not None else None
    payload = {
        "request": request_payload(interrupt),
        "decision": {
            "outcome": decision.outcome,
            "reviewer": reviewer,
            "note": decision.note,
            "at": _iso(decision.created_at),
        },
    }
    return outbox_enqueue(kind=kind, payload=payload, interrupt=interrupt)


def notify_run_failed(run: Run, *, agent: str) -> Notification:
    """The event for a run that failed; written by the worker with the failure."""
    payload = {
        "run": {"id": str(run.pk), "kind": run.kind, "error": run.error},
        "thread": {"id": str(run.thread_id), "agent": agent},
    }
    return outbox_enqueue(kind=RUN_FAILED, payload=payload, agent=agent, thread_id=run.thread_id)


def summary(note: Notification) -> str:
    """One line a person reads: the email subject, the Slack text's first line."""
    return " ".join(_summary(note).split())[:300]  # a header: one line, no newline


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
    decision = note.payload.get("decision") or {}
    titles = {
        REQUEST_CREATED: f"New request from {who}",
        REQUEST_DECIDED: f"Request from {who} {decision.get('outcome', 'decided')}"
        + (f" by {decision['reviewer']}" if decision.get("reviewer") else ""),
        REQUEST_EXPIRED: f"Request from {who} expired without a decision",
        REQUEST_WITHDRAWN: f"Request from {who} withdrawn",
        REQUEST_REMINDER: f"Reminder: a request from {who} expires at {request.get('expires_at')}",
        REQUEST_ASSIGNED: f"Request from {who} assigned to you",
        REQUEST_ESCALATED: f"Request from {who} escalated",
    }
    title = titles.get(note.kind, note.kind)
    return f"{title}: {what}" if what else title


# --- sending ---------------------------------------------------------------------------


def _later(seconds: float) -> Any:
    # Due times are set and compared on the database's clock, as the worker's leases are.
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def _lease_seconds() -> float:
    # A send is over within the timeout (see send); the margin covers the bookkeeping.
    return settings.PORTAL_NOTIFY_TIMEOUT * 2 + 1


def backoff(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th failed try."""
    base = settings.PORTAL_NOTIFY_BACKOFF_SECONDS
    return float(min(base * 2 ** max(attempts - 1, 0), settings.PORTAL_NOTIFY_BACKOFF_MAX_SECONDS))


def _claim(batch: int) -> list[Delivery]:
    with transaction.atomic():
        # SKIP LOCKED: concurrent notifiers claim different deliveries.
        due = list(
            Delivery.objects.select_for_update(skip_locked=True)
            .filter(status=Delivery.Status.PENDING, next_attempt_at__lte=Now())
            .select_related("notification")
            .order_by("next_attempt_at")[:batch]
        )
        for delivery in due:
            # The claim is the lease: due again only once a send would have timed out.
            # The attempt is counted now, so a delivery whose sends keep killing the
            # notifier still runs out of attempts.
            Delivery.objects.filter(pk=delivery.pk).update(
                attempts=F("attempts") + 1, next_attempt_at=_later(_lease_seconds())
            )
            delivery.attempts += 1
    return due


class SendError(Exception):
    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def _still_mine(delivery: Delivery) -> bool:
    # The batch's claim covers one send, and the sends before this one may have used it
    # up: another notifier may have claimed it again since (counting another attempt),
    # and then it is that one's to send. Otherwise the lease is renewed for this send, in
    # one statement, so that a claim cannot slip in between the check and the send.
    return bool(
        Delivery.objects.filter(
            pk=delivery.pk, status=Delivery.Status.PENDING, attempts=delivery.attempts
        ).update(next_attempt_at=_later(_lease_seconds()))
    )


def outbox_deliver(*, batch: int = 20) -> int:
    """Send the deliveries that are due; returns how many it tried."""
    due = _claim(batch)
    for delivery in due:
        if _still_mine(delivery):
            _attempt(delivery)
    return len(due)


def _attempt(delivery: Delivery) -> None:
    started = time.monotonic()
    status_code: int | None = None
    error = ""
    try:
        status_code = send(delivery)
    except SendError as exc:
        error, status_code = str(exc), exc.status_code
    except Exception as exc:  # a backend's own failure: logged on the delivery, retried
        error = f"{type(exc).__name__}: {exc}"
    took = int((time.monotonic() - started) * 1000)
    ok = not error
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=delivery.attempts,
            ok=ok,
            status_code=status_code,
            error=error[:2000],
            duration_ms=took,
        )
        # Only while the claim is still ours (same attempt count): a send that outlived
        # its lease may have been claimed and retried by another notifier meanwhile.
        mine = Delivery.objects.filter(
            pk=delivery.pk, status=Delivery.Status.PENDING, attempts=delivery.attempts
        )
        if ok:
            mine.update(status=Delivery.Status.SENT, sent_at=timezone.now(), last_error="")
        elif delivery.attempts >= settings.PORTAL_NOTIFY_MAX_ATTEMPTS:
            mine.update(
                status=Delivery.Status.FAILED,
                last_error=f"gave up after {delivery.attempts} attempts "
                f"(PORTAL_NOTIFY_MAX_ATTEMPTS): {error}"[:2000],
            )
        else:
            mine.update(last_error=error[:2000], next_attempt_at=_later(backoff(delivery.attempts)))
    if not ok:
        log.warning(
            "delivery %s (%s to %s), attempt %d failed: %s",
            delivery.pk,
            delivery.channel,
            delivery.target,
            delivery.attempts,
            error,
        )


def envelope(note: Notification) -> dict[str, Any]:
    """The JSON body of a webhook: the event's id, kind, time and data."""
    return {
        "id": str(note.pk),
        "type": note.kind,
        "created_at": _iso(note.created_at),
        "data": note.payload,
    }


class _Deadline:
    """When a send must be over by. A socket timeout bounds each read alone, so a receiver
    that drips its answer a byte at a time would hold the notifier as long as it liked."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left

    def passed(self) -> bool:
        return time.monotonic() >= self.at


class _DeadlineReader(io.RawIOBase):
    # What http.client reads the answer through: each read waits only for the time left.
    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.sock.settimeout(self.deadline.left())
        return self.sock.recv_into(buffer)


class _DeadlineSocket:
    # HTTPResponse only calls makefile() on the socket it is given.
    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock = sock
        self.deadline = deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _post(url: str, body: bytes, headers: dict[str, str], deadline: _Deadline) -> tuple[int, str]:
    """POST ``body`` to ``url`` and return the answer's status and reason, all of it
    (connecting, the TLS handshake, sending, reading the answer) within ``deadline``.
    A redirect is an answer like any other: it would send the signed body somewhere the
    target does not name."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sock = socket.create_connection((host, port), timeout=deadline.left())
    try:
        if https:
            sock.settimeout(deadline.left())  # the handshake, as a whole
            sock = _tls().wrap_socket(sock, server_hostname=host)
        conn = (http.client.HTTPSConnection if https else http.client.HTTPConnection)(host, port)
        conn.sock = sock  # connected above, within the deadline
        sock.settimeout(deadline.left())  # the request is one send, bounded as a whole
        conn.request("POST", path, body, headers | {"Connection": "close"})
        answer = http.client.HTTPResponse(
            cast(socket.socket, _DeadlineSocket(sock, deadline)), method="POST"
        )
        answer.begin()
        return answer.status, answer.reason
    finally:
        sock.close()


def send(delivery: Delivery) -> int | None:
    """Send one delivery now; return the HTTP status (None for email). Raises
    ``SendError`` (or the email backend's error) when it did not arrive."""
    note = delivery.notification
    if delivery.channel == Channel.EMAIL:
        body = json.dumps(envelope(note), indent=2, sort_keys=True)
        send_mail(
            subject=summary(note),
            message=f"{summary(note)}\n\nEvent {note.pk}\n\n{body}\n",
            from_email=None,
            recipient_list=addresses(delivery.target),
        )
        return None
    if delivery.channel == Channel.SLACK:
        raw = json.dumps({"text": summary(note)}).encode()
        headers = {}
    else:
        raw = json.dumps(envelope(note), separators=(",", ":"), sort_keys=True).encode()
        headers = {signing.HEADER: signing.sign(delivery.secret, raw)}
    headers |= {
        "Content-Type": "application/json",
        "User-Agent": "reviewer-portal",
        EVENT_ID_HEADER: str(note.pk),
        EVENT_TYPE_HEADER: note.kind,
    }
    # Only http(s): check_target refused any other scheme before the delivery was written.
    deadline = _Deadline(settings.PORTAL_NOTIFY_TIMEOUT)
    try:
        status, reason = _post(delivery.target, raw, headers, deadline)
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, TimeoutError) or deadline.passed():
            raise SendError(
                f"the receiver took longer than {deadline.seconds:g} s to answer "
                "(PORTAL_NOTIFY_TIMEOUT)"
            ) from None
        if isinstance(exc, OSError):
            raise SendError(f"could not reach {delivery.target}: {exc}") from None
        raise SendError(f"the receiver's answer is not HTTP: {exc!r}") from None
    if not 200 <= status < 300:
        raise SendError(f"the receiver answered {status} {reason}", status)
    return status
