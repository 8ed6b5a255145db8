"""Every action that is not a decision lands in the audit trail, in its own transaction:
claims and releases, withdrawals, logins (and failed ones), API tokens."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.accounts.tokens import api_token_create
from portal.errors import ClaimConflict
from portal.models import ApiToken, AuditEvent
from portal.reviews.claims import interrupt_claim, interrupt_unclaim
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db


def events(action: str | None = None) -> list[AuditEvent]:
    qs = AuditEvent.objects.order_by("id")
    return list(qs.filter(action=action) if action else qs)


# --- claims ----------------------------------------------------------------------------


def test_claiming_and_releasing_a_request_through_the_page_are_recorded(client, reviewer):
    interrupt = make_interrupt()
    client.force_login(reviewer)
    before = AuditEvent.objects.count()  # the login itself is an event
    client.post(reverse("interrupt_claim", args=[interrupt.pk]))
    client.post(reverse("interrupt_unclaim", args=[interrupt.pk]))
    claim, release = AuditEvent.objects.order_by("id")[before:]
    assert (claim.action, claim.actor_name, claim.target_type, claim.target_id) == (
        "interrupt.claim",
        "rita-reviewer",
        "interrupt",
        interrupt.pk,
    )
    assert claim.detail == {}
    assert (release.action, release.actor_name, release.detail) == (
        "interrupt.release",
        "rita-reviewer",
        {"held_by": "rita-reviewer"},
    )


def test_a_takeover_names_whom_the_claim_was_taken_from(reviewer, admin_user):
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)
    interrupt_claim(interrupt=interrupt, user=admin_user)
    interrupt_unclaim(interrupt=interrupt, user=admin_user)
    _claim, takeover, release = events()
    assert takeover.detail == {"taken_over_from": "rita-reviewer", "lapsed": False}
    assert (release.actor_name, release.detail) == ("ada-admin", {"held_by": "ada-admin"})


def test_a_refused_claim_and_a_claim_already_held_record_nothing(reviewer, second_reviewer):
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)
    interrupt_claim(interrupt=interrupt, user=reviewer)  # already theirs: a no-op
    with pytest.raises(ClaimConflict):
        interrupt_claim(interrupt=interrupt, user=second_reviewer)
    interrupt_unclaim(interrupt=make_interrupt(), user=reviewer)  # nothing held
    assert [e.action for e in events()] == ["interrupt.claim"]


def test_claims_and_withdrawals_through_the_api_are_recorded_too(client, reviewer, support_agent):
    interrupt = make_interrupt()
    _, token = api_token_create(user=reviewer, name="bot")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.post(f"/api/interrupts/{interrupt.pk}/claim", **auth).status_code == 200
    assert client.post(f"/api/interrupts/{interrupt.pk}/release", **auth).status_code == 200
    mine = make_interrupt(owner=support_agent)
    _, owner_token = api_token_create(user=support_agent, name="app")
    owner = {"HTTP_AUTHORIZATION": f"Bearer {owner_token}"}
    assert client.post(f"/api/interrupts/{mine.pk}/withdraw", **owner).status_code < 300
    recorded = [
        (e.action, e.actor_name, e.target_id) for e in events() if e.action.startswith("interrupt.")
    ]
    assert recorded == [
        ("interrupt.claim", "rita-reviewer", interrupt.pk),
        ("interrupt.release", "rita-reviewer", interrupt.pk),
        ("interrupt.withdraw", "sam-support", mine.pk),
    ]


# --- withdrawals -----------------------------------------------------------------------


def test_withdrawing_a_request_from_the_chat_is_recorded_with_its_decision(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    client.post(reverse("chat_withdraw", args=[interrupt.thread_id]), {"confirm": "yes"})
    (withdrawal,) = events("interrupt.withdraw")
    assert withdrawal.actor_name == "sam-support"
    assert withdrawal.target_id == interrupt.pk
    assert withdrawal.detail == {
        "thread": str(interrupt.thread_id),
        "decision": interrupt.decision.pk,
        "door": "dashboard",
    }
    call_command("verify_audit")


# --- logins ----------------------------------------------------------------------------


def _login(client, username, password, ip="198.51.100.7"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_a_login_and_a_logout_are_recorded_with_the_client_address(client, reviewer):
    _login(client, "rita-reviewer", "pw-rita-reviewer")
    client.post("/logout/", REMOTE_ADDR="198.51.100.7")
    login, logout = events()
    assert (login.action, login.actor_id, login.detail) == (
        "login",
        reviewer.pk,
        {"ip": "198.51.100.7"},
    )
    assert (logout.action, logout.actor_id) == ("logout", reviewer.pk)


def test_a_failed_login_names_the_account_and_address_but_never_the_password(client, reviewer):
    _login(client, "rita-reviewer", "Secret-Guess-1")
    (failed,) = events()
    assert failed.action == "login.failed"
    assert failed.actor_id is None
    assert (failed.target_type, failed.target_id) == ("user", str(reviewer.pk))
    assert failed.detail == {
        "ip": "198.51.100.7",
        "known_account": True,
        "username": "rita-reviewer",
    }
    assert "Secret-Guess-1" not in json.dumps([failed.detail, failed.actor_name])


def test_a_failed_login_for_no_known_account_keeps_nothing_of_what_was_typed(client):
    # People type passwords into the username box; what names no account is not kept.
    _login(client, "hunter2-my-password", "whatever")
    (failed,) = events()
    assert failed.detail == {"ip": "198.51.100.7", "known_account": False}
    assert (failed.target_type, failed.target_id) == ("", "")


def test_attempts_refused_by_a_lockout_are_not_recorded_one_by_one(client, reviewer, settings):
    limit = settings.AXES_FAILURE_LIMIT
    for n in range(limit + 5):
        _login(client, "rita-reviewer", f"wrong-{n}")
    failed = events("login.failed")
    assert len(failed) == limit
    assert failed[-1].detail.get("locked_out") is True
    assert not any(e.detail.get("locked_out") for e in failed[:-1])


# --- API tokens ------------------------------------------------------------------------


def test_creating_a_token_at_the_command_line_is_recorded_without_the_token(reviewer, capsys):
    call_command("create_api_token", "rita-reviewer", "--name", "ci", "--scope", "read")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    row = ApiToken.objects.get()
    (created,) = events("api_token.create")
    assert created.actor_id is None  # an operator, not a portal user
    assert (created.target_type, created.target_id) == ("apitoken", str(row.pk))
    assert created.detail["user"] == "rita-reviewer"
    assert created.detail["scopes"] == ["read"]
    assert created.detail["expires_at"].endswith("+00:00")
    text = json.dumps(created.detail)
    assert token not in text and row.token_hash not in text
    call_command("verify_audit")


def test_deactivating_a_user_records_each_token_it_revokes(reviewer):
    first, _ = api_token_create(user=reviewer, name="one")
    second, _ = api_token_create(user=reviewer, name="two")
    reviewer.is_active = False
    reviewer.save()
    revoked = events("api_token.revoke")
    assert {e.target_id for e in revoked} == {str(first.pk), str(second.pk)}
    assert all(e.detail["reason"] == "its user was deactivated" for e in revoked)
    reviewer.save()  # nothing left to revoke: nothing more recorded
    assert len(events("api_token.revoke")) == 2


def test_deleting_a_token_in_the_admin_is_recorded_as_revoked_by_the_admin(
    client, admin_user, reviewer
):
    row, _ = api_token_create(user=reviewer, name="laptop")
    client.force_login(admin_user)
    delete = reverse("admin:portal_apitoken_delete", args=[row.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not ApiToken.objects.exists()
    (revoked,) = events("api_token.revoke")
    assert (revoked.actor_name, revoked.target_id) == ("ada-admin", str(row.pk))
    assert revoked.detail == {
        "user": "rita-reviewer",
        "name": "laptop",
        "reason": "deleted in the admin",
    }


def test_the_admins_bulk_delete_records_every_token(client, admin_user, reviewer):
    rows = [api_token_create(user=reviewer, name=n)[0] for n in ("a", "b")]
    client.force_login(admin_user)
    client.post(
        reverse("admin:portal_apitoken_changelist"),
        {"action": "delete_selected", "_selected_action": [r.pk for r in rows], "post": "yes"},
    )
    assert not ApiToken.objects.exists()
    assert {e.target_id for e in events("api_token.revoke")} == {str(r.pk) for r in rows}
