"""A decision by a rule is shown as one everywhere: "rule R v3" with the version's hash,
never a person and never "the system": the history (and its filters), the decision page,
the exports, the API, outside agents' answers, notifications and the metrics."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.accounts.tokens import api_token_create
from portal.audit import metrics
from portal.audit.observability import metrics_text
from portal.models import Decision, Notification, RuleVersion
from portal.notify.events import summary
from portal.reviews.checks import already_decided
from portal.reviews.expiry import interrupts_expire
from portal.reviews.rule_decisions import rules_apply
from portal.reviews.words import decided_by_words
from tests.factories import make_decision, make_interrupt, make_user
from tests.reviews.rulebook import active_rule

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(roles, reviewer) -> dict[str, Decision]:
    """One decision by a person, one by the rule "small refunds" v1, one by the system."""
    person = make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    version = active_rule("small refunds", agent="refunds")
    rules_apply(make_interrupt().pk)
    by_rule = Decision.objects.get(rule_version=version)
    later = make_interrupt(agent="transfers")
    later.__class__.objects.filter(pk=later.pk).update(expires_at=timezone.now())
    (expired,) = interrupts_expire(timezone.now() + timedelta(seconds=1))
    return {"person": person, "rule": by_rule, "system": expired}


def _rows(client, **params):
    return client.get(reverse("history"), params).context["page"].rows


def test_words_name_the_rules_version_the_person_or_the_system(decided, reviewer):
    assert decided_by_words(decided["rule"]) == "rule small refunds v1"
    assert decided_by_words(decided["person"]) == reviewer.get_username()
    assert decided_by_words(decided["system"]) == "the system"


def test_the_history_shows_the_rule_and_its_hash(client, auditor, decided):
    client.force_login(auditor)

    (row,) = [r for r in _rows(client) if r["decision_id"] == decided["rule"].pk]

    version = decided["rule"].rule_version
    assert row["decided_by"] == "rule small refunds v1"
    assert row["rule"] == {"name": "small refunds", "version": 1, "hash": version.hash}
    assert row["reviewer"] is None
    page = client.get(reverse("history")).content.decode()
    assert "rule small refunds v1" in page
    assert version.hash[:12] in page
    # An auditor opens the version that decided from the row.
    assert f'href="{reverse("rule_version", args=[version.pk])}"' in page


def test_the_history_filters_decisions_by_rules_and_by_one_rule(client, auditor, decided):
    client.force_login(auditor)

    assert [r["decision_id"] for r in _rows(client, by_rules="on")] == [decided["rule"].pk]
    assert [r["decision_id"] for r in _rows(client, rule="small refunds")] == [decided["rule"].pk]
    assert _rows(client, rule="another rule") == []
    # "The system" is the system only: a rule's decision is not counted as one.
    assert [r["decision_id"] for r in _rows(client, reviewer="system")] == [decided["system"].pk]


def test_the_decision_page_says_the_rule_decided_and_no_person(client, auditor, decided):
    client.force_login(auditor)

    page = client.get(reverse("decision_detail", args=[decided["rule"].pk])).content.decode()

    assert "rule small refunds v1" in page
    assert decided["rule"].rule_hash in page
    assert "no person decided" in page
    version_page = reverse("rule_version", args=[decided["rule"].rule_version_id])
    assert f'href="{version_page}"' in page
    assert client.get(version_page).status_code == 200


def test_the_exports_carry_the_rule(client, auditor, decided):
    client.force_login(auditor)

    body = b"".join(client.get(reverse("history_export_csv")).streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    (row,) = [r for r in rows if int(r["decision_id"]) == decided["rule"].pk]
    assert row["decided_by"] == "rule small refunds v1"
    assert json.loads(row["rule"])["name"] == "small refunds"
    lines = b"".join(client.get(reverse("history_export_jsonl")).streaming_content).splitlines()
    records = {r["decision_id"]: r for r in map(json.loads, lines)}
    assert records[decided["rule"].pk]["rule"]["version"] == 1
    assert records[decided["person"].pk]["rule"] is None


def test_the_api_gives_decisions_a_rule_field_and_no_reviewer(client, reviewer, decided):
    token = api_token_create(user=reviewer, name="t")[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    items = client.get("/api/decisions", **auth).json()["items"]
    by_id = {item["decision_id"]: item for item in items}
    version = decided["rule"].rule_version

    assert by_id[decided["rule"].pk]["rule"] == {
        "name": "small refunds",
        "version": 1,
        "hash": version.hash,
    }
    assert by_id[decided["rule"].pk]["reviewer"] is None
    assert by_id[decided["person"].pk]["rule"] is None
    assert by_id[decided["person"].pk]["reviewer"] == reviewer.get_username()
    only = client.get("/api/decisions", {"by_rules": "true"}, **auth).json()["items"]
    assert [item["decision_id"] for item in only] == [decided["rule"].pk]


def test_the_decided_notification_names_the_rule(decided):
    note = Notification.objects.get(
        kind="request.decided", interrupt_id=decided["rule"].interrupt_id
    )

    assert note.payload["decision"]["reviewer"] is None
    assert note.payload["decision"]["rule"]["name"] == "small refunds"
    assert summary(note).startswith("Request from refunds approved by rule small refunds v1")


def test_a_late_answer_hears_the_rule_decided(decided):
    refusal = already_decided(decided["rule"].interrupt)

    assert "already decided by rule small refunds v1" in refusal.message


def test_the_metrics_count_the_rule_as_a_decider_of_its_own(decided):
    now = timezone.now()

    rows = metrics.outcome_rates(now - timedelta(days=1), now + timedelta(days=1), "reviewer")

    labels = {row.label: row.total for row in rows}
    assert labels["rule small refunds v1"] == 1
    assert labels["system"] == 1
    text = metrics_text().decode()
    assert 'portal_rule_hits_total{action="approve",rule="small refunds"} 1.0' in text


def test_an_outside_agents_answer_names_the_rule(client, roles):
    active_rule("invoices", agent="invoice-bot")
    agent = make_user("ivy-invoice-bot", role="agent")
    token = api_token_create(user=agent, name="bot", scopes=["request"])[1]
    body = {
        "agent": "invoice-bot",
        "title": "Pay invoice 7",
        "response_schema": {"type": "object", "properties": {"approved": {"type": "boolean"}}},
    }

    response = client.post(
        "/api/requests",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["status"] == "decided"
    assert answer["answer"]["decided_by"] is None
    version = RuleVersion.objects.get(rule__name="invoices")
    assert answer["answer"]["rule"] == {"name": "invoices", "version": 1, "hash": version.hash}


def test_the_admin_names_the_rule_in_the_decisions_list_and_page(admin_client, decided):
    version = decided["rule"].rule_version

    listing = admin_client.get(reverse("admin:portal_decision_changelist")).content.decode()
    page = admin_client.get(
        reverse("admin:portal_decision_change", args=[decided["rule"].pk])
    ).content.decode()

    assert "· rule small refunds v1" in listing
    assert "· the system" in listing  # the expiry is still the system's
    assert "rule small refunds v1" in page
    assert version.hash in page
