"""``manage.py run_notifier``: send notifications, reminders and escalations until
stopped (SIGTERM or Ctrl-C finish the current round first)."""

from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from portal.notifier import Notifier


class Command(BaseCommand):
    help = "Deliver the outbox's notifications (email, webhooks), reminders and escalations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="exit when a round finds nothing to do"
        )
        parser.add_argument("--id", dest="name", help="notifier name, for the logs")
        parser.add_argument("--poll", type=float, default=1.0, help="seconds between rounds")

    def handle(self, *args: Any, **options: Any) -> None:
        # One long-lived process: keep its connection between rounds (as run_worker does).
        for alias in connections:
            connections[alias].settings_dict["CONN_MAX_AGE"] = settings.PORTAL_WORKER_CONN_MAX_AGE
            connections[alias].settings_dict["CONN_HEALTH_CHECKS"] = True
        notifier = Notifier(name=options["name"], poll=options["poll"])

        def stop(signum: int, frame: Any) -> None:
            self.stderr.write(f"notifier {notifier.name}: stopping after this round")
            notifier.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"notifier {notifier.name} ready", ending="\n")
        self.stdout.flush()
        done = notifier.run_forever(once=options["once"])
        self.stdout.write(f"notifier {notifier.name} handled {done} items")
