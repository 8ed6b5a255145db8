"""Sending the outbox's deliveries: claiming those due, one try each, and the HTTP client.

A claim pushes a delivery's ``next_attempt_at`` past the send's timeout and counts the
attempt, and commits, before anything is sent: a notifier killed mid-send leaves it due
again. A failed try is retried with exponential backoff and given up after
``PORTAL_NOTIFY_MAX_ATTEMPTS``; every try is a ``DeliveryAttempt``. More in
docs/architecture.md (``## notify``).
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import logging
import socket
import ssl
import time
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
from portal.models import Delivery, DeliveryAttempt
from portal.notify import slack, targets
from portal.notify.events import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    Channel,
    SendError,
    addresses,
    envelope,
    summary,
)

log = logging.getLogger(__name__)


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


# What is read of an answer's body: enough for Slack's {"ok": false, "error": ...}.
ANSWER_BYTES = 4096


def _post(
    url: str, body: bytes, headers: dict[str, str], deadline: _Deadline, *, read: bool
) -> tuple[int, str, bytes]:
    """POST ``body`` to ``url`` and return the answer's status, reason and the start of
    its body (only with ``read``: a webhook's status is its whole answer), all of it
    (connecting, the TLS handshake, sending, reading the answer) within ``deadline``.
    A redirect is an answer like any other: it would send the signed body somewhere the
    target does not name."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # The name is looked up, judged and connected to by address, all within the deadline.
    sock = targets.open_checked(host, port, deadline.left)
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
        return answer.status, answer.reason, answer.read(ANSWER_BYTES) if read else b""
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
    elif delivery.channel in (Channel.SLACK_APP, Channel.SLACK_RESPONSE):
        return slack.send(delivery, post)
    else:
        raw = json.dumps(envelope(note), separators=(",", ":"), sort_keys=True).encode()
        headers = {signing.HEADER: signing.sign(delivery.secret, raw)}
    headers |= {
        "Content-Type": "application/json",
        "User-Agent": "reviewer-portal",
        EVENT_ID_HEADER: str(note.pk),
        EVENT_TYPE_HEADER: note.kind,
    }
    return post(delivery.target, raw, headers)[0]


def post(
    url: str,
    raw: bytes,
    headers: dict[str, str],
    *,
    seconds: float | None = None,
    read: bool = False,
) -> tuple[int, bytes]:
    """POST ``raw`` to ``url`` (http or https, under the address rule of ``targets``)
    within ``seconds`` (default ``PORTAL_NOTIFY_TIMEOUT``); return the 2xx status and the
    start of the answer's body (with ``read``). Raises ``SendError`` saying what went wrong."""
    deadline = _Deadline(seconds or settings.PORTAL_NOTIFY_TIMEOUT)
    try:
        status, reason, body = _post(url, raw, headers, deadline, read=read)
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, TimeoutError) or deadline.passed():
            raise SendError(
                f"the receiver took longer than {deadline.seconds:g} s to answer "
                "(PORTAL_NOTIFY_TIMEOUT)"
            ) from None
        if isinstance(exc, OSError):
            raise SendError(f"could not reach {url}: {exc}") from None
        raise SendError(f"the receiver's answer is not HTTP: {exc!r}") from None
    if not 200 <= status < 300:
        raise SendError(f"the receiver answered {status} {reason}", status)
    return status, body
