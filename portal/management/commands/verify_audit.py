"""``manage.py verify_audit``: walk the decisions' hash chain, the audit trail's and the
approvals', and report the first broken link of each (exit status 2), or ``ok: N ...
verified (head H)`` per chain. Record the heads elsewhere and pass them back with
``--expect-head``, ``--expect-event-head`` and ``--expect-approval-head``: only a head
recorded earlier shows a chain that lost its newest rows (docs/architecture.md, "audit").
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.audit.chains import rule_version_problems, verify_chain
from portal.models import Approval, AuditEvent, Decision
from portal.models.chain import APPROVALS, EVENTS


class Command(BaseCommand):
    help = (
        "Verify the hash chains of decisions, audit events and approvals, and report the "
        "first broken link of each."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=2000, help="Rows read per query (default 2000)."
        )
        parser.add_argument("--database", default="default", help="Database alias.")
        parser.add_argument(
            "--expect-head",
            metavar="HASH",
            help="A head hash printed by an earlier run: fail if no decision has it now.",
        )
        parser.add_argument(
            "--expect-approval-head",
            metavar="HASH",
            help="The approvals' head printed by an earlier run: fail if no approval has it.",
        )
        parser.add_argument(
            "--expect-event-head",
            metavar="HASH",
            help="An audit trail head printed by an earlier run: fail if no event has it now.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        expect_head = _head_option(options, "expect_head")
        expect_approval_head = _head_option(options, "expect_approval_head")
        expect_event_head = _head_option(options, "expect_event_head")
        batch, db = options["batch_size"], options["database"]
        report = verify_chain(Decision.objects.using(db), batch_size=batch, expect_head=expect_head)
        votes = verify_chain(
            Approval.objects.using(db),
            batch_size=batch,
            expect_head=expect_approval_head,
            chain=APPROVALS,
        )
        events = verify_chain(
            AuditEvent.objects.using(db),
            batch_size=batch,
            expect_head=expect_event_head,
            chain=EVENTS,
        )
        problems = []
        if report.broken is not None:
            problems.append(
                f"first broken link: {report.broken} ({report.count} decisions before it verified)"
            )
        if votes.broken is not None:
            problems.append(
                f"first broken link: {votes.broken} ({votes.count} approvals before it verified)"
            )
        if events.broken is not None:
            problems.append(
                f"first broken link in the audit trail: {events.broken} ({events.count} "
                "events before it verified)"
            )
        problems += rule_version_problems(db)
        if problems:
            raise CommandError("; ".join(problems), returncode=2)
        self.stdout.write(f"ok: {report.count} decisions verified (head {report.head})")
        self.stdout.write(f"ok: {events.count} audit events verified (head {events.head})")
        self.stdout.write(f"ok: {votes.count} approvals verified (head {votes.head})")


def _head_option(options: dict[str, Any], name: str) -> str | None:
    value = options[name]
    if value is None:
        return None
    value = str(value).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        flag = "--" + name.replace("_", "-")
        raise CommandError(
            f"{flag} must be a head hash as verify_audit prints it (64 hex digits), "
            f"got {options[name]!r}"
        )
    return value
