"""The Rules pages: the list, a rule's versions with their diffs, one version, writing a
rule or a new version, simulating a version, activating it and switching a rule off.

Those who manage rules (``manage_rules``) do everything here; those who read the history
read these pages too (``access.check_rules_access``). Every change goes through the
services of ``portal.reviews.rules`` and ``portal.reviews.rule_simulation``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.schema import loads
from portal.accounts import access, roles
from portal.models import Rule, RuleSimulation, RuleVersion
from portal.reviews.rule_simulation import MAX_DAYS, rule_simulate
from portal.reviews.rules import (
    EDITABLE,
    RuleRefused,
    rule_activate,
    rule_switch_off,
    rule_write,
    version_diff,
)
from portal.runs.registry import agent_names

DEFAULT_DAYS = 30


class RuleForm(forms.Form):
    """A rule version's fields as text; ``rule_write`` checks what they mean and its
    refusal is shown on the field it names."""

    name = forms.CharField(max_length=120, required=False)
    position = forms.IntegerField(required=False, min_value=0)
    agent = forms.CharField(max_length=64, required=False)
    reason = forms.CharField(max_length=64, required=False)
    tool = forms.CharField(max_length=128, required=False)
    conditions = forms.CharField(required=False, widget=forms.Textarea)
    action = forms.ChoiceField(choices=RuleVersion.Action.choices)
    refusal_reason = forms.CharField(required=False, widget=forms.Textarea)
    route_group = forms.CharField(max_length=150, required=False)
    route_approvals = forms.IntegerField(required=False, min_value=1)
    names_risk = forms.CharField(required=False)
    cap_per_hour = forms.IntegerField(required=False, min_value=1)
    cap_amount_field = forms.CharField(max_length=200, required=False)
    cap_amount_per_day = forms.CharField(max_length=20, required=False)

    def clean_conditions(self) -> dict[str, Any]:
        text = self.cleaned_data["conditions"].strip()
        if not text:
            return {}
        try:
            value = loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("the conditions must be a JSON object (a JSON Schema)")
        return value

    def clean_names_risk(self) -> list[str]:
        return str(self.cleaned_data["names_risk"]).replace(",", " ").split()

    def write(self, *, by: Any, rule: Rule | None) -> RuleVersion | None:
        """The new version, or None with the refusal on its field."""
        fields = {name: self.cleaned_data[name] for name in EDITABLE}
        try:
            return rule_write(
                by=by,
                rule=rule,
                name=self.cleaned_data["name"],
                position=self.cleaned_data["position"],
                **fields,
            )
        except RuleRefused as refused:
            self.add_error(refused.field if refused.field in self.fields else None, refused.message)
            return None


def _initial(version: RuleVersion) -> dict[str, Any]:
    initial = {name: getattr(version, name) for name in EDITABLE}
    initial["conditions"] = json.dumps(version.conditions, indent=2) if version.conditions else ""
    initial["names_risk"] = ", ".join(version.names_risk)
    initial["position"] = version.position
    return initial


def _latest_simulations(version_ids: list[int]) -> dict[int, RuleSimulation]:
    latest: dict[int, RuleSimulation] = {}
    for simulation in RuleSimulation.objects.filter(version_id__in=version_ids):  # newest first
        latest.setdefault(simulation.version_id, simulation)
    return latest


@require_GET
@login_required
def rules_list(request: HttpRequest) -> HttpResponse:
    """Every rule in its order: on or off, the version that decides (or the newest), its
    hits, its latest simulation's agreement and its caps."""
    access.check_rules_access(request)
    day_ago = timezone.now() - timedelta(days=1)
    newest = RuleVersion.objects.filter(rule=OuterRef("pk")).order_by("-number").values("pk")
    rules = list(
        Rule.objects.annotate(
            newest_id=Subquery(newest[:1]),
            hit_count=Count("hits"),
            hits_today=Count("hits", filter=Q(hits__created_at__gte=day_ago)),
        )
    )
    shown_ids = [rule.active_version_id or rule.newest_id for rule in rules]
    versions = RuleVersion.objects.in_bulk([pk for pk in shown_ids if pk])
    simulations = _latest_simulations(list(versions))
    rows = [
        {
            "rule": rule,
            "version": versions.get(pk),
            "simulation": simulations.get(pk) if pk else None,
            "newest_id": rule.newest_id,
        }
        for rule, pk in zip(rules, shown_ids, strict=True)
    ]
    can_manage = roles.can_manage_rules(request.user)
    return render(request, "portal/rules/list.html", {"rows": rows, "can_manage": can_manage})


def _form_page(request: HttpRequest, rule: Rule | None, initial: dict[str, Any]) -> HttpResponse:
    form = RuleForm(request.POST or None, initial=initial)
    if rule is None:
        form.fields["name"].required = True
    if request.method == "POST" and form.is_valid():
        version = form.write(by=request.user, rule=rule)
        if version is not None:
            messages.success(
                request,
                f"Wrote {version}. Simulate it, then another person who manages rules can "
                "activate it.",
            )
            return redirect("rule_version", pk=version.pk)
    context = {
        "form": form,
        "rule": rule,
        "agents": agent_names(),
        "actions": RuleVersion.Action.choices,
    }
    return render(request, "portal/rules/form.html", context, status=200)


@require_http_methods(["GET", "POST"])
@login_required
def rule_new(request: HttpRequest) -> HttpResponse:
    """Write a new rule (its first version); it is off until activated."""
    access.check_rules_access(request, write=True)
    return _form_page(request, None, {"action": RuleVersion.Action.APPROVE, "position": 100})


@require_http_methods(["GET", "POST"])
@login_required
def rule_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Write a new version of a rule, starting from its newest; the old ones are kept."""
    rule = access.get_rules_object(request, Rule, pk, write=True)
    newest = rule.versions.order_by("-number").first()
    return _form_page(request, rule, _initial(newest) if newest else {})


@require_GET
@login_required
def rule_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A rule and its versions, newest first, each with what it changed."""
    rule = access.get_rules_object(request, Rule, pk)
    versions = list(rule.versions.select_related("written_by", "activated_by").order_by("number"))
    simulations = _latest_simulations([v.pk for v in versions])
    history = [
        {
            "version": v,
            "diff": version_diff(versions[i - 1] if i else None, v),
            "simulation": simulations.get(v.pk),
        }
        for i, v in enumerate(versions)
    ][::-1]
    context = {
        "rule": rule,
        "history": history,
        "can_manage": roles.can_manage_rules(request.user),
    }
    return render(request, "portal/rules/rule.html", context)


@require_GET
@login_required
def rule_version(request: HttpRequest, pk: int) -> HttpResponse:
    """One version: what it says, what it changed, its simulations, and (for those who
    manage rules) simulating and activating it."""
    version = access.get_rules_object(request, RuleVersion, pk)
    previous = (
        RuleVersion.objects.filter(rule=version.rule_id, number__lt=version.number)
        .order_by("-number")
        .first()
    )
    context = {
        "version": version,
        "rule": version.rule,
        "diff": version_diff(previous, version),
        "previous": previous,
        "conditions_json": json.dumps(version.conditions, indent=2, sort_keys=True),
        "simulations": version.simulations.select_related("run_by")[:20],
        "can_manage": roles.can_manage_rules(request.user),
        "is_writer": version.written_by_id == request.user.pk,
        "days": DEFAULT_DAYS,
        "max_days": MAX_DAYS,
    }
    return render(request, "portal/rules/version.html", context)


@require_POST
@login_required
def rule_simulate_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Run the version against the decisions of the last ``days`` days (default 30)."""
    version = access.get_rules_object(request, RuleVersion, pk, write=True)
    text = request.POST.get("days", "").strip() or str(DEFAULT_DAYS)
    try:
        simulation = rule_simulate(
            version, by=request.user, days=int(text) if text.isdigit() else -1
        )
    except RuleRefused as refused:
        messages.warning(request, f"Not simulated: {refused.message}.")
        return redirect("rule_version", pk=version.pk)
    return redirect("rule_simulation", pk=simulation.pk)


@require_POST
@login_required
def rule_activate_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Switch the version's rule on with this version deciding (never by its writer)."""
    version = access.get_rules_object(request, RuleVersion, pk, write=True)
    try:
        rule_activate(version, by=request.user)
    except RuleRefused as refused:
        messages.warning(request, f"Not activated: {refused.message}.")
    else:
        messages.success(request, f"Activated {version}: it decides the requests it matches.")
    return redirect("rule_version", pk=version.pk)


@require_POST
@login_required
def rule_switch_off_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Switch the rule off: from the next request on, people decide what it matched."""
    rule = access.get_rules_object(request, Rule, pk, write=True)
    rule_switch_off(rule, by=request.user)
    messages.success(request, f"Switched {rule.name} off: people decide what it matched.")
    return redirect("rule_detail", pk=rule.pk)


@require_GET
@login_required
def rule_simulation(request: HttpRequest, pk: int) -> HttpResponse:
    """A simulation's figures and the requests where the version disagreed with people."""
    simulation = access.get_rules_object(request, RuleSimulation, pk)
    version = simulation.version
    context = {
        "simulation": simulation,
        "version": version,
        "rule": version.rule,
        "result": simulation.result,
        "can_manage": roles.can_manage_rules(request.user),
    }
    return render(request, "portal/rules/simulation.html", context)


urlpatterns = [
    path("rules/", rules_list, name="rules"),
    path("rules/new/", rule_new, name="rule_new"),
    path("rules/<int:pk>/", rule_detail, name="rule_detail"),
    path("rules/<int:pk>/edit/", rule_edit, name="rule_edit"),
    path("rules/<int:pk>/switch-off/", rule_switch_off_view, name="rule_switch_off"),
    path("rules/versions/<int:pk>/", rule_version, name="rule_version"),
    path("rules/versions/<int:pk>/simulate/", rule_simulate_view, name="rule_simulate"),
    path("rules/versions/<int:pk>/activate/", rule_activate_view, name="rule_activate"),
    path("rules/simulations/<int:pk>/", rule_simulation, name="rule_simulation"),
]
