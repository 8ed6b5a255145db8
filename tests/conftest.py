"""Personas and shared fixtures. Data comes from factories in tests/factories.py."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(autouse=True)
def _stop_listening():
    """A test that waited leaves no LISTEN connection behind: it would keep the test
    database from being dropped."""
    yield
    from django.conf import settings

    if settings.configured:
        from portal.models import waiting

        waiting.stop()


@pytest.fixture
def roles(db):
    from portal.accounts.groups import ensure_roles

    return {g.name: g for g in ensure_roles()}


def _user(django_user_model, username, group=None, **extra):
    user = django_user_model.objects.create_user(
        username=username, password="pw-" + username, **extra
    )
    if group is not None:
        user.groups.add(group)
    return user


@pytest.fixture
def support_agent(django_user_model, roles):
    return _user(django_user_model, "sam-support", roles["support"])


@pytest.fixture
def other_support_agent(django_user_model, roles):
    return _user(django_user_model, "olga-support", roles["support"])


@pytest.fixture
def reviewer(django_user_model, roles):
    return _user(django_user_model, "rita-reviewer", roles["reviewer"])


@pytest.fixture
def second_reviewer(django_user_model, roles):
    return _user(django_user_model, "rob-reviewer", roles["reviewer"])


@pytest.fixture
def auditor(django_user_model, roles):
    return _user(django_user_model, "abe-auditor", roles["auditor"])


@pytest.fixture
def outsider(django_user_model, roles):
    return _user(django_user_model, "otto-outsider")


@pytest.fixture
def admin_user(django_user_model, roles):
    return _user(django_user_model, "ada-admin", is_staff=True, is_superuser=True)


# --- browser tests: Debian's Chromium through Playwright ---------------------------------
@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


def pytest_collection_modifyitems(config, items):
    # PostgreSQL-only tests run in CI's second pass; on SQLite they are skipped, saying why.
    from django.conf import settings

    if not settings.configured:  # run with -p no:django, as tests/agents can be
        return
    if not settings.USING_POSTGRES:
        skip = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://...")
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip)
