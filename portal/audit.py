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
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections, models, router, transaction

GENESIS = "0" * 64
# pg_advisory_xact_lock key for "the chains' heads" (decisions' and audit events'); any
# constant works as long as nothing else in the database uses it ("portal" in ASCII).
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


def lock_chain(using: str) -> None:
    """Hold the chains' lock until the current transaction ends. One lock for both chains
    (decisions and ``portal.trail``'s events): an action that appends to both in one
    transaction (a withdrawal) takes one lock, so two such transactions cannot take two
    locks in opposite orders and deadlock."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
    # SQLite: the portal opens every transaction with BEGIN IMMEDIATE, which takes the
    # database's write lock up front, so appends are already serialised there.


@contextmanager
def appending(row: Any, *, seal: Callable[[Any], None], using: str | None = None) -> Iterator[None]:
    """Link ``row`` to its chain's head (``prev_hash``), let ``seal`` fill in its own
    hashes, and keep the chain locked until the transaction ends. The insert must happen
    inside the ``with`` block (the models' ``save`` does so)."""
    model = type(row)
    db = using or router.db_for_write(model, instance=row)
    with transaction.atomic(using=db):
        # The race: two rows committed at the same moment would both read the same chain
        # head and both store it as prev_hash, forking the chain. The transaction-level
        # advisory lock is held from reading the head until this insert commits, so the
        # second one waits and then reads the first one's hash.
        lock_chain(db)
        heads = model._default_manager.using(db).order_by("-id")
        head = heads.values_list("hash", flat=True).first()
        row.prev_hash = head if head is not None else GENESIS
        seal(row)
        yield


def _seal_decision(decision: Any) -> None:
    decision.payload_hash = payload_hash(_fields_of(decision.interrupt, PAYLOAD_FIELDS))
    decision.hash = decision_hash(
        _fields_of(decision, DECISION_FIELDS),
        prev_hash=decision.prev_hash,
        payload=decision.payload_hash,
    )


def sealing(decision: Any, *, using: str | None = None) -> AbstractContextManager[None]:
    """Fill in the decision's hashes and keep the chain locked until its transaction ends.

    The insert must happen inside the ``with`` block (``Decision.save`` does so).
    """
    return appending(decision, seal=_seal_decision, using=using)


# --- verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenLink:
    decision_id: int | None  # the row's id; None: the break is before any row left
    reason: str
    what: str = "decision"  # the kind of row: "decision", "event"

    def __str__(self) -> str:
        where = "the start" if self.decision_id is None else f"{self.what} {self.decision_id}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class ChainReport:
    count: int
    head: str
    broken: BrokenLink | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def _link_problem(what: str, row: dict[str, Any], expected_prev: str, prev_id: Any) -> str | None:
    if row["prev_hash"] == expected_prev:
        return None
    a = "an" if what[0] in "aeiou" else "a"
    if prev_id is None:
        return (
            f"deleted row: this is the first {what} left but its prev_hash is not the "
            f"genesis value, so earlier {what}s were removed"
        )
    return (
        f"deleted row: prev_hash does not match the hash of {what} {prev_id}, the row "
        f"before it ({a} {what} in between was deleted, or that row was rewritten)"
    )


def walk_chain(
    rows: models.QuerySet[Any],
    columns: tuple[str, ...],
    check: Callable[[dict[str, Any]], str | None],
    *,
    what: str,
    batch_size: int = 2000,
    expect_head: str | None = None,
) -> ChainReport:
    """Walk a chain in ``id`` order, ``batch_size`` rows at a time (keyset pagination, so
    memory stays flat however long the chain is), and report the first broken link:
    a row ``check`` refuses (its own hashes), or a row whose ``prev_hash`` is not the hash
    of the row before it. ``columns`` must hold ``id``, ``prev_hash`` and ``hash``.

    ``expect_head`` is a head hash recorded earlier (``verify_audit`` prints it). A chain
    that lost its newest rows is still consistent with itself; it is broken if that hash
    is no longer one of its rows' (rows added since are fine)."""
    expected_prev, prev_id, count, last_id = GENESIS, None, 0, 0
    head_seen = expect_head in (None, GENESIS)
    while True:
        batch = list(rows.filter(id__gt=last_id).order_by("id").values(*columns)[:batch_size])
        for row in batch:
            reason = check(row) or _link_problem(what, row, expected_prev, prev_id)
            if reason is not None:
                return ChainReport(count, expected_prev, BrokenLink(row["id"], reason, what))
            expected_prev, prev_id = row["hash"], row["id"]
            head_seen = head_seen or row["hash"] == expect_head
            count += 1
        if len(batch) < batch_size:
            if not head_seen:
                reason = (
                    f"deleted rows: the head recorded earlier ({expect_head}) is in the chain "
                    f"no more, so the {what}s after this one, up to that head, were deleted "
                    "(or the chain was rewritten)"
                )
                return ChainReport(count, expected_prev, BrokenLink(prev_id, reason, what))
            return ChainReport(count, expected_prev, None)
        last_id = batch[-1]["id"]


_PAYLOAD_COLUMNS = {f"interrupt__{name}": name for name in PAYLOAD_FIELDS if name != "id"}


def _check_decision(row: dict[str, Any]) -> str | None:
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
    return None


def verify_chain(
    decisions: models.QuerySet[Any], *, batch_size: int = 2000, expect_head: str | None = None
) -> ChainReport:
    """Walk the chain of ``decisions`` (every ``Decision``, on the database to check) and
    report the first broken link (see ``walk_chain``)."""
    columns = (
        "id",
        *DECISION_FIELDS,
        "payload_hash",
        "prev_hash",
        "hash",
        *_PAYLOAD_COLUMNS,
    )
    return walk_chain(
        decisions,
        columns,
        _check_decision,
        what="decision",
        batch_size=batch_size,
        expect_head=expect_head,
    )
