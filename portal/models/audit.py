"""The audit trail of actions: ``AuditEvent``, append-only and hash-chained, recorded
with ``audit_record`` inside the transaction of the action it records."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

from portal.models.chain import EVENTS, Sealed, canonical, sealing
from portal.models.decisions import ImmutableRecordError

_APPEND_ONLY_EVENTS = (
    "audit events are a record: they are appended once and never updated or deleted "
    "(record a new event instead)"
)


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent.objects.update() refused: {_APPEND_ONLY_EVENTS}")

    def delete(self) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent.objects.delete() refused: {_APPEND_ONLY_EVENTS}")

    def with_target_names(self) -> AuditEventQuerySet:
        """With ``target_name``: the username an event about a user was done to (its
        target id is the user's key, which nobody reads); None for other targets."""
        users = get_user_model().objects.annotate(key=Cast("pk", models.CharField()))
        named = users.filter(key=models.OuterRef("target_id")).values("username")[:1]
        return self.annotate(
            target_name=models.Case(
                models.When(target_type="user", then=models.Subquery(named)), default=None
            )
        )


class AuditEvent(Sealed, models.Model):
    """One action someone (or the system) took: a claim, a login, a token revoked...

    Append-only and hash-chained like ``Decision`` (its own chain, ``chain.EVENTS``).
    Recorded with ``audit_record`` inside the transaction of the action it records, so an
    action that rolled back leaves no event and an event names nothing that did not happen.
    """

    class Action(models.TextChoices):
        CLAIM = "interrupt.claim", "claimed a request"
        RELEASE = "interrupt.release", "released a claim"
        WITHDRAW = "interrupt.withdraw", "withdrew a request"
        CANCEL = "interrupt.cancel", "cancelled a request"
        LOGIN = "login", "logged in"
        LOGIN_FAILED = "login.failed", "failed to log in"
        LOGOUT = "logout", "logged out"
        TOKEN_CREATE = "api_token.create", "created an API token"
        TOKEN_REVOKE = "api_token.revoke", "revoked an API token"
        ASSIGN = "interrupt.assign", "assigned a request"
        REMIND = "interrupt.remind", "sent a reminder about a request"
        ESCALATE = "interrupt.escalate", "escalated a request"
        SUBSCRIPTION_CREATE = "subscription.create", "created a notification subscription"
        SUBSCRIPTION_CHANGE = "subscription.change", "changed a notification subscription"
        SUBSCRIPTION_DELETE = "subscription.delete", "deleted a notification subscription"
        EXPIRE = "interrupt.expire", "expired a request"
        THREAD_RETRY = "thread.retry", "retried a thread"
        THREAD_CANCEL = "thread.cancel", "cancelled a thread"
        SLACK_LINK = "slack.link", "linked a Slack account"
        SLACK_UNLINK = "slack.unlink", "unlinked a Slack account"

    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Not a choices field on purpose: other parts add their actions (assignments,
    # cancellations, retries, subscriptions) without a migration each.
    action = models.CharField(max_length=64)
    # Who acted. No database constraint and nothing done on delete: the record outlives
    # the account, and ``actor_name`` keeps who it was. Null: the system, or nobody known
    # (a failed login).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # auditevent_actor (Meta) serves lookups by who acted
        related_name="+",
    )
    actor_name = models.CharField(max_length=150, blank=True)
    # What it was done to: a kind ("interrupt", "thread", "api_token", "user") and its id.
    target_type = models.CharField(max_length=32, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        permissions = [("view_audit_trail", "Can browse the audit trail of actions")]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="auditevent_recent"),
            models.Index(fields=["action", "-created_at"], name="auditevent_action"),
            models.Index(fields=["target_type", "target_id"], name="auditevent_target"),
            models.Index(fields=["actor_name", "-created_at"], name="auditevent_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name or 'system'} at {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(
                f"AuditEvent {self.pk} cannot be saved again: {_APPEND_ONLY_EVENTS}"
            )
        with sealing(self, chain=EVENTS, using=kwargs.get("using")):
            super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"AuditEvent {self.pk} cannot be deleted: {_APPEND_ONLY_EVENTS}")


# Longest canonical ``detail`` accepted: an event says what happened, it is not a store.
MAX_AUDIT_DETAIL_CHARS = 4000


def audit_record(
    *,
    action: str,
    actor: Any = None,
    target: Any = None,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the audit trail; call it inside the transaction of the action.

    ``actor``: the user who acted (None or an anonymous user: the system, or nobody known).
    ``target``: a model instance, a ``(kind, id)`` pair, or None. ``detail``: small JSON
    data about the action, never a secret (``ValueError`` over ``MAX_AUDIT_DETAIL_CHARS``).
    """
    # Stored as its canonical JSON reads back (times as UTC text, ids as text), so the
    # hash computed now is the one recomputed from the row later.
    text = canonical(dict(detail or {}))
    if len(text) > MAX_AUDIT_DETAIL_CHARS:
        raise ValueError(
            f"audit detail for {action!r} is over {MAX_AUDIT_DETAIL_CHARS} characters of "
            "JSON; record identifiers, not contents"
        )
    person = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    if target is None:
        target_type, target_id = "", ""
    elif isinstance(target, tuple):
        target_type, target_id = str(target[0]), str(target[1])
    else:
        target_type, target_id = target._meta.model_name, str(target.pk)
    event = AuditEvent(
        action=action,
        actor_id=person.pk if person is not None else None,
        actor_name=person.get_username() if person is not None else "",
        target_type=target_type,
        target_id=target_id,
        detail=json.loads(text),
    )
    event.save()
    return event
