"""Every decision records the door it came through, in the audit chain; the decisions
recorded before doors were still verify."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from portal.accounts.tokens import api_token_create
from portal.audit.chains import verify_chain
from portal.models import Approval, AuditEvent, Decision, Interrupt, chain
from portal.reviews.decisions import decision_submit
from portal.reviews.expiry import interrupts_expire
from tests.audit.test_audit import tampering
from tests.factories import make_decision, make_interrupt
from tests.reviews.test_quorum import _tamper

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


# --- what else closes a request, or votes on one, says its door too ----------------------


def _api(client, user, path: str, scope: str) -> None:
    token = api_token_create(user=user, name="t", scopes=[scope])[1]
    response = client.post(path, "{}", content_type="application/json", **_bearer(token))
    assert response.status_code in (200, 202), response.content


def _bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _admin_action(admin_client, model: str, action: str, pk: str) -> None:
    admin_client.post(
        reverse(f"admin:portal_{model}_changelist"),
        {"action": action, "_selected_action": [pk]},
    )


def _sealed(action: str, door: str) -> None:
    """The audit event of ``action`` names ``door``, and every chain still verifies."""
    event = AuditEvent.objects.get(action=action)
    assert event.detail["door"] == door
    call_command("verify_audit", stdout=io.StringIO())


@pytest.mark.parametrize("door", ["dashboard", "api", "admin"])
def test_a_withdrawal_seals_its_door_in_the_decision_and_the_audit_event(
    door, client, admin_client, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    if door == "dashboard":
        client.force_login(support_agent)
        client.post(reverse("chat_withdraw", args=[interrupt.thread_id]), {"confirm": "yes"})
        action = AuditEvent.Action.WITHDRAW
    elif door == "api":
        _api(client, support_agent, f"/api/interrupts/{interrupt.pk}/withdraw", "start")
        action = AuditEvent.Action.WITHDRAW
    else:  # a superuser who is not the owner: a cancellation of the request
        _admin_action(admin_client, "interrupt", "withdraw_requests", interrupt.pk)
        action = AuditEvent.Action.CANCEL

    assert Decision.objects.get().door == door
    _sealed(action, door)


@pytest.mark.parametrize("door", ["dashboard", "api", "admin"])
def test_a_thread_cancellation_seals_its_door_in_the_decision_and_the_audit_event(
    door, client, admin_client, support_agent
):
    interrupt = make_interrupt(owner=support_agent)
    if door == "dashboard":
        client.force_login(support_agent)
        client.post(reverse("thread_cancel", args=[interrupt.thread_id]), {"confirm": "yes"})
    elif door == "api":
        _api(client, support_agent, f"/api/threads/{interrupt.thread_id}/cancel", "start")
    else:
        _admin_action(admin_client, "thread", "cancel_threads", str(interrupt.thread_id))

    assert Decision.objects.get().door == door
    _sealed(AuditEvent.Action.THREAD_CANCEL, door)


def test_an_expiry_from_the_admin_seals_the_admin_door(admin_client):
    interrupt = make_interrupt()

    _admin_action(admin_client, "interrupt", "expire_requests", interrupt.pk)

    assert Decision.objects.get().door == Decision.Door.ADMIN
    _sealed(AuditEvent.Action.EXPIRE, "admin")


def test_each_vote_seals_the_door_it_came_through(client, reviewer, second_reviewer, settings):
    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    interrupt = make_interrupt()
    client.force_login(reviewer)
    client.post(
        reverse("interrupt_decide", args=[interrupt.pk]),
        {"action": "approve", "resume_interrupt_id": interrupt.pk},
    )
    token = api_token_create(user=second_reviewer, name="t")[1]
    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    client.post(
        f"/api/threads/{interrupt.thread_id}/resume",
        json.dumps(body),
        content_type="application/json",
        **_bearer(token),
    )

    assert [v.door for v in Approval.objects.order_by("id")] == ["dashboard", "api"]
    assert Decision.objects.get().door == Decision.Door.API
    assert verify_chain(Approval.objects.all(), chain=chain.APPROVALS).ok
    call_command("verify_audit", stdout=io.StringIO())


def test_an_edit_of_a_votes_door_is_caught(reviewer, settings):
    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    interrupt = make_interrupt()
    decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
        door=Decision.Door.SLACK,
    )
    vote = Approval.objects.get()
    assert vote.door == "slack"

    _tamper("UPDATE portal_approval SET door = %s WHERE id = %s", ["admin", vote.pk])

    assert not verify_chain(Approval.objects.all(), chain=chain.APPROVALS).ok
