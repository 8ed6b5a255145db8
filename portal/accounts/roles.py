"""Who may do what: one permission and one ``can_...`` function per capability.

Roles are Django groups holding permissions; code asks these functions, never group names
and never ``is_staff`` (it only opens the admin's door). Superusers hold every permission.
The capabilities and the groups holding them: docs/architecture.md, "accounts". Whatever
the permissions, the policies (``portal.models.policies``) still refuse a decider who wrote
into the thread.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, Group, Permission
from django.contrib.auth.models import User as AuthUser
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Q, QuerySet

SUPPORT, REVIEWER, AUDITOR, AGENT = "support", "reviewer", "auditor", "agent"
LEAD = "lead reviewer"  # a reviewer who may also take over a colleague's live claim

# What the history, its exports, the API and the audit trail call the portal itself (an
# expiry, a cancellation nobody made): no user may take the name, in any case.
SYSTEM = "system"

START_THREAD = "portal.start_thread"
DECIDE = "portal.decide_interrupt"
CLAIM = "portal.claim_interrupt"
TAKE_OVER_CLAIM = "portal.take_over_claim"
VIEW_ALL = "portal.view_all_threads"
VIEW_HISTORY = "portal.view_history"
EXPORT_HISTORY = "portal.export_history"
VIEW_METRICS = "portal.view_metrics"
RETRY_THREAD = "portal.retry_thread"
CANCEL_THREAD = "portal.cancel_thread"
VIEW_AUDIT_TRAIL = "portal.view_audit_trail"
RAISE_REQUEST = "portal.raise_request"
MANAGE_RULES = "portal.manage_rules"

# Group name -> permission codenames (app "portal"), read by setup_roles (ensure_roles).
ROLE_PERMISSIONS: dict[str, list[str]] = {
    SUPPORT: ["start_thread"],
    REVIEWER: [
        "decide_interrupt",
        "claim_interrupt",
        "view_all_threads",
        "view_history",
        "export_history",
        "view_metrics",
    ],
    LEAD: [
        "decide_interrupt",
        "claim_interrupt",
        "take_over_claim",  # audited: each takeover names whom it was taken from
        "view_all_threads",
        "view_history",
        "export_history",
        "view_metrics",
    ],
    AUDITOR: [
        "view_all_threads",
        "view_history",
        "export_history",
        "view_metrics",
        "view_audit_trail",
    ],
    AGENT: ["raise_request"],
}

User = AuthUser | AnonymousUser


# A user's own permissions and their groups', as "app_label.codename" parts. Written out:
# Django's two ORM queries (or their union) cost more CPU to compose than to run, once
# for every API request.
_PERMISSIONS_SQL = """
SELECT ct.app_label, p.codename
FROM {permission} p JOIN {content_type} ct ON ct.id = p.content_type_id
WHERE p.id IN (
  SELECT up.permission_id FROM {user_permissions} up WHERE up.user_id = %s
  UNION
  SELECT gp.permission_id FROM {group_permissions} gp
  JOIN {user_groups} ug ON ug.group_id = gp.group_id
  WHERE ug.user_id = %s
)
"""


# The same permissions as one column of another query (the API's token lookup), joined by
# spaces: "app_label.codename" never holds one. {user_id} is the outer query's column.
_PERMISSIONS_COLUMN_SQL = """
(SELECT {aggregate}
 FROM {permission} p JOIN {content_type} ct ON ct.id = p.content_type_id
 WHERE p.id IN (
   SELECT up.permission_id FROM {user_permissions} up WHERE up.user_id = {user_id}
   UNION
   SELECT gp.permission_id FROM {group_permissions} gp
   JOIN {user_groups} ug ON ug.group_id = gp.group_id
   WHERE ug.user_id = {user_id}
 ))
"""


def _tables() -> dict[str, str]:
    model = get_user_model()
    return {
        "permission": Permission._meta.db_table,
        "content_type": ContentType._meta.db_table,
        "user_permissions": model.user_permissions.through._meta.db_table,
        "group_permissions": Group.permissions.through._meta.db_table,
        "user_groups": model.groups.through._meta.db_table,
    }


def permissions_column(user_id_column: str) -> str:
    """A column of another query (its SQL): the permissions of the user whose id is in
    ``user_id_column`` (a column of the outer query), for ``permissions_known``. Read in
    the query that finds the user, it saves the request the permission query of its own.
    Only table and column names from the code's own models: no input reaches it."""
    name = "ct.app_label || '.' || p.codename"
    aggregate = (
        f"string_agg({name}, ' ')"
        if connection.vendor == "postgresql"
        else f"group_concat({name}, ' ')"
    )
    return _PERMISSIONS_COLUMN_SQL.format(aggregate=aggregate, user_id=user_id_column, **_tables())


def permissions_known(user: Any, names: str | None) -> None:
    """Give ``user`` the permissions a ``permissions_column`` read, as
    ``PermissionsBackend`` would have loaded them (superusers and inactive users are left
    to the backend: it answers them without a query)."""
    if user.is_active and not user.is_superuser:
        user._perm_cache = set((names or "").split())


