"""API tokens: ``ApiToken`` and the password fingerprint that refuses a token after its
user's password changed. Revoking them is ``portal.accounts.tokens``'."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac


def password_fingerprint(user: Any) -> str:
    """A keyed hash of the user's password hash: it changes whenever the password does
    (however it was changed), and reveals nothing about it."""
    return salted_hmac(
        "portal.ApiToken.password", str(user.password or ""), algorithm="sha256"
    ).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored: the token itself is
    shown once, by ``manage.py create_api_token``, and cannot be recovered.

    A token carries scopes (what it may do), may expire, and is revoked for good when its
    user is deactivated or changes password. ``password_fingerprint`` also refuses it
    after a password change that bypassed ``save()`` (a queryset update, a raw SQL fix).
    """

    class Scope(models.TextChoices):
        READ = "read", "read: list and read requests and threads"
        START = "start", "start: start, retry and cancel threads; withdraw their requests"
        DECIDE = "decide", "decide: claim, release and answer requests"
        REQUEST = "request", "request: raise approval requests as an external agent"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list, help_text="Any of: read, start, decide, request.")
    # The key the portal signs this token's external requests' webhooks with (HMAC, so it
    # is kept as it is); made with a token carrying the "request" scope, shown once.
    webhook_secret = models.CharField(max_length=64, blank=True, editable=False, default="")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never.")
    password_fingerprint = models.CharField(max_length=64, editable=False, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # To within a minute (portal.accounts.tokens.TOKEN_LAST_USED_RESOLUTION): a token used
    # now shows a time at most that old.
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name or 'token'} ({self.user})"

    def refusal(self, now: datetime | None = None) -> str | None:
        """Why this token may not be used now (None when it may)."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            why = f": {self.revoked_reason}" if self.revoked_reason else ""
            return f"This token was revoked at {self.revoked_at:%Y-%m-%d %H:%M:%S} UTC{why}."
        if not self.user.is_active:
            return "This token's user is deactivated."
        if not constant_time_compare(self.password_fingerprint, password_fingerprint(self.user)):
            return "This token was revoked: its user's password changed after it was created."
        if self.expires_at is not None and self.expires_at <= now:
            return (
                f"This token expired at {self.expires_at:%Y-%m-%d %H:%M:%S} UTC; "
                "create a new one with manage.py create_api_token."
            )
        return None
