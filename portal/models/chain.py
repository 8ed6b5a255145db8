"""Hash chains over ``Decision``, ``Approval`` and ``AuditEvent`` rows: the canonical JSON
form, one ``Chain`` for each table, and ``sealing``, which fills in a row's hashes on insert
under the chains' lock. It never imports a model; verifying a chain is
``portal.audit.chains``'. The hashes and the canonical form: docs/architecture.md, "models".
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

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django.db.models.expressions import RawSQL

from portal.models.together import then as together_then
from portal.models.together import together

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
# Decision fields added later: in the canonical form only when set, so the rows recorded
# before them hash as they always did, and a new row's value is sealed like the others.
DECISION_LATER_FIELDS = ("door", "rule_version_id", "rule_hash")
APPROVAL_LATER_FIELDS = ("door",)
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
    later: tuple[str, ...] = ()  # fields added since: canonical only when set

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.fields, *self.later)

    def hash(self, fields: Mapping[str, Any], *, prev_hash: str, payload: str = "") -> str:
        """The chain hash of one row from its own fields, the previous row's hash and (for
        a chain with payloads) the payload's hash."""
        return _sha256(prev_hash + self.sealed_text(fields, payload=payload))

    def sealed_text(self, fields: Mapping[str, Any], *, payload: str = "") -> str:
        """What follows the previous row's hash in the text a row's hash is taken of: its
        own fields' canonical form, then the payload's hash (``_HASHED`` in SQL)."""
        own = {name: fields.get(name) for name in self.fields}
        own |= {name: fields[name] for name in self.later if fields.get(name)}
        return canonical(own) + payload


_ANSWER_EDITS = "a value, note, outcome, reviewer or time"
DECISIONS = Chain(
    "decision",
    DECISION_FIELDS,
    True,
    _ANSWER_EDITS + " (or the door or rule)",
    DECISION_LATER_FIELDS,
)
APPROVALS = Chain(
    "approval", APPROVAL_FIELDS, True, _ANSWER_EDITS + " (or the door)", APPROVAL_LATER_FIELDS
)
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


_LOCK = f"SELECT pg_advisory_xact_lock({CHAIN_LOCK_KEY:d})"
_HEAD = "SELECT hash FROM {table} ORDER BY id DESC LIMIT 1"
# The head and the row's hash as the insert's own values, so that the head is read, the
# hash taken and the row inserted in one statement (Chain.hash's rule, in SQL).
_HEAD_OR_GENESIS = f"COALESCE(({_HEAD}), '{GENESIS}')"
_HASHED = f"encode(sha256(convert_to({_HEAD_OR_GENESIS} || %s, 'UTF8')), 'hex')"


def _locked_head(model: Any, using: str) -> str | None:
    """The newest ``hash`` of ``model``'s table, read once the chains are locked.

    One lock for every chain: an action that appends to two of them in one transaction (a
    vote that completes a request, a withdrawal) cannot take two locks in two orders.
    SQLite needs none: the portal opens every transaction with BEGIN IMMEDIATE, which takes
    the database's write lock up front, so appends are already serialised there.
    """
    connection = connections[using]
    head = _HEAD.format(table=connection.ops.quote_name(model._meta.db_table))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_LOCK)
        cursor.execute(head)
        found = cursor.fetchone()
    return found[0] if found is not None else None


def _sealed_in_sql(using: str) -> bool:
    """Whether the lock, the head's read and the insert can go in one query string: on
    PostgreSQL, where Django's cursors bind on the client (unless OPTIONS ask for
    server-side binding) and send it with the simple query protocol."""
    connection = connections[using]
    if using != DEFAULT_DB_ALIAS or connection.vendor != "postgresql":
        return False
    connection.ensure_connection()
    return issubclass(connection.connection.cursor_factory, psycopg.ClientCursor)


class Sealed:
    """Mixed into each chain's model: where ``sealing`` left the hashes to the database,
    the chains' lock goes just ahead of the insert, and the hashes come back with the
    row's id, in the insert's ``RETURNING``."""

    def _do_insert(
        self, manager: Any, using: str, fields: Any, returning_fields: Any, raw: bool
    ) -> Any:
        meta = self._meta  # type: ignore[attr-defined]
        by_sql = [
            field
            for field in (meta.get_field("prev_hash"), meta.get_field("hash"))
            if isinstance(getattr(self, field.attname), RawSQL)
        ]
        # The lock goes as the statement before the insert, in its round trip: queued
        # here, not earlier, so that nothing between (a savepoint rolled back, say, which
        # releases it) can leave the insert reading the head unlocked.
        if by_sql and not together_then(_LOCK):
            raise RuntimeError("a row sealed in SQL must be inserted inside sealing()")
        rows = super()._do_insert(  # type: ignore[misc]
            manager, using, fields, [*returning_fields, *by_sql], raw
        )
        if not by_sql:
            return rows
        own = len(returning_fields)
        for field, value in zip(by_sql, rows[0][own:], strict=True):
            setattr(self, field.attname, value)
        return [row[:own] for row in rows]


@contextmanager
def sealing(record: Any, *, chain: Chain, using: str | None = None) -> Iterator[None]:
    """Fill in the hashes of a row of ``chain`` and keep the chains locked until its
    transaction ends.

    The insert must happen inside the ``with`` block (``Decision.save``, ``Approval.save``
    and ``AuditEvent.save`` do so), and the model must mix in ``Sealed``.
    """
    model = type(record)
    db = using or router.db_for_write(model, instance=record)
    # No savepoint inside a caller's transaction: a failed insert fails it (or the
    # caller's own savepoint) whole, and the lock is held to its end either way.
    with transaction.atomic(using=db, savepoint=False), together():
        payload = ""
        if chain.payload:  # needs no head: hashed before the lock, which others wait for
            record.payload_hash = payload_hash(_fields_of(record.interrupt, PAYLOAD_FIELDS))
            payload = record.payload_hash
        # The race: two rows committed at the same moment would both read the same chain
        # head and both store it as prev_hash, forking the chain. The transaction-level
        # advisory lock is held from reading the head until this insert commits, so the
        # second row waits and then reads the first one's hash.
        if _sealed_in_sql(db):
            # The insert reads the head and takes the hash; Sealed sends the lock as the
            # statement before it, in its round trip (after the block's waiting writes,
            # which need no lock). Under READ COMMITTED each statement of the string takes
            # its own snapshot, so the insert reads the head once the lock is granted.
            # Under the lock there is left that one statement and the commit.
            text = chain.sealed_text(_fields_of(record, chain.columns), payload=payload)
            # Constants but for the model's own table, quoted; the text is bound.
            table = connections[db].ops.quote_name(model._meta.db_table)
            record.prev_hash = RawSQL(_HEAD_OR_GENESIS.format(table=table), ())  # noqa: S611
            record.hash = RawSQL(_HASHED.format(table=table), (text,))  # noqa: S611
        else:
            head = _locked_head(model, db)
            record.prev_hash = head if head is not None else GENESIS
            record.hash = chain.hash(
                _fields_of(record, chain.columns), prev_hash=record.prev_hash, payload=payload
            )
        yield
