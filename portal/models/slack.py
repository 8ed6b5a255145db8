"""Slack: which Slack user is which portal user (``SlackLink``, made once by the user
from their profile), and the interaction signatures already taken (``SlackReplay``), so a
captured request cannot be played again inside Slack's timestamp window."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SlackLink(models.Model):
    """A portal user's Slack identity (workspace and user id), linked by the user."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link"
    )
    team_id = models.CharField(max_length=32)
    slack_user_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One portal user per Slack user: a second link is refused by the database.
            models.UniqueConstraint(
                fields=["team_id", "slack_user_id"], name="slack_link_one_per_slack_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.slack_user_id} -> {self.user_id}"


class SlackReplay(models.Model):
    """One interaction signature already taken; its primary key refuses a second."""

    signature = models.CharField(max_length=80, primary_key=True)
    seen_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.signature[:16]}... at {self.seen_at}"
