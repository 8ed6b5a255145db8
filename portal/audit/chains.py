"""Tamper evidence: hash chains over the ``Decision`` table, the ``Approval`` table (each
reviewer's vote on a request that needs several) and the ``AuditEvent`` table (every other
action: claims, logins, tokens, withdrawals...). One ``Chain`` describes each.

Every decision stores three hashes, all SHA-256 in hex:

- ``payload_hash``: the interrupt payload exactly as the reviewer saw it (id, thread, agent,
  key, node, value, message, reason, response schema, tool call id, when it was raised), in
  canonical JSON;
- ``prev_hash``: the ``hash`` of the decision inserted just before it (``GENESIS`` for the
  first one);
- ``hash``: ``sha256(prev_hash + canonical(own fields) + payload_hash)``.

Chain order is insertion order, which is ``id`` order because appends are serialised (see
``sealing``). Editing a row breaks its own ``hash``; deleting a row breaks the next row's
``prev_hash``; editing the interrupt a decision answered breaks its ``payload_hash``.
Rewriting the whole tail after an edit is detectable only against a head hash recorded
elsewhere, which is why ``verify_audit`` prints the head.

Canonical JSON: keys sorted, no whitespace, UTF-8 kept, integral floats written as the
integers their text names (PostgreSQL's ``jsonb`` gives ``1e16`` back as
``10000000000000000``, and ``1e23`` as ``10**23``), datetimes in UTC with
microseconds. A value hashes the same before insert and after a round trip through either
database.

This module sits below ``portal.models``: it is handed the decision (or the decisions to
walk) and never imports the model. ``Decision.save()`` calls ``sealing()`` on insert; every
path that records a decision (the decision service, cancellation, expiry, the admin) goes
through it. ``bulk_create`` and raw SQL do not, and ``verify_chain`` reports what they
leave behind.

Approvals are chained the same way, with their own fields (``APPROVAL_FIELDS``) and their
own head: ``Approval.save()`` seals each vote, and ``verify_chain(..., chain=APPROVALS)``
walks them. A vote and the decision it completes are sealed in one transaction.

Audit events (``EVENTS``) carry no interrupt payload: their hash is
``sha256(prev_hash + canonical(own fields))``. ``AuditEvent.save()`` seals each one, and
``portal.models.audit_record`` is the one function that records an event, inside the
transaction of the action it records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import connections, models, router, transaction

GENESIS = "0" * 64
# pg_advisory_xact_lock key for "the chains' heads" (all three share it); any constant
# works as long as nothing else in the database uses it ("portal" in ASCII).
CHAIN_LOCK_KEY = 0x706F7274616C

# An approval's own fields, in canonical order.
APPROVAL_FIELDS = (
    "interrupt_id",
    "reviewer_id",
    "outcome",
    "value",
    "note",
    "created_at",
)
# An audit event's own fields, in canonical order.
EVENT_FIELDS = (
    "created_at",
    "action",
    "actor_id",
    "actor_name",
    "target_type",
    "target_id",
    "detail",
)
# The decision's own fields, in the order they appear in the canonical form.
DECISION_FIELDS = (
    "interrupt_id",
    "thread_id",
    "reviewer_id",
    "outcome",
    "value",
    "note",
    "original_args",
    "executed_args",
    "created_at",
)
# The interrupt fields that make up "the payload as the reviewer saw it". Status, claims
# and resolution times change over an interrupt's life and are not part of it.
PAYLOAD_FIELDS = (
    "id",
    "thread_id",
    "agent",
    "key",
    "node",
    "value",
    "message",
    "reason",
    "response_schema",
    "tool_call_id",
    "created_at",
)


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        # As a database's JSON gives it back: the integer its shortest text names. jsonb
        # returns 1e23 as 10**23, which is not int(1e23) (the float only nears it).
        return int(Decimal(repr(value)))
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, int | float | str):
        return value
    return str(value)  # UUIDs and other scalars the ORM hands back


def canonical(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module docstring)."""
    return json.dumps(
        _normalise(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_hash(interrupt: Mapping[str, Any]) -> str:
    """Hash of the interrupt payload; ``interrupt`` maps ``PAYLOAD_FIELDS`` to values."""
    return _sha256(canonical({name: interrupt.get(name) for name in PAYLOAD_FIELDS}))


@dataclass(frozen=True)
class Chain:
    """One hash chain: the rows' own fields, and whether each row also seals the payload
    of the interrupt it answers (``payload_hash``)."""

    noun: str  # "decision", "approval", "event": for the reports
    fields: tuple[str, ...]
    payload: bool
    edits: str  # what an edit of a row's fields could have changed, for the reports

    def hash(self, fields: Mapping[str, Any], *, prev_hash: str, payload: str = "") -> str:
        """The chain hash of one row from its own fields, the previous row's hash and (for
        a chain with payloads) the payload's hash."""
        own = canonical({name: fields.get(name) for name in self.fields})
        return _sha256(prev_hash + own + payload)


_ANSWER_EDITS = "a value, note, outcome, reviewer or time"
DECISIONS = Chain("decision", DECISION_FIELDS, True, _ANSWER_EDITS)
APPROVALS = Chain("approval", APPROVAL_FIELDS, True, _ANSWER_EDITS)
EVENTS = Chain("event", EVENT_FIELDS, False, "an action, actor, target, detail or time")


def decision_hash(fields: Mapping[str, Any], *, prev_hash: str, payload: str) -> str:
    """The chain hash of one decision from its own fields and its two neighbours' hashes."""
    return DECISIONS.hash(fields, prev_hash=prev_hash, payload=payload)


def approval_hash(fields: Mapping[str, Any], *, prev_hash: str, payload: str) -> str:
    """The chain hash of one approval, as ``decision_hash`` is for a decision."""
    return APPROVALS.hash(fields, prev_hash=prev_hash, payload=payload)


def event_hash(fields: Mapping[str, Any], *, prev_hash: str) -> str:
    """The chain hash of one audit event from its own fields and the previous event's."""
    return EVENTS.hash(fields, prev_hash=prev_hash)


def _fields_of(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def _lock_chain(using: str) -> None:
    # One lock for every chain: an action that appends to two of them in one transaction
    # (a vote that completes a request, a withdrawal) cannot take two locks in two orders.
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
    # SQLite: the portal opens every transaction with BEGIN IMMEDIATE, which takes the
    # database's write lock up front, so appends are already serialised there.


@contextmanager
def sealing(record: Any, *, chain: Chain, using: str | None = None) -> Iterator[None]:
    """Fill in the hashes of a row of ``chain`` and keep the chains locked until its
    transaction ends.

    The insert must happen inside the ``with`` block (``Decision.save``, ``Approval.save``
    and ``AuditEvent.save`` do so).
    """
    model = type(record)
    db = using or router.db_for_write(model, instance=record)
    # No savepoint inside a caller's transaction: a failed insert fails it (or the
    # caller's own savepoint) whole, and the lock is held to its end either way.
    with transaction.atomic(using=db, savepoint=False):
        # The race: two rows committed at the same moment would both read the same chain
        # head and both store it as prev_hash, forking the chain. The transaction-level
        # advisory lock is held from reading the head until this insert commits, so the
        # second row waits and then reads the first one's hash.
        _lock_chain(db)
        heads = model._default_manager.using(db).order_by("-id")
        head = heads.values_list("hash", flat=True).first()
        record.prev_hash = head if head is not None else GENESIS
        payload = ""
        if chain.payload:
            record.payload_hash = payload_hash(_fields_of(record.interrupt, PAYLOAD_FIELDS))
            payload = record.payload_hash
        record.hash = chain.hash(
            _fields_of(record, chain.fields), prev_hash=record.prev_hash, payload=payload
        )
        yield


# --- verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenLink:
    decision_id: int | None  # the row's id (a decision's, or an approval's); None: the start
    reason: str
    noun: str = "decision"

    def __str__(self) -> str:
        where = "the start" if self.decision_id is None else f"{self.noun} {self.decision_id}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class ChainReport:
    count: int
    head: str
    broken: BrokenLink | None

    @property
    def ok(self) -> bool:
        return self.broken is None


_PAYLOAD_COLUMNS = {f"interrupt__{name}": name for name in PAYLOAD_FIELDS if name != "id"}


def _check_row(
    row: dict[str, Any], expected_prev: str, prev_id: int | None, chain: Chain = DECISIONS
) -> str | None:
    noun = chain.noun
    payload = row["payload_hash"] if chain.payload else ""
    if chain.hash(row, prev_hash=row["prev_hash"], payload=payload) != row["hash"]:
        return (
            f"edited row: the stored hash does not match the {noun}'s fields "
            f"({chain.edits} was changed after it was recorded)"
        )
    if chain.payload:
        seen = {name: row[column] for column, name in _PAYLOAD_COLUMNS.items()}
        seen["id"] = row["interrupt_id"]
        if payload_hash(seen) != row["payload_hash"]:
            return (
                f"payload changed: interrupt {row['interrupt_id']} no longer matches the "
                "payload the reviewer saw when deciding"
            )
    if row["prev_hash"] != expected_prev:
        a = "an" if noun[0] in "aeiou" else "a"
        if prev_id is None:
            return (
                f"deleted row: this is the first {noun} left but its prev_hash is not the "
                f"genesis value, so earlier {noun}s were removed"
            )
        return (
            f"deleted row: prev_hash does not match the hash of {noun} {prev_id}, the row "
            f"before it ({a} {noun} in between was deleted, or that row was rewritten)"
        )
    return None


def _missing_head(expected: str, last_id: int | None, noun: str = "decision") -> BrokenLink:
    return BrokenLink(
        last_id,
        f"deleted rows: the head recorded earlier ({expected}) is in the chain no more, so "
        f"the {noun}s after this one, up to that head, were deleted (or the chain was "
        "rewritten)",
        noun,
    )


def verify_chain(
    decisions: models.QuerySet[Any],
    *,
    batch_size: int = 2000,
    expect_head: str | None = None,
    chain: Chain = DECISIONS,
) -> ChainReport:
    """Walk the chain of ``decisions`` (every ``Decision``, on the database to check; or
    every ``Approval`` with ``chain=APPROVALS``, every ``AuditEvent`` with ``chain=EVENTS``)
    in ``id`` order, ``batch_size`` rows at a time (keyset pagination, so memory stays flat
    however long the chain is), and report the first broken link.

    ``expect_head`` is a head hash recorded earlier (``verify_audit`` prints it). A chain
    that lost its newest rows is still consistent with itself; it is broken if that hash
    is no longer one of its decisions' (decisions added since are fine)."""
    payload_columns = ("payload_hash", *_PAYLOAD_COLUMNS) if chain.payload else ()
    columns = ("id", *chain.fields, "prev_hash", "hash", *payload_columns)
    expected_prev, prev_id, count, last_id = GENESIS, None, 0, 0
    head_seen = expect_head in (None, GENESIS)
    while True:
        batch = list(decisions.filter(id__gt=last_id).order_by("id").values(*columns)[:batch_size])
        for row in batch:
            reason = _check_row(row, expected_prev, prev_id, chain)
            if reason is not None:
                return ChainReport(count, expected_prev, BrokenLink(row["id"], reason, chain.noun))
            expected_prev, prev_id = row["hash"], row["id"]
            head_seen = head_seen or row["hash"] == expect_head
            count += 1
        if len(batch) < batch_size:
            if not head_seen:
                assert expect_head is not None
                return ChainReport(
                    count, expected_prev, _missing_head(expect_head, prev_id, chain.noun)
                )
            return ChainReport(count, expected_prev, None)
        last_id = batch[-1]["id"]
