"""The notifier: fans out the outbox, sends deliveries, and sends reminders and
escalations (nothing else sends a notification).

More in docs/architecture.md (`notify/notifier.py`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal import loops
from portal.models import Delivery, Notification, Subscription, WorkerHeartbeat, waiting
from portal.notify import assignments, outbox

log = logging.getLogger(__name__)

# How often the notifier looks for requests due a reminder or an escalation.
ROUTING_CHECK_SECONDS = 5.0
# Rows taken per transaction.
DISPATCH_BATCH = 50
SEND_BATCH = 20

_wake = outbox.wake_event

Channel = Subscription.Channel


def _matches(sub: Subscription, note: Notification, groups: set[int]) -> bool:
    if sub.events and note.kind not in sub.events:
        return False
    if sub.agent and sub.agent != note.agent:
        return False
    if sub.reason and sub.reason != note.reason:
        return False
    return not sub.group_id or sub.group_id in groups


def _email_of_group(sub: Subscription) -> str:
    users = get_user_model().objects.filter(groups=sub.group_id, is_active=True).exclude(email="")
    return ", ".join(sorted(users.values_list("email", flat=True)))


def _assignee_addresses(note: Notification) -> str:
    """The addresses of the people an assignment, reminder or escalation is about."""
    names = note.payload.get("assignees")
    if note.kind not in outbox.TO_ASSIGNEES or not isinstance(names, list) or not names:
        return ""
    model = get_user_model()
    users = model.objects.filter(
        **{f"{model.USERNAME_FIELD}__in": [str(n) for n in names]}, is_active=True
    ).exclude(email="")
    return ", ".join(sorted(set(users.values_list("email", flat=True))))


def _fan_out(note: Notification, subscriptions: list[Subscription]) -> list[Delivery]:
    groups = (
        assignments.routed_group_ids(note.interrupt_id, agent=note.agent, reason=note.reason)
        if note.interrupt_id is not None
        else set()
    )
    out = []
    for sub in subscriptions:
        if not _matches(sub, note, groups):
            continue
        target = sub.target
        if sub.channel == Channel.EMAIL and not target and sub.group_id:
            target = _email_of_group(sub)
        if not target:
            continue
        out.append(
            Delivery(
                notification=note,
                subscription=sub,
                channel=sub.channel,
                target=target,
                secret=sub.secret,
            )
        )
    to_assignees = _assignee_addresses(note)
    if to_assignees:
        out.append(Delivery(notification=note, channel=Channel.EMAIL, target=to_assignees))
    return out


def outbox_dispatch(*, batch: int = 50) -> int:
    """Fan undispatched notifications out into deliveries, one per matching subscription
    (plus one email to the people an assignment, reminder or escalation is about), in one
    transaction with marking them dispatched; returns how many it handled.

    A new request is routed first (``assignments.request_route``), in the same
    transaction, so its fan-out sees the groups it went to.
    """
    with transaction.atomic():
        # SKIP LOCKED: two notifiers take different notifications instead of both
        # fanning out the same one (each would write its deliveries).
        notes = list(
            Notification.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(dispatched_at__isnull=True)
            .select_related("interrupt")
            .order_by("created_at")[:batch]
        )
        if not notes:
            return 0
        subscriptions = list(Subscription.objects.filter(active=True))
        now = timezone.now()
        deliveries: list[Delivery] = []
        for note in notes:
            if note.kind == outbox.REQUEST_CREATED and note.interrupt is not None:
                # Written by the checkpointer's statement with no payload: the request's
                # own row says what it is.
                note.payload = {"request": outbox.request_payload(note.interrupt)}
                assignments.request_route(interrupt=note.interrupt)
            deliveries.extend(_fan_out(note, subscriptions))
            note.dispatched_at = now
        Delivery.objects.bulk_create(deliveries)
        Notification.objects.bulk_update(notes, ["payload", "dispatched_at"])
    return len(notes)


class Notifier:
    """One notifier loop; ``tick`` is one round of its work."""

    def __init__(self, *, name: str | None = None, poll: float = 1.0) -> None:
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.poll = poll
        self.stopping = threading.Event()
        self._last_routing = 0.0
        self._heartbeat = loops.Heartbeat(self.name, kind=WorkerHeartbeat.Kind.NOTIFIER)

    def tick(self) -> int:
        """Route, fan out and send what is due; returns how much it did."""
        done = 0
        now = time.monotonic()
        if now - self._last_routing >= ROUTING_CHECK_SECONDS:
            self._last_routing = now
            reminded, escalated = assignments.requests_remind_and_escalate()
            done += reminded + escalated
        # A full batch means more may be waiting, a short one that all that was due is
        # taken: so a round tries each due delivery once, however short its backoff.
        while True:
            fanned = outbox_dispatch(batch=DISPATCH_BATCH)
            done += fanned
            if fanned < DISPATCH_BATCH:
                break
        while True:
            sent = outbox.outbox_deliver(batch=SEND_BATCH)
            done += sent
            if sent < SEND_BATCH:
                break
        return done

    def run_forever(self, *, once: bool = False) -> int:
        """Work until stopped; with ``once``, until a round finds nothing to do."""
        total = 0
        log.info("notifier %s started", self.name)
        # Woken by any process's new notification (NOTIFY on PostgreSQL) rather than
        # finding it at the next poll; the poll remains for retries, reminders and a lost
        # wake-up.
        with waiting.listening(waiting.OUTBOX_KEY, _wake.set):
            return self._run(once=once, total=total)

    def _run(self, *, once: bool, total: int) -> int:
        try:
            while not self.stopping.is_set():
                loops.refresh_connections()
                _wake.clear()
                self._heartbeat.maybe_beat()
                try:
                    done = self.tick()
                except Exception:
                    if once:
                        raise
                    # A database hiccup must not end the loop: wait and try again.
                    log.exception("notifier %s: a round failed", self.name)
                    done = 0
                total += done
                if once and not done:
                    break
                if not done:
                    _wake.wait(self.poll)
        finally:
            self._heartbeat.forget()
            loops.refresh_connections()
        log.info("notifier %s stopped", self.name)
        return total

    def stop(self) -> None:
        self.stopping.set()
        _wake.set()


_embedded = loops.Embedded(
    lambda: Notifier(name=f"embedded-notifier:{os.getpid()}"), thread_name="portal-notifier"
)


def start_embedded_notifier() -> Notifier:
    """Run the notifier loop in a daemon thread of this process (the one-command demo).
    Idempotent: a second call returns the running notifier."""
    return _embedded.start()


def stop_embedded_notifier(timeout: float = 10) -> None:
    """Stop the embedded notifier after its current round (tests, orderly shutdown)."""
    _embedded.stop(timeout)
