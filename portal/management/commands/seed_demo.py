from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts.groups import ensure_demo_users
from portal.models import Rule, Subscription, Thread
from portal.notify import outbox
from portal.notify.notifier import Notifier
from portal.reviews.rule_simulation import rule_simulate
from portal.reviews.rules import rule_activate, rule_write
from portal.reviews.threads import thread_start
from portal.runs.registry import agents_info
from portal.runs.worker import Worker


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
        parser.add_argument(
            "--settle",
            action="store_true",
            help="Take the example conversations to their requests and send their "
            "notifications now, so the server starts quiet (make run).",
        )
        parser.add_argument(
            "--url", default="", help="Where the demo will be served, printed last."
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
        agents = ", ".join(settings.PORTAL_AGENTS)
        self.stdout.write(f"Agents: {agents}. Model: {settings.PORTAL_MODEL}.")
        if ensure_demo_subscription():
            self.stdout.write(
                "Notifications: every event is emailed to reviewers@example.com; the console "
                "email backend prints each one in the server's output (admin: Subscriptions)."
            )
        if ensure_demo_rule():
            self.stdout.write(
                f"Rules: {DEMO_RULE!r}, written by reviewer, simulated and activated by "
                "reviewer2 (both may manage rules): open Rules as either."
            )
        # Example conversations (support2's) waiting in the review queue.
        started = ensure_demo_threads()
        if started:
            self.stdout.write(
                f"Started example conversations ({', '.join(started)}): once the server "
                "runs they wait for approval in the review queue."
            )
        if options["settle"]:
            # What the embedded worker and notifier would print as the server starts.
            Worker(name="seed_demo").run_forever(once=True)
            Notifier(name="seed_demo").run_forever(once=True)
        self.stdout.write(
            "\nTry it: log in as support, open the chat, send the refunds example; then log "
            "in as reviewer (another browser or a private window), open the queue row asked "
            "by support, approve it, and watch the chat finish."
        )
        # Last, where a newcomer looks first: who to log in as, and where.
        self.stdout.write(f"\nDemo users (log in at {options['url'].rstrip('/')}/login/):")
        for username, role, password in users:
            shown = f"password: {password}" if password else "(existing user: left unchanged)"
            self.stdout.write(f"  {role:<13} {username:<10} {shown}")
        if options["url"]:
            self.stdout.write(f"\nThe demo: {options['url']}\n")


DEMO_SUBSCRIPTION = "Demo: every event, by email"
DEMO_RULE = "Refunds under $10 on delivered orders are approved"
# The refunds agent asks from inside its tool, with the order's status beside the amount
# (agents/examples/refunds.py): the document's ``payload`` is that request.
DEMO_RULE_CONDITIONS = {
    "type": "object",
    "properties": {
        "payload": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
                "order_status": {"const": "delivered"},
            },
            "required": ["amount", "order_status"],
        }
    },
    "required": ["payload"],
}


def ensure_demo_rule(*, writer: str = "reviewer", checker: str = "reviewer2") -> bool:
    """Give the two demo reviewers ``manage_rules`` and, on first run, have ``writer``
    write the demo's rule and ``checker`` simulate and activate it (a rule is never
    activated by its writer). An existing rule of that name is left alone. True when
    it was written."""
    users = get_user_model().objects
    people = list(users.filter(username__in=[writer, checker], groups__name="reviewer"))
    if len(people) != 2 or Rule.objects.filter(name=DEMO_RULE).exists():
        return False
    permission = Permission.objects.get(content_type__app_label="portal", codename="manage_rules")
    for person in people:
        person.user_permissions.add(permission)
    by = {user.username: user for user in users.filter(pk__in=[p.pk for p in people])}
    version = rule_write(
        by=by[writer],
        name=DEMO_RULE,
        agent="refunds",
        reason="tool_approval",
        tool="issue_refund",
        conditions=DEMO_RULE_CONDITIONS,
        action="approve",
        cap_per_hour=30,
        cap_amount_field="/payload/amount",
        cap_amount_per_day="200",
    )
    rule_simulate(version, by=by[checker], days=30)
    rule_activate(version, by=by[checker])
    return True


def ensure_demo_subscription() -> bool:
    """Subscribe the demo to every event by email, so ``make run`` shows notifications
    (the console email backend prints them in the server's output). Created once; an
    existing one, perhaps edited in the admin, is left alone. True when it was created."""
    if Subscription.objects.filter(name=DEMO_SUBSCRIPTION).exists():
        return False
    outbox.subscription_save(
        subscription=Subscription(
            name=DEMO_SUBSCRIPTION,
            channel=Subscription.Channel.EMAIL,
            target="reviewers@example.com",
        ),
        user=None,
    )
    return True


def ensure_demo_threads(*, username: str = "support2") -> list[str]:
    """On first run (the demo user has no threads yet), start one conversation per agent
    that has a ``DEMO`` message (see ``portal.runs.registry``). Only their runs are queued here;
    the worker (embedded in ``make run``) takes them to their approval requests, so the
    queue is not empty when a newcomer first looks. They belong to ``support2``, not to
    ``support`` whom the README has a newcomer play, and their messages differ from the
    chat's examples: the newcomer's own request is the only one of its kind in the queue.
    Returns the agents started."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None or Thread.objects.filter(owner=user).exists():
        return []
    started = []
    for info in agents_info():
        if not info.demo:
            continue
        thread_start(
            agent=info.name,
            input={"messages": [{"role": "user", "content": info.demo}]},
            user=user,
        )
        started.append(info.name)
    return started
