"""Decision rules in the admin, read-only: rules (switched off through ``rule_switch_off``,
by those who manage rules), their versions (never added, changed or deleted here: the
Rules pages write them through the service), simulations and hits."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.accounts import roles
from portal.admin.base import ReadOnlyAdmin, ReadOnlyInline, pretty, run_each
from portal.models import Rule, RuleHit, RuleSimulation, RuleVersion
from portal.reviews.rules import rule_switch_off


class VersionInline(ReadOnlyInline):
    model = RuleVersion
    fields = ["number", "action", "agent", "tool", "written_by", "written_at", "activated_by"]
    ordering = ["-number"]


@admin.register(Rule)
class RuleAdmin(ReadOnlyAdmin):
    list_display = ["name", "position", "enabled", "active_version", "created_at"]
    list_filter = ["enabled"]
    search_fields = ["name"]
    inlines = [VersionInline]
    actions = ["switch_off"]

    def has_switch_off_permission(self, request: HttpRequest) -> bool:
        return roles.can_manage_rules(request.user)

    @admin.action(description="Switch the selected rules off", permissions=["switch_off"])
    def switch_off(self, request: HttpRequest, queryset: QuerySet[Rule]) -> None:
        run_each(
            self, request, queryset, lambda r: rule_switch_off(r, by=request.user), "Switched off"
        )


@admin.register(RuleVersion)
class RuleVersionAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "action", "agent", "reason", "tool", "written_by", "activated_by"]
    list_filter = ["action", "agent"]
    search_fields = ["rule__name", "hash"]
    readonly_fields = ["conditions_json"]
    exclude = ["conditions"]

    @admin.display(description="conditions")
    def conditions_json(self, obj: RuleVersion) -> str:
        return pretty(obj.conditions)


@admin.register(RuleSimulation)
class RuleSimulationAdmin(ReadOnlyAdmin):
    list_display = ["version", "run_by", "run_at", "days", "matched", "agreement", "seconds"]
    readonly_fields = ["result_json"]
    exclude = ["result"]

    @admin.display(description="matched")
    def matched(self, obj: RuleSimulation) -> Any:
        return obj.result.get("matched")

    @admin.display(description="agreement")
    def agreement(self, obj: RuleSimulation) -> Any:
        return obj.result.get("agreement")

    @admin.display(description="result")
    def result_json(self, obj: RuleSimulation) -> str:
        return pretty(obj.result)


@admin.register(RuleHit)
class RuleHitAdmin(ReadOnlyAdmin):
    list_display = ["rule", "version", "interrupt", "action", "amount", "created_at"]
    list_filter = ["action"]
