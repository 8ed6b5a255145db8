"""What the admin's pages share: read-only model admins and inlines, JSON shown escaped,
and bulk actions that go through a service one row at a time."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html

from portal.errors import DecisionRefused, Refused


def pretty(value: Any) -> str:
    """JSON, indented and escaped, for a read-only admin field."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="portal-json">{}</pre>', text)


def technical(fields: list[str]) -> Any:
    """A fieldset folded shut: the keys, hashes and raw JSON behind the words above it."""
    return ("Technical details", {"classes": ["collapse"], "fields": tuple(fields)})


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Viewable by staff with the view permission; nobody adds, edits or deletes."""

    class Media:
        css = {"all": ["portal/admin.css"]}  # lists that fit the screen

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def run_each(
    admin_view: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    rows: Any,
    act: Any,
    done: str,
) -> None:
    """Apply ``act(row)`` to each selected row, each in its own service call, and tell the
    user how many were ``done`` and why any others were refused."""
    count, refused = 0, []
    for row in rows:
        try:
            act(row)
        except (DecisionRefused, Refused) as exc:
            refused.append(f"{row}: {exc}")
        else:
            count += 1
    if count:
        admin_view.message_user(request, f"{done}: {count}.", messages.SUCCESS)
    if refused:
        admin_view.message_user(
            request, f"Refused ({len(refused)}): " + "; ".join(refused), messages.WARNING
        )


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.fields or []]
