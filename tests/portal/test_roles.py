"""The permissions backend: a user's own and their groups' permissions in one written-out
query, read afresh for each request, the same as Django's ModelBackend reads them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal import roles
from portal.models import Decision
from tests.factories import make_interrupt, make_user
from tests.portal.test_api import api_for, resume_body, resume_url

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
