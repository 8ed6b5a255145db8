"""The permissions backend: a user's own and their groups' permissions in one written-out
query, read afresh for each request, the same as Django's ModelBackend reads them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.accounts import roles
from portal.models import Decision
from tests.api.test_api import api_for, resume_body, resume_url
from tests.factories import make_interrupt, make_user

pytestmark = pytest.mark.django_db


def test_own_and_group_permissions_come_in_one_query(reviewer):
    reviewer.user_permissions.add(Permission.objects.get(codename="take_over_claim"))
    user = get_user_model().objects.get(pk=reviewer.pk)  # as a request loads it

    with CaptureQueriesContext(connection) as queries:
        answers = [
            roles.can_decide(user),  # from the reviewer group
            roles.can_take_over_claims(user),  # the user's own
            roles.can_start(user),  # neither
            roles.can_claim(user),
        ]

    assert answers == [True, True, False, True]
    assert len(queries) == 1


def test_a_superuser_holds_every_permission_and_an_inactive_user_none(admin_user, reviewer):
    assert roles.can_take_over_claims(get_user_model().objects.get(pk=admin_user.pk))
    reviewer.is_active = False
    reviewer.save()
    assert not roles.can_decide(get_user_model().objects.get(pk=reviewer.pk))


def test_a_reviewer_taken_out_of_their_group_cannot_decide_on_their_next_request(client, reviewer):
    interrupt = make_interrupt()
    api = api_for(client, reviewer)
    assert api.get("/api/interrupts").status_code == 200  # permissions read once already

    reviewer.groups.clear()
    response = api.post(resume_url(interrupt), resume_body(interrupt, {"approved": True}))

    assert response.status_code == 403
    assert not Decision.objects.filter(interrupt=interrupt).exists()


def test_the_permissions_are_those_djangos_model_backend_reads(reviewer, auditor, support_agent):
    own = Permission.objects.get(codename="take_over_claim")
    reviewer.user_permissions.add(own)
    support_agent.groups.add(Group.objects.create(name="empty"))
    loner = make_user()
    loner.user_permissions.add(own, Permission.objects.get(codename="add_group"))
    admin = make_user(is_superuser=True)

    for user in (reviewer, auditor, support_agent, loner, make_user(), admin):
        ours = roles.PermissionsBackend().get_all_permissions(
            get_user_model().objects.get(pk=user.pk)
        )
        django = ModelBackend().get_all_permissions(get_user_model().objects.get(pk=user.pk))
        assert ours == django, user


def test_a_permission_of_the_users_own_taken_away_holds_on_their_next_request(client, reviewer):
    reviewer.groups.clear()
    reviewer.user_permissions.add(Permission.objects.get(codename="decide_interrupt"))
    interrupt = make_interrupt()
    api = api_for(client, reviewer)
    assert api.get("/api/interrupts").status_code == 200

    reviewer.user_permissions.clear()
    response = api.post(resume_url(interrupt), resume_body(interrupt, {"approved": True}))

    assert response.status_code == 403
    assert not Decision.objects.filter(interrupt=interrupt).exists()


# --- the portal's own name ----------------------------------------------------------------
# The history, its exports, the API and the audit trail call the portal's own actions
# "system": a person of that name would pass for it, and their decisions for expiries.


@pytest.mark.parametrize("name", ["system", "System", "SYSTEM"])
def test_the_admin_will_not_name_a_user_system(admin_client, name):
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": name, "password1": "x-long-pass-9", "password2": "x-long-pass-9"},
    )

    assert response.status_code == 200  # the form again, with the reason
    assert "is reserved" in response.content.decode()
    assert not get_user_model().objects.filter(username__iexact="system").exists()


def test_a_user_named_system_is_refused_however_it_is_created():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="'system' is reserved"):
        get_user_model().objects.create_user("system", password="x")
    assert not get_user_model().objects.filter(username="system").exists()


def test_a_user_cannot_be_renamed_system_but_one_who_had_the_name_keeps_working(reviewer):
    from django.core.exceptions import ValidationError

    reviewer.username = "System"
    with pytest.raises(ValidationError, match="'System' is reserved"):
        reviewer.save()
    assert get_user_model().objects.get(pk=reviewer.pk).username == "rita-reviewer"

    # Named before the name was reserved (bulk_create sends no signal): still saved.
    [old] = get_user_model().objects.bulk_create([get_user_model()(username="system")])
    old.is_active = False
    old.save()
    assert get_user_model().objects.get(username="system").is_active is False


def test_createsuperuser_will_not_take_the_name_either():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="reserved"):
        call_command("createsuperuser", "--noinput", username="System", email="a@b.c")
    assert not get_user_model().objects.filter(username__iexact="system").exists()


def test_other_names_and_existing_users_are_left_alone(reviewer):
    get_user_model().objects.create_user("systems", password="x")
    reviewer.first_name = "Rita"
    reviewer.save()  # an existing user is saved as before
    assert get_user_model().objects.filter(username="systems").exists()
