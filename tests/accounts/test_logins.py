"""Failed logins are throttled per account and per client address (django-axes), on the
portal's login page and the admin's alike."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import reverse

from portal.accounts.logins import client_ip

pytestmark = pytest.mark.django_db

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"


def _attempt(client, url, username, password, ip="10.0.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip)


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_two_hundred_wrong_passwords_then_the_right_one_does_not_log_in(client, reviewer):
    for n in range(200):
        _attempt(client, LOGIN, "rita-reviewer", f"wrong-{n}")

    response = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer")

    assert response.status_code == 429
    body = response.content.decode()
    assert "Too many failed logins for rita-reviewer, try again in 15 minutes." in body
    assert response["Retry-After"] == "900"
    assert not _logged_in(client)
    assert client.get(reverse("home")).status_code == 302


def test_two_hundred_wrong_passwords_then_the_right_one_does_not_log_into_the_admin(
    client, admin_user
):
    for n in range(200):
        _attempt(client, ADMIN_LOGIN, "ada-admin", f"wrong-{n}")

    response = _attempt(client, ADMIN_LOGIN, "ada-admin", "pw-ada-admin")

    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert not _logged_in(client)
    assert client.get("/admin/").status_code == 302


def test_an_account_is_locked_whichever_addresses_the_guesses_come_from(client, reviewer):
    for n in range(10):
        _attempt(client, LOGIN, "rita-reviewer", f"wrong-{n}", ip=f"10.0.1.{n}")

    response = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer", ip="10.0.2.1")

    assert response.status_code == 429
    assert not _logged_in(client)


def test_an_address_guessing_many_accounts_is_locked_but_others_still_log_in(client, reviewer):
    for n in range(10):
        _attempt(client, LOGIN, f"someone-{n}", "guess", ip="10.0.3.3")

    refused = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer", ip="10.0.3.3")
    assert refused.status_code == 429
    assert not _logged_in(client)

    allowed = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer", ip="10.0.4.4")
    assert allowed.status_code == 302
    assert _logged_in(client)


def test_a_few_mistakes_then_the_right_password_logs_in(client, reviewer):
    for n in range(9):
        assert _attempt(client, LOGIN, "rita-reviewer", f"wrong-{n}").status_code == 200

    response = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer")

    assert response.status_code == 302
    assert _logged_in(client)


def test_the_limit_and_cool_off_come_from_settings(client, reviewer, settings):
    from datetime import timedelta

    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=1)
    for n in range(3):
        _attempt(client, LOGIN, "rita-reviewer", f"wrong-{n}")

    response = _attempt(client, LOGIN, "rita-reviewer", "pw-rita-reviewer")

    assert response.status_code == 429
    assert "try again in 1 minute." in response.content.decode()


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "1.1.1.1", "192.0.2.9"),
        (1, "6.6.6.6, 1.1.1.1", "1.1.1.1"),
        (2, "6.6.6.6, 1.1.1.1, 10.0.0.2", "1.1.1.1"),
        (1, "", "192.0.2.9"),
    ],
)
def test_the_client_address_trusts_only_as_many_forwarded_hops_as_there_are_proxies(
    settings, proxies, forwarded, expected
):
    settings.PORTAL_TRUSTED_PROXIES = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.9", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected
