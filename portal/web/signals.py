"""Sockets follow the session: after anything that can take away a user's right to an open
socket, their sockets are told to check again (``broadcast.publish_user_revoke``).

More in docs/architecture.md (`web/signals.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models import Q
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from django.dispatch import receiver

from portal.models import ApiToken
from portal.notify import broadcast

User = get_user_model()


def _recheck(user_ids: Iterable[Any], *, session_key: str | None = None) -> None:
    ids = [pk for pk in user_ids if pk is not None]
    if ids:
        # After commit: a socket that checks before the change is visible would stay open.
        transaction.on_commit(
            partial(broadcast.publish_user_revoke, ids, session_key=session_key), robust=True
        )


def _members(groups: Q) -> list[Any]:
    return list(
        User.objects.filter(groups__in=Group.objects.filter(groups))
        .values_list("pk", flat=True)
        .distinct()
    )


def _holders(permission: Permission) -> list[Any]:
    direct = Q(user_permissions=permission) | Q(groups__permissions=permission)
    return list(User.objects.filter(direct).values_list("pk", flat=True).distinct())


@receiver(user_logged_out)
def _on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    # The session is flushed after this signal, so its key is still known here.
    session = getattr(request, "session", None)
    _recheck([user.pk], session_key=getattr(session, "session_key", None))


@receiver(post_save, sender=User)
def _on_user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    update_fields = kwargs.get("update_fields")
    # A login saves last_login and nothing else: it takes nothing away.
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    _recheck([instance.pk])


@receiver(post_delete, sender=User)
def _on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    _recheck([instance.pk])


@receiver(post_save, sender=ApiToken)
@receiver(post_delete, sender=ApiToken)
def _on_token_changed(sender: Any, instance: ApiToken, created: bool = False, **_: Any) -> None:
    # A token deleted, or edited in the admin (scopes, expiry): its event streams check again.
    if not created:
        _recheck([instance.user_id])


@receiver(m2m_changed, sender=User.groups.through)
@receiver(m2m_changed, sender=User.user_permissions.through)
def _on_user_groups_or_permissions(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    if not reverse:  # user.groups.add(...), user.user_permissions.remove(...)
        if action.startswith("post_"):
            _recheck([instance.pk])
        return
    # group.user_set.remove(...), permission.user_set.clear(): the users are the pk_set,
    # or, for a clear, whoever was there just before it.
    if action == "pre_clear":
        instance._portal_cleared_users = list(instance.user_set.values_list("pk", flat=True))
    elif action == "post_clear":
        _recheck(getattr(instance, "_portal_cleared_users", []))
    elif action.startswith("post_"):
        _recheck(pk_set or [])


@receiver(m2m_changed, sender=Group.permissions.through)
def _on_group_permissions(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    if not reverse:  # group.permissions.add(...): everyone in the group
        if action.startswith("post_"):
            _recheck(_members(Q(pk=instance.pk)))
        return
    # permission.group_set.remove(...): everyone in those groups.
    if action == "pre_clear":
        instance._portal_cleared_users = _members(Q(permissions=instance))
    elif action == "post_clear":
        _recheck(getattr(instance, "_portal_cleared_users", []))
    elif action.startswith("post_"):
        _recheck(_members(Q(pk__in=pk_set or [])))


@receiver(pre_delete, sender=Group)
def _on_group_deleted(sender: Any, instance: Group, **kwargs: Any) -> None:
    _recheck(_members(Q(pk=instance.pk)))


@receiver(pre_delete, sender=Permission)
def _on_permission_deleted(sender: Any, instance: Permission, **kwargs: Any) -> None:
    _recheck(_holders(instance))
