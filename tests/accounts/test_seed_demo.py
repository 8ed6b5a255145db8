"""``manage.py seed_demo``: demo users for a demo, never on a production deployment, and
never at the expense of an account that exists."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from portal.accounts.groups import DEMO_USERS
from portal.models import Thread

pytestmark = pytest.mark.django_db


def seed(*args: str, capsys: pytest.CaptureFixture[str]) -> str:
    call_command("seed_demo", *args)
    return capsys.readouterr().out


def test_seed_demo_is_refused_with_debug_off_and_creates_nothing(settings):
    settings.DEBUG = False

    with pytest.raises(CommandError, match="DEBUG is off") as refusal:
        call_command("seed_demo")

    assert "--force" in str(refusal.value)
    assert not get_user_model().objects.exists()
    assert not Thread.objects.exists()


def test_seed_demo_with_force_runs_with_debug_off(settings, capsys):
    settings.DEBUG = False

    out = seed("--force", capsys=capsys)

    assert "password: admin-demo-pass" in out
    assert get_user_model().objects.get(username="admin").check_password("admin-demo-pass")


def test_seed_demo_creates_one_user_per_role_with_the_printed_password(settings, capsys):
    settings.DEBUG = True

    out = seed(capsys=capsys)

    for username, (role, password) in DEMO_USERS.items():
        user = get_user_model().objects.get(username=username)
        assert user.check_password(password)
        assert f"{username:<10} password: {password}" in out
        assert user.is_superuser == (role is None)
        assert [g.name for g in user.groups.all()] == ([role] if role else [])


def test_seed_demo_never_resets_the_password_of_an_existing_user(settings, capsys, roles):
    settings.DEBUG = True
    admin = get_user_model().objects.create_user(username="admin", password="ops-own-secret")
    admin.groups.add(roles["auditor"])

    out = seed(capsys=capsys)

    admin.refresh_from_db()
    assert admin.check_password("ops-own-secret")
    assert not admin.check_password("admin-demo-pass")
    assert not admin.is_superuser and not admin.is_staff
    assert [g.name for g in admin.groups.all()] == ["auditor"]
    assert "admin      (existing user: left unchanged)" in out
    assert "admin-demo-pass" not in out


def test_running_seed_demo_again_keeps_a_changed_password(settings, capsys):
    settings.DEBUG = True
    seed(capsys=capsys)
    reviewer = get_user_model().objects.get(username="reviewer")
    reviewer.set_password("changed-after-the-demo-began")
    reviewer.save()

    out = seed(capsys=capsys)

    reviewer.refresh_from_db()
    assert reviewer.check_password("changed-after-the-demo-began")
    assert "reviewer   (existing user: left unchanged)" in out
    assert "support    password: support-demo-pass" in out  # unchanged, still the demo one


def test_the_demo_emails_every_event_so_make_run_shows_notifications(settings, capsys):
    from django.core import mail

    from portal.models import Subscription
    from portal.notify.notifier import Notifier
    from portal.runs.worker import Worker

    settings.DEBUG = True
    settings.PORTAL_MODEL = "scripted"

    out = seed(capsys=capsys)
    seed(capsys=capsys)  # again: still one subscription
    Worker(name="demo").run_forever(once=True)  # the demo's requests reach the queue
    Notifier(name="demo").run_forever(once=True)

    assert "every event is emailed to reviewers@example.com" in out
    assert Subscription.objects.count() == 1
    subjects = [m.subject for m in mail.outbox if m.to == ["reviewers@example.com"]]
    assert subjects and all(s.startswith("New request from ") for s in subjects)
