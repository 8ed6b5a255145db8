"""Finding what a token's user may see, as the API answers it: 404 for the rest.

Requests are read with the related rows ``InterruptOut`` shows, prefetched."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import uuid
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from django.http import Http404, HttpRequest

from portal.accounts import access
from portal.api import sql
from portal.api.auth import token_user
from portal.api.errors import ApiProblem
from portal.models import Approval, Assignment, Interrupt, RoutingEvent, Thread, rows
from portal.models.db import prepared_cursor

# The relations InterruptOut reads (with their rows' model), in the order the statement
# says whether each has rows, and the routing events it shows.
_RELATED = {"approvals": Approval, "assignments": Assignment, "routing_events": RoutingEvent}
_RELATIONS = tuple(_RELATED)
_ROUTED = (RoutingEvent.Action.REMINDED, RoutingEvent.Action.ESCALATED)


def interrupt_relations() -> dict[str, Any]:
    """What ``InterruptOut`` reads of an interrupt's related rows, by relation name."""
    votes = Approval.objects.select_related("reviewer").order_by("id")
    assignees = Assignment.objects.select_related("user", "group").order_by("created_at", "id")
    routed = RoutingEvent.objects.filter(action__in=_ROUTED)
    return {
        "approvals": Prefetch("approvals", queryset=votes),
        "assignments": Prefetch("assignments", queryset=assignees),
        "routing_events": Prefetch("routing_events", queryset=routed),
    }


def visible_interrupts(user: Any) -> QuerySet[Interrupt]:
    related = Interrupt.objects.select_related("claimed_by", "thread__owner").prefetch_related(
        *interrupt_relations().values()
    )
    return access.in_visible_threads(related, user)


def visible_request(user: Any, interrupt_id: Any) -> Interrupt | None:
    """Request ``interrupt_id`` as ``visible_interrupts`` gives it, when the user can see
    its thread (None otherwise): in one query while it has no votes, assignees or
    reminders (most have none of the three), a relation read only when the row says it
    has some."""
    if interrupt_id is None:
        return None
    with prepared_cursor() as cursor:
        cursor.execute(_request_sql(connection.vendor), [*_ROUTED, str(interrupt_id)])
        found = cursor.fetchone()
    if found is None:
        return None
    user_model = get_user_model()
    request_end = rows.width(Interrupt)
    thread_end = request_end + rows.width(Thread)
    owner_end = thread_end + rows.width(user_model)
    claimer_end = owner_end + rows.width(user_model)
    interrupt = rows.loaded(Interrupt, found[:request_end])
    thread = rows.loaded(Thread, found[request_end:thread_end])
    if not access.can_see_thread(user, thread):
        return None
    owner = rows.loaded(user_model, found[thread_end:owner_end]) if thread.owner_id else None
    Thread.owner.field.set_cached_value(thread, owner)
    Interrupt.thread.field.set_cached_value(interrupt, thread)
    claimer = found[owner_end:claimer_end]
    claimed_by = rows.loaded(user_model, claimer) if interrupt.claimed_by_id else None
    Interrupt.claimed_by.field.set_cached_value(interrupt, claimed_by)
    has = dict(zip(_RELATIONS, found[claimer_end:], strict=True))
    cache = interrupt.__dict__.setdefault("_prefetched_objects_cache", {})
    for name in _RELATIONS:
        if not has[name]:
            # As prefetch_related leaves a relation it found empty (the related manager's
            # own none() would build its filter first, for a query that never runs).
            empty: Any = _RELATED[name]._default_manager.none()
            empty._result_cache, empty._prefetch_done = [], True
            cache[name] = empty
    wanted = [name for name in _RELATIONS if has[name]]
    if wanted:
        relations = interrupt_relations()
        prefetch_related_objects([interrupt], *(relations[name] for name in wanted))
    return interrupt


def pending_request(user: Any, thread: Thread, interrupt_id: Any) -> Interrupt | None:
    """``thread``'s request ``interrupt_id``, as ``visible_request`` reads it."""
    interrupt = visible_request(user, interrupt_id)
    if interrupt is None or interrupt.thread_id != thread.pk:
        return None
    return interrupt


@cache
def _request_sql(vendor: str) -> str:
    user_model = get_user_model()
    return sql.VISIBLE_REQUEST.format(
        request=rows.columns(Interrupt, "i"),
        thread=rows.columns(Thread, "t"),
        owner=rows.columns(user_model, "u"),
        claimer=rows.columns(user_model, "c"),
        request_table=Interrupt._meta.db_table,
        thread_table=Thread._meta.db_table,
        user_table=user_model._meta.db_table,
        approval_table=Approval._meta.db_table,
        assignment_table=Assignment._meta.db_table,
        routing_table=RoutingEvent._meta.db_table,
    )


# What an answer needs of the request it names before the lock: the schema.
_NAMED_FIELDS = ("thread", "response_schema")


def named_request(user: Any, thread_id: str, interrupt_id: str | None) -> Interrupt | None:
    """The request ``interrupt_id`` of thread ``thread_id`` with its thread, when the
    user can see it (None otherwise): an answer's lookup in one query, as
    ``Interrupt.objects.select_related("thread").only(...)`` would read it."""
    if not interrupt_id:
        return None
    try:
        thread_uuid = uuid.UUID(str(thread_id))
    except ValueError:
        return None
    thread_key = Thread._meta.pk.get_db_prep_value(thread_uuid, connection)
    with prepared_cursor() as cursor:
        cursor.execute(_named_request_sql(connection.vendor), [str(interrupt_id), thread_key])
        found = cursor.fetchone()
    if found is None:
        return None
    split = rows.width(Interrupt, _NAMED_FIELDS)
    thread = rows.loaded(Thread, found[split:])
    if not access.can_see_thread(user, thread):
        return None
    interrupt = rows.loaded(Interrupt, found[:split], _NAMED_FIELDS)
    Interrupt.thread.field.set_cached_value(interrupt, thread)
    return interrupt


@cache
def _named_request_sql(vendor: str) -> str:
    return sql.NAMED_REQUEST.format(
        request=rows.columns(Interrupt, "i", _NAMED_FIELDS),
        thread=rows.columns(Thread, "t"),
        request_table=Interrupt._meta.db_table,
        thread_table=Thread._meta.db_table,
    )


def thread_or_404(request: HttpRequest, thread_id: str) -> Thread:
    try:
        return access.get_thread_for_user(request, thread_id)
    except Http404 as exc:
        raise ApiProblem(404, f"No thread {thread_id} that you can see.") from exc


def interrupt_or_404(request: HttpRequest, interrupt_id: str) -> Interrupt:
    interrupt = visible_request(token_user(request), interrupt_id)
    if interrupt is None:
        raise ApiProblem(404, f"No request {interrupt_id} that you can see.")
    return interrupt
