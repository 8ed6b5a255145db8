"""``manage.py run_notifier``: send notifications, reminders and escalations until
stopped (SIGTERM or Ctrl-C finish the current round first)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal import loops
from portal.notify.notifier import Notifier


class Command(BaseCommand):
    help = "Deliver the outbox's notifications (email, webhooks), reminders and escalations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="exit when a round finds nothing to do"
        )
        parser.add_argument("--id", dest="name", help="notifier name, for the logs")
        parser.add_argument("--poll", type=float, default=1.0, help="seconds between rounds")

    def handle(self, *args: Any, **options: Any) -> None:
        loops.keep_connections()
        notifier = Notifier(name=options["name"], poll=options["poll"])
        done = loops.run_as_command(
            self, notifier, kind="notifier", once=options["once"], finishing="this round"
        )
        self.stdout.write(f"notifier {notifier.name} handled {done} items")
