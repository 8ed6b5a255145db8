from django.core.management.base import BaseCommand

from portal.accounts.groups import ensure_roles


class Command(BaseCommand):
    help = "Create the support, reviewer and auditor groups with their permissions."

    def handle(self, *args: object, **options: object) -> None:
        for group in ensure_roles():
            perms = ", ".join(sorted(group.permissions.values_list("codename", flat=True)))
            self.stdout.write(f"{group.name}: {perms}")
