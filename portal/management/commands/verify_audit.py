"""``manage.py verify_audit``: walk the decision hash chain, then the approval chain (each
reviewer's vote on a request that needs several), and report the first broken link.

Exit status 0 and ``ok: N decisions verified`` when the chain is intact; otherwise a
non-zero status and ``first broken link: decision <id>: <reason>``. The head hash it prints
is worth recording somewhere else: a chain that lost its newest rows, or was rewritten
from some row to the end, is consistent with itself, and only a head recorded earlier
shows it. Pass that head back with ``--expect-head HASH``: the check then also fails
unless a decision still has that hash; ``--expect-approval-head HASH`` does the same for
the approvals.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.audit import verify_approvals, verify_chain


class Command(BaseCommand):
    help = "Verify the decision hash chain and report the first broken link."

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

    def handle(self, *args: Any, **options: Any) -> None:
        expect_head = _head(options, "expect_head", "--expect-head")
        expect_approvals = _head(options, "expect_approval_head", "--expect-approval-head")
        for verify, noun, expected in (
            (verify_chain, "decisions", expect_head),
            (verify_approvals, "approvals", expect_approvals),
        ):
            report = verify(
                batch_size=options["batch_size"], using=options["database"], expect_head=expected
            )
            if report.broken is not None:
                raise CommandError(
                    f"first broken link: {report.broken} ({report.count} {noun} before it "
                    "verified)",
                    returncode=2,
                )
            self.stdout.write(f"ok: {report.count} {noun} verified (head {report.head})")


def _head(options: dict[str, Any], key: str, flag: str) -> str | None:
    value = options[key]
    if value is None:
        return None
    value = value.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise CommandError(
            f"{flag} must be a head hash as verify_audit prints it (64 hex digits), "
            f"got {options[key]!r}"
        )
    return str(value)
