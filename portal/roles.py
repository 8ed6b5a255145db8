"""Who may do what. Roles are Django groups; code checks permissions, never group names,
so an admin can grant a single permission without inventing a role."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.models import User as AuthUser

SUPPORT, REVIEWER, AUDITOR = "support", "reviewer", "auditor"

START_THREAD = "portal.start_thread"
DECIDE = "portal.decide_interrupt"
VIEW_ALL = "portal.view_all_threads"
VIEW_HISTORY = "portal.view_history"

# Group name -> permission codenames (app "portal"). setup_roles and the data migration
# both read this, so the two can never disagree.
ROLE_PERMISSIONS: dict[str, list[str]] = {
    SUPPORT: ["start_thread"],
    REVIEWER: ["decide_interrupt", "view_all_threads", "view_history"],
    AUDITOR: ["view_all_threads", "view_history"],
}

User = AuthUser | AnonymousUser


def can_start(user: User) -> bool:
    return user.is_authenticated and user.has_perm(START_THREAD)


def can_decide(user: User) -> bool:
    return user.is_authenticated and user.has_perm(DECIDE)


def can_view_all(user: User) -> bool:
    return user.is_authenticated and user.has_perm(VIEW_ALL)


def can_view_history(user: User) -> bool:
    return user.is_authenticated and user.has_perm(VIEW_HISTORY)


def role_names(user: User) -> list[str]:
    if not user.is_authenticated:
        return []
    names = sorted(user.groups.values_list("name", flat=True))
    if user.is_staff:
        names.append("admin")
    return names
