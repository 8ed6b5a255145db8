"""``manage.py create_api_token USER --name NAME --scope read [--scope ...] [--days N]``: a
new JSON API token for USER.

The token is printed as the last line of output and never again: only its hash is kept.
A token with the ``request`` scope also gets a webhook secret, printed the line before.
It expires after ``--days`` (90 by default; 0 for never) and is revoked when its user is
deactivated or changes password.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from portal.accounts.tokens import ALL_SCOPES, api_token_create


class Command(BaseCommand):
    help = "Create a JSON API token for a user and print it (shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", required=True, help="A label to recognise the token by.")
        parser.add_argument(
            "--scope",
            dest="scopes",
            action="append",
            choices=ALL_SCOPES,
            required=True,
            help="What the token may do; repeat for several: read (GET endpoints), "
            "start (start threads), decide (resume threads), request (raise approval "
            "requests as an external agent).",
        )
        parser.add_argument(
            "--days",
            type=int,
            default=90,
            help="Days until the token expires (default 90; 0: it never expires).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist:
            raise CommandError(f"no user {options['username']!r}; create it first") from None
        if not user.is_active:
            raise CommandError(f"user {options['username']!r} is deactivated")
        days = options["days"]
        if days < 0:
            raise CommandError(f"--days must be 0 (never expires) or more, got {days}")
        expires_at = timezone.now() + timedelta(days=days) if days else None
        row, token = api_token_create(
            user=user, name=options["name"], scopes=options["scopes"], expires_at=expires_at
        )
        until = f"until {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "with no expiry"
        self.stdout.write(
            f"Created API token {row.pk} {row.name!r} for {user.get_username()} with scopes "
            f"{', '.join(row.scopes)}, valid {until}. Store it now; it cannot be shown "
            "again. Send it as: Authorization: Bearer <token>"
        )
        if row.webhook_secret:
            self.stdout.write(
                "Webhook secret (answers to this token's requests are signed with it; "
                f"shown only now): {row.webhook_secret}"
            )
        self.stdout.write(token)
