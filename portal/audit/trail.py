"""The audit trail of actions (claims, logins, tokens, rules...): the same shape as the
decision history (``portal.audit.history``): one filter form, one queryset of plain rows,
read by keyset on (created_at, id) by the page and both exports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.accounts import roles
from portal.audit.history import (
    EXPORT_BATCH,
    PAGE_SIZE,
    SYSTEM,
    KeysetFilter,
    Page,
    between_days,
    page_of,
    require_export_access,
    walk,
)
from portal.models import AuditEvent
from portal.models.paging import Cursor

EVENT_COLUMNS = [
    ("event_id", "Event"),
    ("at", "At"),
    ("action", "Action"),
    ("actor", "By"),
    ("target_type", "Target kind"),
    ("target_id", "Target"),
    ("detail", "Detail"),
    ("hash", "Chain hash"),
]
_EVENT_VALUES = (
    "id",
    "created_at",
    "action",
    "actor_name",
    "target_type",
    "target_id",
    "detail",
    "hash",
)


def require_audit_trail_access(request: HttpRequest) -> None:
    if not roles.can_view_audit_trail(request.user):
        raise PermissionDenied("The audit trail of actions is for auditors.")


def require_audit_trail_export(request: HttpRequest) -> None:
    require_audit_trail_access(request)
    require_export_access(request)


class EventFilter(KeysetFilter):
    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=150, label="By")
    target_type = forms.CharField(required=False, max_length=32, label="Target kind")
    target_id = forms.CharField(required=False, max_length=64, label="Target")


def event_row(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": values["id"],
        "at": values["created_at"],
        "action": values["action"],
        "action_label": _ACTION_LABELS.get(values["action"], values["action"]),
        "actor": values["actor_name"] or SYSTEM,
        "target_type": values["target_type"],
        "target_id": values["target_id"],
        "target_name": values.get("target_name"),  # a user's username (events_page)
        "detail": values["detail"],
        "hash": values["hash"],
    }


def events_filtered(criteria: dict[str, Any]) -> QuerySet[AuditEvent]:
    """Audit events matching ``criteria`` (``EventFilter.criteria()``), newest first."""
    qs = between_days(AuditEvent.objects.with_target_names(), criteria)
    if action := criteria.get("action"):
        # "interrupt." (ending in a dot) is every action on requests.
        qs = (
            qs.filter(action__startswith=action)
            if action.endswith(".")
            else qs.filter(action=action)
        )
    if who := criteria.get("actor"):
        qs = qs.filter(actor_name="") if who == SYSTEM else qs.filter(actor_name=who)
    if kind := criteria.get("target_type"):
        qs = qs.filter(target_type=kind)
    if ident := criteria.get("target_id"):
        qs = qs.filter(target_id=ident)
    return qs.order_by("-created_at", "-id")


def events_page(
    criteria: dict[str, Any], cursor: Cursor | None = None, *, size: int | None = None
) -> Page:
    qs = events_filtered(criteria).values(*_EVENT_VALUES, "target_name")
    return page_of(qs, event_row, cursor, size or PAGE_SIZE)


def iter_event_rows(
    criteria: dict[str, Any], *, batch_size: int | None = None
) -> Iterator[dict[str, Any]]:
    qs = events_filtered(criteria).values(*_EVENT_VALUES)
    return walk(qs, event_row, batch_size or EXPORT_BATCH)


_ACTION_LABELS = dict(AuditEvent.Action.choices)


def event_filter_choices() -> dict[str, list[str]]:
    """Suggestions for the event filters: the known actions and target kinds."""
    return {
        "actions": sorted(_ACTION_LABELS),
        "target_types": ["apitoken", "interrupt", "subscription", "thread", "user"],
    }
