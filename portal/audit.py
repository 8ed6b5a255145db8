"""Tamper evidence for decisions: a hash chain over the ``Decision`` table.

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

Canonical JSON: keys sorted, no whitespace, UTF-8 kept, integral floats written as integers
(PostgreSQL's ``jsonb`` gives ``1e16`` back as ``10000000000000000``), datetimes in UTC with
microseconds. A value hashes the same before insert and after a round trip through either
database.

This module sits below ``portal.models``: it is handed the decision (or the decisions to
walk) and never imports the model. ``Decision.save()`` calls ``sealing()`` on insert; every
path that records a decision (the decision service, cancellation, expiry, the admin) goes
through it. ``bulk_create`` and raw SQL do not, and ``verify_chain`` reports what they
leave behind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections, models, router, transaction

GENESIS = "0" * 64
# pg_advisory_xact_lock key for "the decision chain head"; any constant works as long as
# nothing else in the database uses it ("portal" in ASCII).
CHAIN_LOCK_KEY = 0x706F7274616C

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
        return int(value)
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


def decision_hash(fields: Mapping[str, Any], *, prev_hash: str, payload: str) -> str:
    """The chain hash of one decision from its own fields and its two neighbours' hashes."""
    own = canonical({name: fields.get(name) for name in DECISION_FIELDS})
    return _sha256(prev_hash + own + payload)


def _fields_of(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def _lock_chain(using: str) -> None:
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
    # SQLite: the portal opens every transaction with BEGIN IMMEDIATE, which takes the
    # database's write lock up front, so appends are already serialised there.


@contextmanager
def sealing(decision: Any, *, using: str | None = None) -> Iterator[None]:
    """Fill in the decision's hashes and keep the chain locked until its transaction ends.

    The insert must happen inside the ``with`` block (``Decision.save`` does so).
    """
    model = type(decision)
    db = using or router.db_for_write(model, instance=decision)
    with transaction.atomic(using=db):
        # The race: two decisions committed at the same moment would both read the same
        # chain head and both store it as prev_hash, forking the chain. The transaction-
        # level advisory lock is held from reading the head until this insert commits, so
        # the second decision waits and then reads the first one's hash.
        _lock_chain(db)
        heads = model._default_manager.using(db).order_by("-id")
        head = heads.values_list("hash", flat=True).first()
        decision.prev_hash = head if head is not None else GENESIS
        interrupt = decision.interrupt
        decision.payload_hash = payload_hash(_fields_of(interrupt, PAYLOAD_FIELDS))
        decision.hash = decision_hash(
            _fields_of(decision, DECISION_FIELDS),
            prev_hash=decision.prev_hash,
            payload=decision.payload_hash,
        )
        yield


# --- verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenLink:
    decision_id: int | None  # None: the break is before any decision left
    reason: str

    def __str__(self) -> str:
        where = "the start" if self.decision_id is None else f"decision {self.decision_id}"
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


def _check_row(row: dict[str, Any], expected_prev: str, prev_id: int | None) -> str | None:
    stored = decision_hash(row, prev_hash=row["prev_hash"], payload=row["payload_hash"])
    if stored != row["hash"]:
        return (
            "edited row: the stored hash does not match the decision's fields "
            "(a value, note, outcome, reviewer or time was changed after it was recorded)"
        )
    payload = {name: row[column] for column, name in _PAYLOAD_COLUMNS.items()}
    payload["id"] = row["interrupt_id"]
    if payload_hash(payload) != row["payload_hash"]:
        return (
            f"payload changed: interrupt {row['interrupt_id']} no longer matches the payload "
            "the reviewer saw when deciding"
        )
    if row["prev_hash"] != expected_prev:
        if prev_id is None:
            return (
                "deleted row: this is the first decision left but its prev_hash is not the "
                "genesis value, so earlier decisions were removed"
            )
        return (
            f"deleted row: prev_hash does not match the hash of decision {prev_id}, the row "
            "before it (a decision in between was deleted, or that row was rewritten)"
        )
    return None


def _missing_head(expected: str, last_id: int | None) -> BrokenLink:
    return BrokenLink(
        last_id,
        f"deleted rows: the head recorded earlier ({expected}) is in the chain no more, so "
        "the decisions after this one, up to that head, were deleted (or the chain was "
        "rewritten)",
    )


def verify_chain(
    decisions: models.QuerySet[Any], *, batch_size: int = 2000, expect_head: str | None = None
) -> ChainReport:
    """Walk the chain of ``decisions`` (every ``Decision``, on the database to check) in
    ``id`` order, ``batch_size`` rows at a time (keyset pagination, so memory stays flat
    however long the chain is), and report the first broken link.

    ``expect_head`` is a head hash recorded earlier (``verify_audit`` prints it). A chain
    that lost its newest rows is still consistent with itself; it is broken if that hash
    is no longer one of its decisions' (decisions added since are fine)."""
    columns = (
        "id",
        *DECISION_FIELDS,
        "payload_hash",
        "prev_hash",
        "hash",
        *_PAYLOAD_COLUMNS,
    )
    expected_prev, prev_id, count, last_id = GENESIS, None, 0, 0
    head_seen = expect_head in (None, GENESIS)
    while True:
        batch = list(decisions.filter(id__gt=last_id).order_by("id").values(*columns)[:batch_size])
        for row in batch:
            reason = _check_row(row, expected_prev, prev_id)
            if reason is not None:
                return ChainReport(count, expected_prev, BrokenLink(row["id"], reason))
            expected_prev, prev_id = row["hash"], row["id"]
            head_seen = head_seen or row["hash"] == expect_head
            count += 1
        if len(batch) < batch_size:
            if not head_seen:
                assert expect_head is not None
                return ChainReport(count, expected_prev, _missing_head(expect_head, prev_id))
            return ChainReport(count, expected_prev, None)
        last_id = batch[-1]["id"]
