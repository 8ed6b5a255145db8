"""Finding what a token's user may see, as the API answers it: 404 for the rest.

Requests are read with the related rows ``InterruptOut`` shows, prefetched."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import uuid
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from django.http import Http404, HttpRequest

from portal.accounts import access
from portal.api import sql
from portal.api.auth import token_user
from portal.api.errors import ApiProblem
from portal.models import Approval, Assignment, Interrupt, RoutingEvent, Thread, rows


def interrupt_relations() -> dict[str, Any]:
    """What ``InterruptOut`` reads of an interrupt's related rows, by relation name."""
    votes = Approval.objects.select_related("reviewer").order_by("id")
    assignees = Assignment.objects.select_related("user", "group").order_by("created_at", "id")
    routed = RoutingEvent.objects.filter(
        action__in=[RoutingEvent.Action.REMINDED, RoutingEvent.Action.ESCALATED]
    )
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


# A thread's pending request and whether it has any rows in each relation InterruptOut
# reads. Written out, not built with the ORM: composing this query (three Exists and a
# select_related) cost more CPU than the four queries it replaces.
_PENDING_SQL = """
SELECT i.*,
  EXISTS (SELECT 1 FROM {approval} a WHERE a.interrupt_id = i.id) AS has_approvals,
  EXISTS (SELECT 1 FROM {assignment} s WHERE s.interrupt_id = i.id) AS has_assignments,
  EXISTS (
    SELECT 1 FROM {routing} r WHERE r.interrupt_id = i.id AND r.action IN (%s, %s)
  ) AS has_routing_events
FROM {interrupt} i
WHERE i.id = %s
"""


def pending_request(user: Any, thread: Thread, interrupt_id: Any) -> Interrupt | None:
    """``thread``'s request ``interrupt_id`` as ``visible_interrupts`` gives it, in one
    query while it has no votes, assignees or reminders (most have none of the three): a
    relation is read only when the row says it has some."""
    if interrupt_id is None or not access.can_see_thread(user, thread):
        return None
    query = _PENDING_SQL.format(
        approval=Approval._meta.db_table,
        assignment=Assignment._meta.db_table,
        routing=RoutingEvent._meta.db_table,
        interrupt=Interrupt._meta.db_table,
    )
    actions = [RoutingEvent.Action.REMINDED, RoutingEvent.Action.ESCALATED]
    found = list(Interrupt.objects.raw(query, [*actions, str(interrupt_id)]))
    if not found or found[0].thread_id != thread.pk:
        return None
    interrupt = found[0]
    interrupt.thread = thread  # with its owner, for requested_by
    relations = interrupt_relations()
    cache = interrupt.__dict__.setdefault("_prefetched_objects_cache", {})
    for name in relations:
        if not getattr(interrupt, f"has_{name}"):
            # As prefetch_related leaves a relation it found empty.
            empty = getattr(interrupt, name).none()
            empty._result_cache, empty._prefetch_done = [], True
            cache[name] = empty
    wanted = [p for name, p in relations.items() if getattr(interrupt, f"has_{name}")]
    if wanted:
        prefetch_related_objects([interrupt], *wanted)
    return interrupt


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
    with connection.cursor() as cursor:
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
    found = visible_interrupts(token_user(request)).filter(pk=interrupt_id)
    interrupt = found.first()
    if interrupt is None:
        raise ApiProblem(404, f"No request {interrupt_id} that you can see.")
    return interrupt
