"""The admin speaks the product's words: the glossary's names for the tables and outcomes,
a decisions list that says who decided what, no internal keys outside a folded technical
section, and an audit trail whose targets name people."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from portal.models import Approval, AuditEvent, Decision, Interrupt, Thread, audit_record
from portal.reviews.words import OUTCOMES, outcome_words
from tests.factories import admin_change_url, make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def _visible(html: str) -> str:
    """The page without its folded technical sections (closed <details>)."""
    return re.sub(r"<details.*?</details>", "", html, flags=re.S)


def test_the_tables_have_the_glossarys_names(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()

    for name in ("Requests", "Decisions", "Votes", "Outside requests", "Audit events"):
        assert f">{name}<" in html, name
    assert ">Interrupts<" not in html and ">Approvals<" not in html
    assert Interrupt._meta.verbose_name_plural == "requests"
    assert Approval._meta.verbose_name_plural == "votes"


def test_every_outcome_has_one_name_in_the_models_and_on_the_pages():
    for code in OUTCOMES:
        assert Decision(outcome=code).get_outcome_display() == outcome_words(code)
        assert Approval(outcome=code).get_outcome_display() == outcome_words(code)
    assert Decision(outcome="edited").get_outcome_display() != "Edited"
    assert Decision(outcome="responded").get_outcome_display() != "Responded"


def test_a_thread_waiting_on_a_request_is_not_called_interrupted(admin_client):
    interrupt = make_interrupt()
    assert Thread.objects.get(pk=interrupt.thread_id).status == "interrupted"

    html = admin_client.get(reverse("admin:portal_thread_changelist")).content.decode()

    assert "Waiting for approval" in html
    assert "Interrupted" not in html


def test_the_decisions_list_says_who_decided_what_not_the_requests_key(admin_client, reviewer):
    interrupt = make_tool_approval(args={"amount": 120.0, "recipient": "Al"})
    call_id = interrupt.value["tool_calls"][0]["id"]
    make_decision(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"type": "edit", "args": {call_id: {"amount": 60.0, "recipient": "Al"}}},
    )

    html = admin_client.get(reverse("admin:portal_decision_changelist")).content.decode()
    first_cell = re.search(r'<th class="field-[^"]+">(.*?)</th>', html, re.S)

    assert first_cell is not None
    cell = first_cell[1]
    assert "Approved with edited arguments" in cell
    assert reviewer.get_username() in cell
    assert "(resolved)" not in html and interrupt.pk not in _visible(cell)


def test_the_decision_page_reads_in_words_with_the_keys_folded(admin_client, reviewer):
    interrupt = make_tool_approval(args={"amount": 120.0, "recipient": "Al"})
    call_id = interrupt.value["tool_calls"][0]["id"]
    decision = make_decision(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"type": "edit", "args": {call_id: {"amount": 60.0, "recipient": "Al"}}},
    )

    html = admin_client.get(admin_change_url(decision)).content.decode()
    shown = _visible(html)

    assert "Approved with edited arguments" in shown
    assert "amount: $120.00 → $60.00" in shown
    assert call_id not in shown and "Payload hash" not in shown
    assert "Payload hash" in html  # still there, folded


def test_the_request_page_folds_its_internal_keys(admin_client):
    interrupt = make_tool_approval()

    html = admin_client.get(admin_change_url(interrupt)).content.decode()
    shown = _visible(html)

    for internal in ("Key", "Checkpoint seq", "Tool call id", "Node"):
        assert f">{internal}:<" not in shown, internal
    assert "Checkpoint" in html and "TOOL:" in html  # in the technical section
    assert "Key:" not in html  # and named in words there too


def test_the_audit_trail_names_the_user_it_was_done_to(admin_client, admin_user, reviewer):
    audit_record(
        action=AuditEvent.Action.TOKEN_CREATE, actor=admin_user, target=reviewer, detail={}
    )

    html = admin_client.get(reverse("admin:portal_auditevent_changelist")).content.decode()

    assert reviewer.get_username() in html
    assert f"user {reviewer.pk}<" not in html
