"""The audit trail, read-only, and API tokens, readable and deletable (revoked)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.accounts.tokens import api_token_delete
from portal.admin.base import ReadOnlyAdmin, pretty, technical
from portal.models import ApiToken, AuditEvent

_EVENT_FIELDS = ["created_at", "action", "actor_name", "target", "detail_display"]
_EVENT_TECHNICAL = ["actor_id", "target_type", "target_id", "prev_hash", "hash"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """The audit trail of actions, read-only (auditors also have it under History)."""

    ordering = ["-created_at", "-id"]  # the auditevent_recent index
    list_display = ["created_at", "action", "actor_name", "target"]
    list_filter = ["action"]
    search_fields = ["=actor_name", "=target_id", "action"]
    date_hierarchy = "created_at"
    fieldsets = [
        (None, {"fields": tuple(_EVENT_FIELDS)}),
        technical(_EVENT_TECHNICAL),
    ]
    readonly_fields = [*_EVENT_FIELDS, *_EVENT_TECHNICAL]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return super().get_queryset(request).with_target_names()  # type: ignore[attr-defined,no-any-return]

    @admin.display(description="Done to")
    def target(self, obj: AuditEvent) -> str:
        """A user by their username; anything else by its kind and id."""
        if not obj.target_type:
            return "—"
        name = getattr(obj, "target_name", None)
        return f"{obj.target_type} {name or obj.target_id}"

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # no bulk delete, not even for superusers

    @admin.display(description="Detail")
    def detail_display(self, obj: AuditEvent) -> str:
        return pretty(obj.detail)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Tokens are created with ``manage.py create_api_token``; here they can be read and
    deleted (which revokes them)."""

    class Media:
        css = {"all": ["portal/admin.css"]}

    ordering = ["-created_at"]

    list_display = [
        "name",
        "user",
        "scopes",
        "expires_at",
        "revoked_at",
        "created_at",
        "last_used_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username"]
    readonly_fields = [
        "user",
        "name",
        "scopes",
        "expires_at",
        "revoked_at",
        "revoked_reason",
        "token_hash",
        "created_at",
        "last_used_at",
    ]
    exclude = ["password_fingerprint"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return super().get_queryset(request).select_related("user")

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        api_token_delete(token=obj, by=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_delete(token=token, by=request.user)
