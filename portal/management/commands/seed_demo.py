from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts.setup import ensure_demo_subscription, ensure_demo_threads, ensure_demo_users


class Command(BaseCommand):
    help = (
        "Create the roles and one demo user per role, print their credentials, and on "
        "first run start one example conversation per agent. Users that exist already are "
        "left as they are. Refused with DEBUG off unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--force",
            action="store_true",
            help="Run even with DEBUG off (a demo deployment that wants the demo users).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG and not options["force"]:
            # The demo passwords are in the source code: on a real deployment they would
            # be an open door, the admin's first of all.
            raise CommandError(
                "seed_demo refused: DEBUG is off, so this looks like a production "
                "deployment, and seed_demo creates users whose passwords are published "
                "(an admin among them). Create real users with `manage.py createsuperuser` "
                "and `manage.py setup_roles`; pass --force only if this really is a demo."
            )
        users = ensure_demo_users()
        self.stdout.write("\nDemo users (log in at /login/):")
        for username, role, password in users:
            shown = f"password: {password}" if password else "(existing user: left unchanged)"
            self.stdout.write(f"  {role:<9} {username:<10} {shown}")
        agents = ", ".join(settings.PORTAL_AGENTS)
        self.stdout.write(f"Agents: {agents}. Model: {settings.PORTAL_MODEL}.")
        if ensure_demo_subscription():
            self.stdout.write(
                "Notifications: every event is emailed to reviewers@example.com; the console "
                "email backend prints each one in the server's output (admin: Subscriptions)."
            )
        # Example conversations (support2's) waiting in the review queue.
        started = ensure_demo_threads()
        if started:
            self.stdout.write(
                f"Started example conversations ({', '.join(started)}): once the server "
                "runs they wait for approval in the review queue."
            )
        self.stdout.write(
            "\nTry it: log in as support, open the chat, send the refunds example; then log "
            "in as reviewer (another browser or a private window), open the queue row asked "
            "by support, approve it, and watch the chat finish.\n"
        )
