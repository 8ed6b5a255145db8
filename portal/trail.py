"""Tamper evidence for the audit trail of actions (``AuditEvent``): claims, logins, tokens,
withdrawals...

Decisions have their hash chain (``portal.audit``); every other action a person or the
system takes is appended to a sibling chain built the same way:

- ``prev_hash``: the ``hash`` of the event appended just before (``GENESIS`` for the first);
- ``hash``: ``sha256(prev_hash + canonical(own fields))``, with ``portal.audit.canonical``.

Editing an event breaks its own ``hash``, deleting one breaks the next event's
``prev_hash``, and cutting the newest events off shows only against a head recorded
elsewhere (``verify_audit`` prints both chains' heads). PostgreSQL refuses UPDATE, DELETE
and TRUNCATE on the table (migration 0024) as it does for decisions.

Like ``portal.audit`` this module sits below ``portal.models``: it is handed the event (or
the events to walk) and never imports the model. ``AuditEvent.save()`` seals on insert;
``portal.models.audit_record`` is the one function that records an event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections, models, router, transaction

from portal.audit import CHAIN_LOCK_KEY, GENESIS, canonical

__all__ = [
    "EVENT_FIELDS",
    "GENESIS",
    "EventChainReport",
    "canonical",
    "event_hash",
    "sealing",
    "verify_events",
]

# The event's own fields, in the order of the canonical form.
EVENT_FIELDS = (
    "created_at",
    "action",
    "actor_id",
    "actor_name",
    "target_type",
    "target_id",
    "detail",
)


def event_hash(fields: Mapping[str, Any], *, prev_hash: str) -> str:
    """The chain hash of one event from its own fields and the previous event's hash."""
    own = canonical({name: fields.get(name) for name in EVENT_FIELDS})
    return hashlib.sha256((prev_hash + own).encode("utf-8")).hexdigest()


def _lock_chain(using: str) -> None:
    connection = connections[using]
    if connection.vendor == "postgresql":
        # The decisions' lock key, not one of its own: an action that records a decision
        # and an event in one transaction (a withdrawal) would otherwise take two chain
        # locks, and two such transactions taking them in opposite orders would deadlock.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
    # SQLite: every transaction starts with BEGIN IMMEDIATE, which serialises writers.


@contextmanager
def sealing(event: Any, *, using: str | None = None) -> Iterator[None]:
    """Fill in the event's hashes and keep the chain locked until its transaction ends.
    The insert must happen inside the ``with`` block (``AuditEvent.save`` does so)."""
    model = type(event)
    db = using or router.db_for_write(model, instance=event)
    with transaction.atomic(using=db):
        # The race: two events appended at the same moment would both read the same head
        # and both store it as prev_hash, forking the chain. The advisory lock is held from
        # reading the head until this transaction commits, so the second one waits.
        _lock_chain(db)
        heads = model._default_manager.using(db).order_by("-id")
        head = heads.values_list("hash", flat=True).first()
        event.prev_hash = head if head is not None else GENESIS
        fields = {name: getattr(event, name) for name in EVENT_FIELDS}
        event.hash = event_hash(fields, prev_hash=event.prev_hash)
        yield


# --- verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class EventChainReport:
    count: int
    head: str
    broken_at: int | None  # the id of the first event that fails, or None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_at is None and not self.reason

    def __str__(self) -> str:
        where = "the start" if self.broken_at is None else f"event {self.broken_at}"
        return f"{where}: {self.reason}"


def verify_events(
    events: models.QuerySet[Any], *, batch_size: int = 2000, expect_head: str | None = None
) -> EventChainReport:
    """Walk the chain of ``events`` (every ``AuditEvent``, on the database to check) in
    ``id`` order, ``batch_size`` rows at a time, and report the first broken link (as
    ``portal.audit.verify_chain`` does for decisions)."""
    columns = ("id", *EVENT_FIELDS, "prev_hash", "hash")
    expected_prev, prev_id, count, last_id = GENESIS, None, 0, 0
    head_seen = expect_head in (None, GENESIS)
    while True:
        batch = list(events.filter(id__gt=last_id).order_by("id").values(*columns)[:batch_size])
        for row in batch:
            reason = _check_event(row, expected_prev, prev_id)
            if reason is not None:
                return EventChainReport(count, expected_prev, row["id"], reason)
            expected_prev, prev_id = row["hash"], row["id"]
            head_seen = head_seen or row["hash"] == expect_head
            count += 1
        if len(batch) < batch_size:
            if not head_seen:
                return EventChainReport(
                    count,
                    expected_prev,
                    prev_id,
                    f"deleted rows: the head recorded earlier ({expect_head}) is in the chain "
                    "no more, so the events after this one, up to that head, were deleted "
                    "(or the chain was rewritten)",
                )
            return EventChainReport(count, expected_prev, None)
        last_id = batch[-1]["id"]


def _check_event(row: dict[str, Any], expected_prev: str, prev_id: int | None) -> str | None:
    if event_hash(row, prev_hash=row["prev_hash"]) != row["hash"]:
        return (
            "edited row: the stored hash does not match the event's fields (its action, "
            "actor, target, detail or time was changed after it was recorded)"
        )
    if row["prev_hash"] != expected_prev:
        if prev_id is None:
            return (
                "deleted row: this is the first event left but its prev_hash is not the "
                "genesis value, so earlier events were removed"
            )
        return (
            f"deleted row: prev_hash does not match the hash of event {prev_id}, the row "
            "before it (an event in between was deleted, or that row was rewritten)"
        )
    return None
