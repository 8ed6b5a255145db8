"""Every decision records the door it came through, in the audit chain; the decisions
recorded before doors were still verify."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from portal.accounts.tokens import api_token_create
from portal.audit.chains import verify_chain
from portal.models import Decision, Interrupt, chain
from portal.reviews.decisions import decision_submit
from portal.reviews.expiry import interrupts_expire
from tests.audit.test_audit import tampering
from tests.factories import make_decision, make_interrupt

pytestmark = pytest.mark.django_db


def test_the_dashboard_records_its_door(client, reviewer):
    interrupt = make_interrupt()
    client.force_login(reviewer)

    client.post(
        reverse("interrupt_decide", args=[interrupt.pk]),
        {"action": "approve", "resume_interrupt_id": interrupt.pk},
    )

    assert Decision.objects.get().door == Decision.Door.DASHBOARD


def test_the_admin_records_its_door(admin_client):
    interrupt = make_interrupt()

    admin_client.post(
        reverse("admin:portal_interrupt_decide", args=[quote(interrupt.pk)]),
        {"action": "approve", "resume_interrupt_id": interrupt.pk},
    )

    assert Decision.objects.get().door == Decision.Door.ADMIN


def test_the_api_records_its_door_and_the_history_api_shows_it(client, reviewer):
    interrupt = make_interrupt()
    token = api_token_create(user=reviewer, name="t")[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}

    client.post(
        f"/api/threads/{interrupt.thread_id}/resume",
        json.dumps(body),
        content_type="application/json",
        **auth,
    )
    listed = client.get("/api/decisions", **auth).json()["items"]

    assert Decision.objects.get().door == Decision.Door.API
    assert [item["door"] for item in listed] == ["api"]


def test_an_expiry_records_the_system_door():
    interrupt = make_interrupt()
    Interrupt.objects.filter(pk=interrupt.pk).update(expires_at=timezone.now() - timedelta(1))

    interrupts_expire()

    assert Decision.objects.get().door == Decision.Door.SYSTEM


def decide_in_slack(reviewer) -> Decision:
    interrupt = make_interrupt()
    decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
        door=Decision.Door.SLACK,
    )
    return Decision.objects.get(interrupt=interrupt)


def test_the_door_is_sealed_in_the_chain_and_an_edit_of_it_is_caught(reviewer):
    decision = decide_in_slack(reviewer)
    assert verify_chain(Decision.objects.all()).ok

    with tampering() as cursor:
        cursor.execute("UPDATE portal_decision SET door = %s WHERE id = %s", ["admin", decision.pk])

    report = verify_chain(Decision.objects.all())
    assert not report.ok
    assert "edited row" in str(report.broken)


def test_decisions_recorded_before_doors_still_verify(reviewer):
    # As a row written before the door existed: no door, hashed without it.
    make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    old = Decision.objects.get()
    fields = {name: getattr(old, name) for name in chain.DECISION_FIELDS}
    rehashed = chain.decision_hash(fields, prev_hash=old.prev_hash, payload=old.payload_hash)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE portal_decision SET door = '', hash = %s WHERE id = %s", [rehashed, old.pk]
        )
    new = decide_in_slack(reviewer)

    assert new.door == Decision.Door.SLACK
    assert verify_chain(Decision.objects.all()).ok
    call_command("verify_audit")  # raises CommandError on a broken chain
