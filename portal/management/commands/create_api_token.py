"""``manage.py create_api_token USER [--name NAME]``: a new JSON API token for USER.

The token is printed as the last line of output and never again: only its hash is kept.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.api import api_token_create


class Command(BaseCommand):
    help = "Create a JSON API token for a user and print it (shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist:
            raise CommandError(f"no user {options['username']!r}; create it first") from None
        row, token = api_token_create(user=user, name=options["name"])
        self.stdout.write(
            f"Created API token {row.pk} for {user.get_username()}. Store it now; "
            "it cannot be shown again. Send it as: Authorization: Bearer <token>"
        )
        self.stdout.write(token)
