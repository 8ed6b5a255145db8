"""``manage.py verify_audit``: walk the decision hash chain and report the first broken link.

Exit status 0 and ``ok: N decisions verified`` when the chain is intact; otherwise a
non-zero status and ``first broken link: decision <id>: <reason>``. The head hash it prints
is worth recording somewhere else: a chain that lost its newest rows, or was rewritten
from some row to the end, is consistent with itself, and only a head recorded earlier
shows it. Pass that head back with ``--expect-head HASH``: the check then also fails
unless a decision still has that hash.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.audit import verify_chain
from portal.models import Decision


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

    def handle(self, *args: Any, **options: Any) -> None:
        expect_head = options["expect_head"]
        if expect_head is not None:
            expect_head = expect_head.strip().lower()
            if not re.fullmatch(r"[0-9a-f]{64}", expect_head):
                raise CommandError(
                    "--expect-head must be a head hash as verify_audit prints it "
                    f"(64 hex digits), got {options['expect_head']!r}"
                )
        report = verify_chain(
            Decision.objects.using(options["database"]),
            batch_size=options["batch_size"],
            expect_head=expect_head,
        )
        if report.broken is not None:
            raise CommandError(
                f"first broken link: {report.broken} ({report.count} decisions before it verified)",
                returncode=2,
            )
        self.stdout.write(f"ok: {report.count} decisions verified (head {report.head})")
