from django.conf import settings
from django.core.management.base import BaseCommand

from portal.setup import ensure_demo_threads, ensure_demo_users


class Command(BaseCommand):
    help = (
        "Create the roles and one demo user per role, print their credentials, and on "
        "first run start one example conversation per agent."
    )

    def handle(self, *args: object, **options: object) -> None:
        users = ensure_demo_users()
        self.stdout.write("\nDemo users (log in at /login/):")
        for username, role, password in users:
            self.stdout.write(f"  {role:<9} {username:<10} password: {password}")
        agents = ", ".join(settings.PORTAL_AGENTS)
        self.stdout.write(f"Agents: {agents}. Model: {settings.PORTAL_MODEL}.")
        # live portal (issue 6): example conversations waiting in the review queue.
        started = ensure_demo_threads()
        if started:
            self.stdout.write(
                f"Started example conversations ({', '.join(started)}): once the server "
                "runs they wait for approval in the review queue."
            )
        self.stdout.write(
            "\nTry it: log in as support, open the chat, send the refunds example; then log "
            "in as reviewer (another browser or a private window), approve it in the queue, "
            "and watch the chat finish.\n"
        )
