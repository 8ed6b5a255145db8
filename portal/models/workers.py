"""Heartbeats of the long-running loops (run workers and notifiers)."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time each running loop (a run worker or a notifier) went round (health and
    metrics read it).

    Not a record: a loop deletes its row when it stops in order; a killed one's row stays
    behind, ageing, which is what a health check should see."""

    class Kind(models.TextChoices):
        WORKER = "worker", "run worker"
        NOTIFIER = "notifier", "notifier"

    name = models.CharField(max_length=128, primary_key=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.WORKER)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.beat_at:%Y-%m-%d %H:%M:%S}"
