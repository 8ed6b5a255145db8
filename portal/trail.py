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

Only what an event's hash covers is here: locking (one lock for both chains), linking to
the head and walking the chain are ``portal.audit``'s ``appending`` and ``walk_chain``.
Like ``portal.audit`` this module sits below ``portal.models``: it is handed the event (or
the events to walk) and never imports the model. ``AuditEvent.save()`` seals on insert;
``portal.models.audit_record`` is the one function that records an event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from django.db import models

from portal.audit import GENESIS, ChainReport, appending, canonical, walk_chain

__all__ = [
    "EVENT_FIELDS",
    "GENESIS",
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


def _seal_event(event: Any) -> None:
    fields = {name: getattr(event, name) for name in EVENT_FIELDS}
    event.hash = event_hash(fields, prev_hash=event.prev_hash)


def sealing(event: Any, *, using: str | None = None) -> AbstractContextManager[None]:
    """Fill in the event's hashes and keep the chains locked until its transaction ends
    (``portal.audit.appending``). The insert must happen inside the ``with`` block
    (``AuditEvent.save`` does so)."""
    return appending(event, seal=_seal_event, using=using)


def _check_event(row: dict[str, Any]) -> str | None:
    if event_hash(row, prev_hash=row["prev_hash"]) != row["hash"]:
        return (
            "edited row: the stored hash does not match the event's fields (its action, "
            "actor, target, detail or time was changed after it was recorded)"
        )
    return None


def verify_events(
    events: models.QuerySet[Any], *, batch_size: int = 2000, expect_head: str | None = None
) -> ChainReport:
    """Walk the chain of ``events`` (every ``AuditEvent``, on the database to check) and
    report the first broken link, as ``portal.audit.verify_chain`` does for decisions."""
    return walk_chain(
        events,
        ("id", *EVENT_FIELDS, "prev_hash", "hash"),
        _check_event,
        what="event",
        batch_size=batch_size,
        expect_head=expect_head,
    )
