"""Every object lookup for a request goes through here.

A stranger gets 404 (it does not learn the object exists); a user who may see the object
but asks to change it without the permission gets 403. Everyone sees their own threads;
users with ``view_all_threads`` (reviewers, auditors) see all of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest

from portal.accounts import roles
from portal.models import Interrupt, Thread

M = TypeVar("M", bound=Model)


def visible_threads(user: roles.User) -> QuerySet[Thread]:
    if not user.is_authenticated:
        return Thread.objects.none()
    if roles.can_view_all(user):
        return Thread.objects.all()
    return Thread.objects.filter(owner=user)


def in_visible_threads(qs: QuerySet[M], user: roles.User) -> QuerySet[M]:
    """``qs`` (rows with a ``thread``) narrowed to ``visible_threads(user)``. Left whole for
    those who see every thread: a subquery over all threads would only slow a big page."""
    if user.is_authenticated and roles.can_view_all(user):
        return qs
    return qs.filter(thread__in=visible_threads(user))


def can_see_thread(user: roles.User, thread: Thread) -> bool:
    """Whether ``thread`` is among ``visible_threads(user)``, for a thread in hand."""
    if not user.is_authenticated:
        return False
    return roles.can_view_all(user) or thread.owner_id == user.pk


def _uuid_or_404(value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise Http404("No such thread") from None


def get_thread_for_user(request: HttpRequest, thread_id: object) -> Thread:
    try:
        return visible_threads(request.user).get(pk=_uuid_or_404(thread_id))
    except Thread.DoesNotExist:
        raise Http404("No such thread") from None


def get_interrupt_for_user(
    request: HttpRequest, interrupt_id: str, *, needs: Callable[[roles.User], bool] | None = None
) -> Interrupt:
    """The interrupt if its thread is visible to the user (404 otherwise). A user who can
    see it but fails ``needs`` (say ``roles.can_decide``) gets 403."""
    try:
        related = Interrupt.objects.select_related("thread", "claimed_by")
        interrupt = in_visible_threads(related, request.user).get(pk=interrupt_id)
    except Interrupt.DoesNotExist:
        raise Http404("No such interrupt") from None
    if needs is not None and not needs(request.user):
        raise PermissionDenied("Your role can read this request but not act on it.")
    return interrupt


def check_rules_access(request: HttpRequest, *, write: bool = False) -> None:
    """Rules are read by those who manage them and by those who read the history (a
    decision names the rule version that made it); only ``manage_rules`` changes them.
    403 naming what is missing otherwise."""
    user = request.user
    if roles.can_manage_rules(user):
        return
    if write:
        raise PermissionDenied(
            "Changing, simulating or activating rules needs the manage_rules permission."
        )
    if not roles.can_view_history(user):
        raise PermissionDenied(
            "The rules are for people who manage them (manage_rules) or read the decision "
            "history (view_history)."
        )


def get_rules_object(request: HttpRequest, model: type[M], pk: int, *, write: bool = False) -> M:
    """A rule, rule version or simulation for a user ``check_rules_access`` lets in; 404
    for an id that is not there."""
    check_rules_access(request, write=write)
    try:
        return model._default_manager.get(pk=pk)
    except model.DoesNotExist:  # type: ignore[attr-defined]
        raise Http404(f"No such {model._meta.verbose_name}") from None
