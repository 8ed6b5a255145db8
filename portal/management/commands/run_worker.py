"""``manage.py run_worker``: execute queued agent runs until stopped (SIGTERM or Ctrl-C
finish the current run first). Exits with status 75 when the run it was executing may be
another worker's now (its lease was taken, or could not be renewed), so none of that run's
calls still running can act (see ``portal.runs.worker``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal import loops
from portal.reviews.expiry import interrupts_expire
from portal.reviews.rule_decisions import rules_on_pause
from portal.runs.worker import Worker


class Command(BaseCommand):
    help = "Claim and execute queued agent runs (start, resume, continue)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="exit when no run is left to claim")
        parser.add_argument(
            "--id",
            dest="name",
            help="worker name, in logs, heartbeats and (with a token of its own) its leases",
        )
        parser.add_argument(
            "--poll", type=float, default=None, help="seconds between polls when idle"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # Overdue requests are declined between runs: no cron job for expire_interrupts.
            # The decision rules act on each new request once its run has paused.
            worker = Worker(
                name=options["name"],
                poll=options["poll"],
                exit_when_fenced=True,
                expire=interrupts_expire,
                arrived=rules_on_pause,
            )
        except ValueError as exc:
            raise CommandError(f"--id: {exc}") from None
        loops.keep_connections()  # once the arguments are known good: nothing refused changed
        done = loops.run_as_command(
            self, worker, kind="worker", once=options["once"], finishing="the current run"
        )
        self.stdout.write(f"worker {worker.name} executed {done} runs")
