"""The Rules pages: who may read and change rules, writing a rule and a new version (a
refusal on the field it names), simulating, activating as a second person, switching off."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from portal.models import AuditEvent, Decision, Rule, RuleSimulation, RuleVersion
from portal.reviews.rule_simulation import rule_simulate
from tests.factories import grant_manage_rules, make_interrupt, make_rule_version

pytestmark = pytest.mark.django_db

NEW_RULE = {
    "name": "Refunds under $10 on delivered orders are approved",
    "agent": "refunds",
    "reason": "tool_approval",
    "tool": "issue_refund",
    "conditions": (
        '{"properties": {"payload": {"properties": {"amount": {"exclusiveMaximum": 10}}}}}'
    ),
    "action": "approve",
    "cap_per_hour": "5",
}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def writer(reviewer):
    return grant_manage_rules(reviewer)


@pytest.fixture
def checker(second_reviewer):
    return grant_manage_rules(second_reviewer)


@pytest.fixture
def version(writer):
    return make_rule_version(by=writer)


def _said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_a_manager_writes_a_rule_and_lands_on_its_version(writer):
    response = _client(writer).post(reverse("rule_new"), NEW_RULE)
    version = RuleVersion.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("rule_version", args=[version.pk])
    assert version.rule.name == NEW_RULE["name"] and version.written_by == writer
    assert version.conditions["properties"]["payload"]["properties"]["amount"] == {
        "exclusiveMaximum": 10
    }
    assert version.cap_per_hour == 5 and not version.rule.enabled
    assert AuditEvent.objects.filter(action="rule.write", actor=writer).exists()


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"action": "refuse"}, "refusal_reason", "must say why"),
        ({"conditions": "{not json"}, "conditions", "not JSON"),
        ({"conditions": "[1]"}, "conditions", "JSON object"),
        ({"conditions": '{"type": 5}'}, "conditions", "not a usable JSON Schema"),
        ({"action": "route"}, "route_group", "must name a group"),
        ({"cap_amount_per_day": "50"}, "cap_amount_field", "JSON pointer"),
        ({"cap_per_hour": "0"}, "cap_per_hour", ""),
        ({"name": ""}, "name", ""),
    ],
)
def test_a_refused_rule_says_which_field_is_wrong_and_writes_nothing(writer, changes, field, words):
    response = _client(writer).post(reverse("rule_new"), NEW_RULE | changes)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert f'id="id_{field}"' in response.content.decode()
    assert not RuleVersion.objects.exists()


def test_a_second_rule_with_the_same_name_is_refused_on_the_name(writer, version):
    response = _client(writer).post(reverse("rule_new"), NEW_RULE | {"name": version.rule.name})
    assert "exists already" in " ".join(response.context["form"].errors["name"])


def test_a_new_version_starts_from_the_newest_and_the_history_shows_the_diff(writer, version):
    client = _client(writer)
    page = client.get(reverse("rule_edit", args=[version.rule_id]))
    assert page.context["form"].initial["agent"] == "refunds"
    assert '"exclusiveMaximum": 10' in page.context["form"].initial["conditions"]
    data = dict(page.context["form"].initial) | {"cap_per_hour": "7", "names_risk": "a, b"}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    response = client.post(reverse("rule_edit", args=[version.rule_id]), data)
    second = RuleVersion.objects.get(number=2)
    assert response["Location"] == reverse("rule_version", args=[second.pk])
    assert (second.cap_per_hour, second.names_risk, second.conditions) == (
        7,
        ["a", "b"],
        version.conditions,
    )
    history = client.get(reverse("rule_detail", args=[version.rule_id]))
    newest_diff = history.context["history"][0]["diff"]
    assert newest_diff == [("names_risk", [], ["a", "b"]), ("cap_per_hour", None, 7)]
    assert "cap_per_hour" in history.content.decode()


def test_simulating_shows_the_figures_and_links_the_disagreements(writer, version):
    interrupt = make_interrupt(value={"order_id": "A-1", "amount": 4, "order_status": "delivered"})
    rejected = Decision(
        interrupt=interrupt, thread=interrupt.thread, outcome="rejected", door="dashboard"
    )
    rejected.save()
    client = _client(writer)
    response = client.post(reverse("rule_simulate", args=[version.pk]), {"days": "7"})
    simulation = RuleSimulation.objects.get()
    assert response["Location"] == reverse("rule_simulation", args=[simulation.pk])
    assert simulation.days == 7 and simulation.run_by == writer
    page = client.get(response["Location"]).content.decode()
    assert reverse("decision_detail", args=[rejected.pk]) in page
    assert reverse("interrupt_detail", args=[interrupt.pk]) in page
    assert 'id="sim-disagreed">1<' in page


def test_a_window_out_of_range_is_refused_with_the_reason(writer, version):
    response = _client(writer).post(reverse("rule_simulate", args=[version.pk]), {"days": "0"})
    assert response["Location"] == reverse("rule_version", args=[version.pk])
    assert any("days must be" in m for m in _said(response))
    assert not RuleSimulation.objects.exists()


def test_the_writer_cannot_activate_and_is_told_why(writer, version):
    rule_simulate(version, by=writer, days=7)
    client = _client(writer)
    assert (
        'id="writer-note"'
        in client.get(reverse("rule_version", args=[version.pk])).content.decode()
    )
    response = client.post(reverse("rule_activate", args=[version.pk]))
    assert any("another person" in m for m in _said(response))
    assert not Rule.objects.get().enabled


def test_a_second_person_activates_only_after_a_simulation(writer, checker, version):
    client = _client(checker)
    response = client.post(reverse("rule_activate", args=[version.pk]))
    assert any("has not been simulated" in m for m in _said(response))
    client.post(reverse("rule_simulate", args=[version.pk]), {"days": "30"})
    response = client.post(reverse("rule_activate", args=[version.pk]))
    assert any("Activated" in m for m in _said(response))
    rule = Rule.objects.get()
    assert rule.enabled and rule.active_version == version
    listing = _client(writer).get(reverse("rules")).content.decode()
    assert 'class="tag ok">on<' in listing


def test_switching_off_takes_the_rule_off(writer, checker, version):
    rule_simulate(version, by=checker, days=7)
    client = _client(checker)
    client.post(reverse("rule_activate", args=[version.pk]))
    response = client.post(reverse("rule_switch_off", args=[version.rule_id]))
    assert response["Location"] == reverse("rule_detail", args=[version.rule_id])
    assert not Rule.objects.get().enabled
    assert AuditEvent.objects.filter(action="rule.switch_off", actor=checker).exists()


def test_the_list_shows_state_hits_agreement_and_caps(writer, checker):
    version = make_rule_version(by=writer, cap_per_hour=5)
    rule_simulate(version, by=checker, days=7)
    page = _client(writer).get(reverse("rules"))
    row = page.context["rows"][0]
    assert row["version"] == version and row["simulation"].version == version
    text = page.content.decode()
    assert "at most 5 an hour" in text and "not simulated" not in text
    assert reverse("rule_detail", args=[version.rule_id]) in text


def test_auditors_and_reviewers_read_the_rules_but_change_nothing(
    auditor, second_reviewer, writer, version
):
    rule_simulate(version, by=writer, days=7)
    for user in (auditor, second_reviewer):
        client = _client(user)
        for url in (
            reverse("rules"),
            reverse("rule_detail", args=[version.rule_id]),
            reverse("rule_version", args=[version.pk]),
            reverse("rule_simulation", args=[RuleSimulation.objects.get().pk]),
        ):
            response = client.get(url)
            assert response.status_code == 200, url
            assert "activate-button" not in response.content.decode()
        for url in (
            reverse("rule_new"),
            reverse("rule_simulate", args=[version.pk]),
            reverse("rule_activate", args=[version.pk]),
            reverse("rule_switch_off", args=[version.rule_id]),
        ):
            response = client.post(url, {"days": "7"})
            assert response.status_code == 403
            assert "manage_rules" in response.content.decode()
    assert RuleSimulation.objects.count() == 1


def test_someone_who_neither_manages_rules_nor_reads_history_gets_403_with_a_reason(
    support_agent, version
):
    response = _client(support_agent).get(reverse("rule_version", args=[version.pk]))
    assert response.status_code == 403
    assert "manage_rules" in response.content.decode()


def test_the_rules_pages_answer_404_for_a_bad_id_and_405_for_a_wrong_method(writer, version):
    client = _client(writer)
    for name in ("rule_version", "rule_detail", "rule_simulation", "rule_edit"):
        assert client.get(reverse(name, args=[99999])).status_code == 404
    assert client.get("/rules/versions/x/").status_code == 404
    assert client.get(reverse("rule_activate", args=[version.pk])).status_code == 405
    assert client.get(reverse("rule_simulate", args=[version.pk])).status_code == 405
    assert client.post(reverse("rule_version", args=[version.pk])).status_code == 405
    assert client.post(reverse("rules")).status_code == 405


def test_the_nav_shows_rules_to_managers_and_auditors_only(writer, auditor, second_reviewer):
    link = f'href="{reverse("rules")}"'
    assert link in _client(writer).get(reverse("threads")).content.decode()
    assert link in _client(auditor).get(reverse("threads")).content.decode()
    assert link not in _client(second_reviewer).get(reverse("threads")).content.decode()


def test_the_form_sets_a_rules_place_in_the_order_and_the_audit_says_so(client, roles):
    from tests.reviews.rulebook import rule_manager

    writer = rule_manager("orderer")
    client.force_login(writer)
    fields = {"name": "Late one", "action": "approve", "position": "7"}

    client.post(reverse("rule_new"), fields)
    rule = Rule.objects.get(name="Late one")
    assert rule.position == 7
    response = client.post(
        reverse("rule_edit", args=[rule.pk]), {"action": "approve", "position": "3"}
    )
    assert response.status_code == 302
    rule.refresh_from_db()
    # The new place comes with the new version: only once a second person activates it.
    newest = rule.versions.order_by("-number").first()
    assert rule.position == 7 and newest.position == 3
    moved = AuditEvent.objects.filter(action="rule.write").order_by("-id").first()
    assert moved.detail["diff"]["position"] == [7, 3]
    refused = client.post(
        reverse("rule_edit", args=[rule.pk]), {"action": "approve", "position": "-1"}
    )
    assert refused.status_code == 200 and "position" in refused.context["form"].errors
