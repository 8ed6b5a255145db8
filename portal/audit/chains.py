"""Verifying the hash chains (``portal.models.chain`` seals them): walk a table's rows in
``id`` order and report the first broken link, an edited row, a deleted one, or a head
recorded earlier that is gone. ``manage.py verify_audit`` runs it over all three chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

from portal.models import Decision, RuleVersion
from portal.models.chain import DECISIONS, GENESIS, PAYLOAD_FIELDS, Chain, payload_hash


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
    columns = ("id", *chain.columns, "prev_hash", "hash", *payload_columns)
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


def rule_version_problems(using: str = "default", *, limit: int = 20) -> list[str]:
    """Rule versions whose content no longer matches the hash sealed when they were
    written, and decisions by a rule whose recorded hash is not their version's: each
    names the row (the first ``limit`` of each kind). Empty when all agree."""
    problems = []
    for version in RuleVersion.objects.using(using).select_related("rule").order_by("id"):
        if version.content_hash() != version.hash:
            problems.append(f"{version} (id {version.pk}) no longer matches its hash")
            if len(problems) >= limit:
                break
    mismatched = (
        Decision.objects.using(using)
        .filter(rule_version__isnull=False)
        .exclude(rule_hash=models.F("rule_version__hash"))
        .values_list("pk", flat=True)[:limit]
    )
    problems += [f"decision {pk} names a rule hash its version does not have" for pk in mismatched]
    return problems