class PermissionsBackend(ModelBackend):
    """Django's ``ModelBackend``, reading a user's own and their groups' permissions in one
    written-out query instead of two composed ones. Like it, it keeps them on the user
    object, which is loaded for each request: a permission taken away holds from the next
    request on."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if user_obj.is_superuser or hasattr(user_obj, "_perm_cache"):
            return super().get_all_permissions(user_obj, obj)
        query = _PERMISSIONS_SQL.format(**_tables())
        with connection.cursor() as cursor:
            cursor.execute(query, [user_obj.pk, user_obj.pk])
            user_obj._perm_cache = {f"{app}.{codename}" for app, codename in cursor.fetchall()}
        return user_obj._perm_cache  # type: ignore[no-any-return]


def _has(user: User, perm: str) -> bool:
    # has_perm is already False for an inactive user; the is_authenticated check keeps an
    # anonymous user from reaching a backend that might grant anonymous permissions.
    return bool(user.is_authenticated and user.has_perm(perm))


def can_start(user: User) -> bool:
    return _has(user, START_THREAD)


def can_decide(user: User) -> bool:
    return _has(user, DECIDE)


def can_claim(user: User) -> bool:
    return _has(user, CLAIM)


def can_take_over_claims(user: User) -> bool:
    return _has(user, TAKE_OVER_CLAIM)


def can_view_all(user: User) -> bool:
    return _has(user, VIEW_ALL)


def can_view_history(user: User) -> bool:
    return _has(user, VIEW_HISTORY)


def can_export_history(user: User) -> bool:
    return _has(user, EXPORT_HISTORY)


def can_view_metrics(user: User) -> bool:
    return _has(user, VIEW_METRICS)


def can_view_audit_trail(user: User) -> bool:
    return _has(user, VIEW_AUDIT_TRAIL)


def can_retry_threads(user: User) -> bool:
    """Retry any failed thread (its owner may retry their own: ``may_retry``)."""
    return _has(user, RETRY_THREAD)


def can_cancel_threads(user: User) -> bool:
    """Cancel any thread (its owner may cancel their own: ``may_cancel``)."""
    return _has(user, CANCEL_THREAD)


def _owns(user: User, thread: Any) -> bool:
    # An owner acts on their thread while they may still write into threads at all.
    return bool(user.is_authenticated and thread.owner_id == user.pk and can_start(user))


def may_retry(user: User, thread: Any) -> bool:
    """Whether ``user`` may retry ``thread``: its owner, or whoever may retry any thread."""
    return _owns(user, thread) or can_retry_threads(user)


def may_cancel(user: User, thread: Any) -> bool:
    """Whether ``user`` may cancel ``thread``: its owner, or whoever may cancel any thread."""
    return _owns(user, thread) or can_cancel_threads(user)


def can_raise_requests(user: User) -> bool:
    return _has(user, RAISE_REQUEST)


def can_manage_rules(user: User) -> bool:
    """Write, simulate, activate and switch off decision rules (``portal.reviews.rules``)."""
    return _has(user, MANAGE_RULES)


def deciders() -> QuerySet[AuthUser]:
    """Users who may decide (``can_decide``), as a query: through a group, directly, or
    as a superuser."""
    app_label, _, codename = DECIDE.partition(".")
    perm = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    granted = Q(groups__permissions__in=perm) | Q(user_permissions__in=perm)
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(granted | Q(is_superuser=True))
        .distinct()
    )


def role_names(user: User) -> list[str]:
    if not user.is_authenticated:
        return []
    names = sorted(user.groups.values_list("name", flat=True))
    if user.is_superuser:
        names.append("admin")
    return names


def _is_the_systems_name(username: Any) -> bool:
    return str(username).casefold() == SYSTEM


def refuse_the_systems_name(username: Any) -> None:
    """Validator for usernames: a person named ``system`` would read as the portal in the
    history and the audit trail, and their decisions as expiries."""
    if _is_the_systems_name(username):
        raise ValidationError(
            f"The username {username!r} is reserved: the history and the audit trail call "
            f"the portal's own actions (expiries, automatic cancellations) {SYSTEM!r}. "
            "Choose another."
        )


def guard_usernames() -> None:
    """Check every new or renamed user's name with ``refuse_the_systems_name``: forms (the
    admin, ``createsuperuser``) through the field's validators, and any other save (a
    script, ``create_user``) when it is saved. Fixtures (raw saves) are loaded as they are."""
    from django.db.models.signals import pre_save

    model = get_user_model()
    field: Any = model._meta.get_field(model.USERNAME_FIELD)
    if refuse_the_systems_name not in field.validators:
        field.validators.append(refuse_the_systems_name)

    def on_save(
        sender: Any, instance: Any, raw: bool = False, update_fields: Any = None, **kwargs: Any
    ) -> None:
        name = instance.get_username()
        if raw or not _is_the_systems_name(name):
            return  # (and no query for the stored name on any other save)
        if not instance._state.adding:
            if update_fields is not None and model.USERNAME_FIELD not in update_fields:
                return
            # A user who had the name before it was reserved keeps it until renamed.
            stored = model._default_manager.filter(pk=instance.pk)
            if stored.values_list(model.USERNAME_FIELD, flat=True).first() == name:
                return
        refuse_the_systems_name(name)

    pre_save.connect(on_save, sender=model, weak=False, dispatch_uid="portal.reserved_username")
