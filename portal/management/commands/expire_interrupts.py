"""``manage.py expire_interrupts``: resolve overdue requests as expired (fail closed).

Each pending interrupt whose ``expires_at`` has passed gets an ``expired`` decision and its
thread resumes with a decline. Safe to run from cron or alongside the worker: rows being
decided at that moment are skipped and picked up next time if still pending.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from portal.reviews.expiry import interrupts_expire


class Command(BaseCommand):
    help = "Resolve pending requests past their expires_at as expired; resume with a decline."

    def handle(self, *args: Any, **options: Any) -> None:
        decisions = interrupts_expire()
        for decision in decisions:
            self.stdout.write(f"expired {decision.interrupt_id} (thread {decision.thread_id})")
        self.stdout.write(f"{len(decisions)} request(s) expired.")
