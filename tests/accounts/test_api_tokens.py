"""API tokens: names, scopes, expiry, revocation when their user is deactivated or changes
password, and the per-token request rate."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from portal.accounts.tokens import api_token_create
from portal.models import ApiToken, Decision, Run, Thread
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db


def get(client, token, url="/api/interrupts"):
    return client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")


def post(client, token, url, body):
    return client.post(
        url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


# --- the command and the admin ----------------------------------------------------------


def test_the_command_gives_a_token_its_name_scopes_and_expiry(reviewer):
    out = StringIO()
    before = timezone.now()

    call_command(
        "create_api_token",
        "rita-reviewer",
        "--name",
        "ci bot",
        "--scope",
        "read",
        "--scope",
        "decide",
        "--days",
        "7",
        stdout=out,
    )

    row = ApiToken.objects.get()
    assert row.name == "ci bot"
    assert row.scopes == ["decide", "read"]
    assert before + timedelta(days=7) <= row.expires_at <= timezone.now() + timedelta(days=7)
    assert "scopes decide, read" in out.getvalue()


def test_the_command_defaults_to_ninety_days_and_zero_days_means_no_expiry(reviewer):
    call_command(
        "create_api_token", "rita-reviewer", "--name", "a", "--scope", "read", stdout=StringIO()
    )
    call_command(
        "create_api_token",
        "rita-reviewer",
        "--name",
        "b",
        "--scope",
        "read",
        "--days",
        "0",
        stdout=StringIO(),
    )

    a, b = ApiToken.objects.order_by("name")
    assert timedelta(days=89) < a.expires_at - timezone.now() <= timedelta(days=90)
    assert b.expires_at is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "x"], "--scope"),
        (["--scope", "read"], "--name"),
        (["--name", "x", "--scope", "admin"], "invalid choice: 'admin'"),
        (["--name", "x", "--scope", "read", "--days", "-1"], "--days must be 0"),
    ],
)
def test_the_command_refuses_a_token_without_name_or_scope_or_with_bad_values(
    reviewer, args, message
):
    with pytest.raises(CommandError, match=message):
        call_command("create_api_token", "rita-reviewer", *args, stdout=StringIO())
    assert ApiToken.objects.count() == 0


def test_the_admin_lists_tokens_with_their_name_scopes_and_expiry(client, admin_user, reviewer):
    expires = timezone.now() + timedelta(days=3)
    row, _ = api_token_create(user=reviewer, name="nightly", scopes=["read"], expires_at=expires)
    client.force_login(admin_user)

    listing = client.get("/admin/portal/apitoken/").content.decode()
    detail = client.get(f"/admin/portal/apitoken/{row.pk}/change/").content.decode()

    assert "nightly" in listing and "read" in listing
    assert "Expires at" in listing
    assert "Scopes" in detail and "Expires at" in detail and "Revoked at" in detail
    assert row.password_fingerprint not in detail


# --- scopes ------------------------------------------------------------------------------


def test_a_tokens_last_use_is_written_at_most_once_a_minute_and_is_never_older(client, reviewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    row, token = api_token_create(user=reviewer)
    assert get(client, token).status_code == 200
    row.refresh_from_db()
    first = row.last_used_at
    assert first is not None

    # Within the minute: read-only requests write nothing.
    with CaptureQueriesContext(connection) as queries:
        assert get(client, token).status_code == 200
        assert get(client, token).status_code == 200
    assert not [q for q in queries if q["sql"].startswith("UPDATE")], queries.captured_queries
    row.refresh_from_db()
    assert row.last_used_at == first

    # Once the recorded use is a minute old, the next request records itself.
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=first - timedelta(seconds=61))
    asked = timezone.now()
    assert get(client, token).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at >= asked


def test_a_token_without_the_read_scope_is_403_naming_it(client, reviewer):
    interrupt = make_interrupt()
    _, token = api_token_create(user=reviewer, scopes=["decide"])

    for url in [
        "/api/interrupts",
        f"/api/interrupts/{interrupt.pk}",
        f"/api/threads/{interrupt.thread_id}",
    ]:
        response = get(client, token, url)
        assert response.status_code == 403, url
        assert "lacks the 'read' scope" in response.json()["detail"]


def test_a_token_without_the_start_scope_is_403_and_starts_nothing(client, support_agent):
    _, token = api_token_create(user=support_agent, scopes=["read"])

    response = post(client, token, "/api/threads", {"agent": "refunds", "input": {"messages": []}})

    assert response.status_code == 403
    assert response.json() == {
        "detail": "This token lacks the 'start' scope; create one with manage.py "
        "create_api_token USER --scope start.",
        "errors": [],
    }
    assert Thread.objects.count() == 0 and Run.objects.count() == 0


def test_a_token_without_the_decide_scope_is_403_and_records_nothing(client, reviewer):
    interrupt = make_interrupt()
    _, token = api_token_create(user=reviewer, scopes=["read", "start"])

    response = post(
        client,
        token,
        f"/api/threads/{interrupt.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
    )

    assert response.status_code == 403
    assert "lacks the 'decide' scope" in response.json()["detail"]
    assert Decision.objects.count() == 0


def test_a_token_with_the_decide_scope_decides(client, reviewer):
    interrupt = make_interrupt()
    _, token = api_token_create(user=reviewer, scopes=["decide"])

    response = post(
        client,
        token,
        f"/api/threads/{interrupt.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
    )

    assert response.status_code == 202
    assert Decision.objects.count() == 1


# --- expiry and revocation ---------------------------------------------------------------


def test_an_expired_token_is_refused_saying_it_expired(client, reviewer):
    row, token = api_token_create(user=reviewer, expires_at=timezone.now() + timedelta(seconds=60))
    assert get(client, token).status_code == 200
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = get(client, token)

    assert response.status_code == 401
    assert response.json()["detail"].startswith("This token expired at ")


def test_a_deactivated_users_token_stays_revoked_after_reactivation(client, reviewer):
    _, token = api_token_create(user=reviewer)
    reviewer.is_active = False
    reviewer.save()

    assert get(client, token).status_code == 401
    reviewer.is_active = True
    reviewer.save()

    response = get(client, token)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]
    assert "its user was deactivated" in response.json()["detail"]


def test_a_user_deactivated_without_save_is_refused_too(client, reviewer):
    _, token = api_token_create(user=reviewer)
    type(reviewer).objects.filter(pk=reviewer.pk).update(is_active=False)

    response = get(client, token)

    assert response.status_code == 401
    assert "deactivated" in response.json()["detail"]


def test_a_password_change_revokes_the_users_tokens(client, reviewer):
    _, token = api_token_create(user=reviewer)
    reviewer.set_password("a-new-password-42")
    reviewer.save()

    response = get(client, token)

    assert response.status_code == 401
    assert "its user's password changed" in response.json()["detail"]


def test_a_password_changed_behind_the_models_back_revokes_the_tokens_too(client, reviewer):
    # A queryset update or a fix in SQL sends no signal; the fingerprint still notices.
    from django.contrib.auth.hashers import make_password

    _, token = api_token_create(user=reviewer)
    type(reviewer).objects.filter(pk=reviewer.pk).update(password=make_password("other-pw-42"))

    response = get(client, token)

    assert response.status_code == 401
    assert "password changed" in response.json()["detail"]


class _FewRoundsPBKDF2(PBKDF2PasswordHasher):
    iterations = 2


def test_a_rehash_of_the_same_password_at_login_keeps_the_tokens(client, reviewer, settings):
    _, token = api_token_create(user=reviewer)
    old_hash = reviewer.password
    # A new preferred hasher (as after a Django upgrade): the next login re-hashes.
    settings.PASSWORD_HASHERS = [
        f"{__name__}._FewRoundsPBKDF2",
        *settings.PASSWORD_HASHERS,
    ]
    response = client.post("/login/", {"username": "rita-reviewer", "password": "pw-rita-reviewer"})
    assert response.status_code == 302
    reviewer.refresh_from_db()
    assert reviewer.password != old_hash

    assert get(client, token).status_code == 200


def test_other_users_tokens_are_untouched_by_a_password_change(client, reviewer, auditor):
    _, token = api_token_create(user=auditor)
    reviewer.set_password("a-new-password-42")
    reviewer.save()

    assert get(client, token).status_code == 200


# --- rate --------------------------------------------------------------------------------


def _clear_counts() -> None:
    # On Redis, clear() would empty the whole database, other xdist workers' counts too:
    # delete only the keys under this run's prefix (see tests/conftest.py).
    client = getattr(getattr(cache, "_cache", None), "get_client", None)
    if client is None:
        cache.clear()
        return
    redis = client(write=True)
    keys = list(redis.scan_iter(match=cache.make_key("*")))
    if keys:
        redis.delete(*keys)


@pytest.fixture
def fresh_counts():
    _clear_counts()
    yield
    _clear_counts()


def test_a_token_over_its_rate_gets_429_with_retry_after_in_the_apis_format(
    client, reviewer, auditor, settings, fresh_counts
):
    settings.PORTAL_API_RATE = "3/m"
    _, token = api_token_create(user=reviewer)
    _, other = api_token_create(user=reviewer)

    assert [get(client, token).status_code for _ in range(3)] == [200, 200, 200]
    response = get(client, token)

    assert response.status_code == 429
    body = response.json()
    assert body["errors"] == []
    assert body["detail"].startswith("Too many requests with this token (the limit is 3/m)")
    assert 1 <= int(response["Retry-After"]) <= 60
    # The count is per token: another token of the same user is still served.
    assert get(client, other).status_code == 200


def test_a_new_token_never_inherits_the_count_of_a_deleted_one_with_its_id(
    client, reviewer, settings, fresh_counts
):
    settings.PORTAL_API_RATE = "2/m"
    old, token = api_token_create(user=reviewer)
    assert [get(client, token).status_code for _ in range(3)] == [200, 200, 429]
    reused_id = old.pk
    old.delete()

    new, fresh = api_token_create(user=reviewer)
    ApiToken.objects.filter(pk=new.pk).update(id=reused_id)

    assert get(client, fresh).status_code == 200


def test_an_empty_rate_means_no_limit(client, reviewer, settings, fresh_counts):
    settings.PORTAL_API_RATE = ""
    _, token = api_token_create(user=reviewer)

    assert {get(client, token).status_code for _ in range(30)} == {200}


def test_a_missing_scope_is_refused_before_the_body_is_read(client, reviewer):
    interrupt = make_interrupt()
    _, token = api_token_create(user=reviewer, scopes=["read"])

    response = post(client, token, f"/api/threads/{interrupt.thread_id}/resume", {"nope": 1})

    assert response.status_code == 403
    assert "lacks the 'decide' scope" in response.json()["detail"]


# --- the lookup ---------------------------------------------------------------------------


def _fields(row):
    return {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}


def test_the_lookup_loads_the_token_and_its_user_as_the_orm_does(reviewer):
    # Written-out SQL read through a cursor: the values must come out as a queryset's
    # (aware datetimes, the scopes as a list, on SQLite too), with the user's own
    # permissions beside their groups'.
    from django.contrib.auth.models import Permission

    from portal.accounts.tokens import hash_token, token_found

    row, token = api_token_create(
        user=reviewer, name="t", scopes=["read"], expires_at=timezone.now() + timedelta(days=1)
    )
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    reviewer.user_permissions.add(Permission.objects.get(codename="start_thread"))

    found = token_found(hash_token(token))

    orm = ApiToken.objects.select_related("user").get(pk=row.pk)
    assert _fields(found) == _fields(orm)
    assert _fields(found.user) == _fields(orm.user)
    assert found.scopes == ["read"] and timezone.is_aware(found.expires_at)
    assert found.user._perm_cache == {
        "portal.start_thread",
        "portal.decide_interrupt",
        "portal.claim_interrupt",
        "portal.view_all_threads",
        "portal.view_history",
        "portal.export_history",
        "portal.view_metrics",
    }
    assert found.refusal() is None and found.user.is_active is True
    assert token_found(hash_token(token + "x")) is None


def test_a_revoked_token_is_refused_saying_when(client, reviewer):
    row, token = api_token_create(user=reviewer)
    ApiToken.objects.filter(pk=row.pk).update(revoked_at=timezone.now(), revoked_reason="it leaked")
    revoked = ApiToken.objects.get(pk=row.pk).revoked_at

    response = get(client, token)

    assert response.status_code == 401
    assert response.json()["detail"] == (
        f"This token was revoked at {revoked:%Y-%m-%d %H:%M:%S} UTC: it leaked."
    )
