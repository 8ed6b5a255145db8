"""Rules in the admin: read-only, even for a superuser; switching off goes through the
service, for those who manage rules."""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin
from django.test import RequestFactory
from django.urls import reverse

from portal.models import Rule, RuleHit, RuleSimulation, RuleVersion
from portal.reviews.rule_simulation import rule_simulate
from portal.reviews.rules import rule_activate
from tests.factories import grant_manage_rules, make_rule_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def version(reviewer):
    return make_rule_version(by=grant_manage_rules(reviewer))


@pytest.mark.parametrize("model", [Rule, RuleVersion, RuleSimulation, RuleHit])
def test_nobody_adds_changes_or_deletes_rules_in_the_admin(model, admin_user):
    request = RequestFactory().get("/")
    request.user = admin_user
    model_admin = django_admin.site._registry[model]
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)


def test_the_admin_shows_a_version_and_its_simulation(client, admin_user, version):
    simulation = rule_simulate(version, by=admin_user, days=7)
    client.force_login(admin_user)
    page = client.get(reverse("admin:portal_ruleversion_change", args=[version.pk]))
    assert page.status_code == 200 and "exclusiveMaximum" in page.content.decode()
    assert 'name="conditions"' not in page.content.decode()
    page = client.get(reverse("admin:portal_rulesimulation_change", args=[simulation.pk]))
    assert page.status_code == 200 and "disagreements" in page.content.decode()
    page = client.get(reverse("admin:portal_rule_change", args=[version.rule_id]))
    assert page.status_code == 200
    (versions,) = page.context["inline_admin_formsets"]
    assert not versions.has_add_permission and not versions.has_change_permission


def test_switching_rules_off_from_the_admin_goes_through_the_service(client, admin_user, version):
    rule_simulate(version, by=admin_user, days=7)
    rule_activate(version, by=admin_user)
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:portal_rule_changelist"),
        {"action": "switch_off", "_selected_action": [version.rule_id]},
        follow=True,
    )
    assert "Switched off: 1." in response.content.decode()
    assert not Rule.objects.get().enabled


def test_staff_without_manage_rules_are_not_offered_the_switch(client, django_user_model):
    staff = django_user_model.objects.create_user("viewer", is_staff=True)
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(Permission.objects.get(codename="view_rule"))
    client.force_login(staff)
    page = client.get(reverse("admin:portal_rule_changelist"))
    assert page.status_code == 200
    assert "switch_off" not in page.content.decode()
