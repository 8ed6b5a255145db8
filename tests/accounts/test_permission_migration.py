"""Upgrading keeps what each group could do: the migration that splits the capabilities
into their own permissions grants the new ones to whoever held the one they came from."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.factories import make_user

BEFORE = ("portal", "0012_interrupt_search_statistics")
AFTER = ("portal", "0013_permissions_per_capability")
NEW = ["claim_interrupt", "take_over_claim", "export_history", "view_metrics"]


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


@pytest.fixture
def back_to_the_latest_afterwards():
    # Later migrations change tables too; the tests after this one need all of them.
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_latest_afterwards")
def test_upgrading_grants_the_new_permissions_to_whoever_could_do_the_same_before():
    _migrate(BEFORE)
    # A database from before: the new permissions do not exist yet.
    Permission.objects.filter(content_type__app_label="portal", codename__in=NEW).delete()
    deciders = Group.objects.create(name="old-reviewers")
    deciders.permissions.add(Permission.objects.get(codename="decide_interrupt"))
    readers = Group.objects.create(name="old-auditors")
    readers.permissions.add(Permission.objects.get(codename="view_history"))
    solo = make_user("solo-reader")
    solo.user_permissions.add(Permission.objects.get(codename="view_history"))
    starters = Group.objects.create(name="old-support")
    starters.permissions.add(Permission.objects.get(codename="start_thread"))

    _migrate(AFTER)

    def codenames(holder_perms) -> set[str]:
        return set(holder_perms.values_list("codename", flat=True))

    assert codenames(deciders.permissions) == {"decide_interrupt", "claim_interrupt"}
    assert codenames(readers.permissions) == {"view_history", "export_history", "view_metrics"}
    assert codenames(solo.user_permissions) == {"view_history", "export_history", "view_metrics"}
    assert codenames(starters.permissions) == {"start_thread"}
    # Taking over claims was an is_staff privilege; nobody gets it by upgrading.
    assert not Permission.objects.get(codename="take_over_claim").group_set.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_latest_afterwards")
def test_upgrading_lets_whoever_audits_browse_the_audit_trail_and_nobody_else():
    _migrate(("portal", "0020_interrupt_tool"))
    Permission.objects.filter(
        content_type__app_label="portal", codename="view_audit_trail"
    ).delete()
    readers = Group.objects.create(name="old-auditors")
    readers.permissions.add(Permission.objects.get(codename="view_history"))
    deciders = Group.objects.create(name="old-reviewers")
    deciders.permissions.add(
        *Permission.objects.filter(codename__in=["decide_interrupt", "view_history"])
    )
    solo = make_user("solo-auditor")
    solo.user_permissions.add(Permission.objects.get(codename="view_history"))

    _migrate(("portal", "0024_audit_events_and_worker_heartbeats"))

    trail = Permission.objects.get(content_type__app_label="portal", codename="view_audit_trail")
    assert set(trail.group_set.values_list("name", flat=True)) == {"old-auditors"}
    assert list(trail.user_set.values_list("username", flat=True)) == ["solo-auditor"]
