"""The role groups and their permissions, and the demo users. Idempotent: safe to run on
every start."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from portal.accounts.roles import AUDITOR, LEAD, REVIEWER, ROLE_PERMISSIONS, SUPPORT

# username -> (role group or None for the admin, password). Demo only: `seed_demo`
# prints these so a newcomer can log in as each role.
DEMO_USERS = {
    "support": (SUPPORT, "support-demo-pass"),
    # Owns the conversations seed_demo starts, so `support` starts with a clean chat.
    "support2": (SUPPORT, "support2-demo-pass"),
    "reviewer": (REVIEWER, "reviewer-demo-pass"),
    "reviewer2": (REVIEWER, "reviewer2-demo-pass"),
    # A reviewer who may also take over a colleague's live claim (docs/roles.md).
    "lead": (LEAD, "lead-demo-pass"),
    "auditor": (AUDITOR, "auditor-demo-pass"),
    "admin": (None, "admin-demo-pass"),
}


@transaction.atomic
def ensure_roles() -> list[Group]:
    groups = []
    for name, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = list(
            Permission.objects.filter(content_type__app_label="portal", codename__in=codenames)
        )
        missing = set(codenames) - {p.codename for p in perms}
        if missing:
            raise RuntimeError(f"permissions {sorted(missing)} do not exist yet: run migrate first")
        group.permissions.set(perms)
        groups.append(group)
    return groups


@transaction.atomic
def ensure_demo_users() -> list[tuple[str, str, str | None]]:
    """Create the demo users that do not exist yet; return (user, role, password).

    A user that already exists is left exactly as it is: its name may belong to a real
    account, whose password, flags and groups are its owner's. Its password is reported
    only while it still is the demo one, else None."""
    ensure_roles()
    User = get_user_model()
    users = []
    for username, (role, password) in DEMO_USERS.items():
        user, created = User.objects.get_or_create(
            username=username, defaults={"is_staff": role is None, "is_superuser": role is None}
        )
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
            if role:
                user.groups.set([Group.objects.get(name=role)])
        known = created or user.check_password(password)
        users.append((username, role or "admin", password if known else None))
    return users
