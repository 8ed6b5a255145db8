"""``manage.py verify_audit``: walk the decision hash chain and report the first broken link.

Exit status 0 and ``ok: N decisions verified`` when the chain is intact; otherwise a
non-zero status and ``first broken link: decision <id>: <reason>``. The head hash it prints
is worth recording somewhere else: a chain rewritten from some row to the end is consistent
with itself, and only a head recorded earlier shows it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.audit import verify_chain


class Command(BaseCommand):
    help = "Verify the decision hash chain and report the first broken link."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=2000, help="Rows read per query (default 2000)."
        )
        parser.add_argument("--database", default="default", help="Database alias.")

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify_chain(batch_size=options["batch_size"], using=options["database"])
        if report.broken is not None:
            raise CommandError(
                f"first broken link: {report.broken} ({report.count} decisions before it verified)",
                returncode=2,
            )
        self.stdout.write(f"ok: {report.count} decisions verified (head {report.head})")
