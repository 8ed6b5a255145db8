"""``manage.py run_worker``: execute queued agent runs until stopped (SIGTERM or Ctrl-C
finish the current run first)."""

from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from portal.worker import Worker


class Command(BaseCommand):
    help = "Claim and execute queued agent runs (start, resume, continue)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="exit when no run is left to claim")
        parser.add_argument("--id", dest="name", help="worker name recorded on its leases")
        parser.add_argument(
            "--poll", type=float, default=None, help="seconds between polls when idle"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # A worker is one long-lived process: keep its connection between runs instead of
        # reconnecting for each (the web processes keep Django's per-request default).
        # Health checks replace a connection the server dropped.
        for alias in connections:
            # One connection for the life of the process: a pool would only add a hand-over.
            connections[alias].settings_dict.get("OPTIONS", {}).pop("pool", None)
            connections[alias].settings_dict["CONN_MAX_AGE"] = settings.PORTAL_WORKER_CONN_MAX_AGE
            connections[alias].settings_dict["CONN_HEALTH_CHECKS"] = True
        worker = Worker(name=options["name"], poll=options["poll"])

        def stop(signum: int, frame: Any) -> None:
            self.stderr.write(f"worker {worker.name}: stopping after the current run")
            worker.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"worker {worker.name} ready", ending="\n")
        self.stdout.flush()
        done = worker.run_forever(once=options["once"])
        self.stdout.write(f"worker {worker.name} executed {done} runs")
