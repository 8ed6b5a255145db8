"""Retrying and cancelling a thread over the API: the same services as the thread page and
the admin, behind the ``start`` scope, each refusal named."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from portal.accounts.tokens import api_token_create
from portal.models import Interrupt, Run, Thread
from tests.api.test_api import Api, api_for
from tests.factories import make_interrupt, make_thread

pytestmark = pytest.mark.django_db


def _failed(owner) -> Thread:
    thread = make_thread(owner=owner)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    thread.refresh_from_db()
    return thread


def test_the_owner_retries_a_failed_thread(client, support_agent):
    thread = _failed(support_agent)

    response = api_for(client, support_agent).post(f"/api/threads/{thread.pk}/retry")

    assert response.status_code == 202, response.content
    run = Run.objects.get(pk=response.json()["run_id"])
    assert (run.thread_id, run.kind, run.status) == (thread.pk, "continue", "queued")


def test_retrying_a_thread_that_did_not_fail_is_refused_with_409(client, support_agent):
    thread = make_thread(owner=support_agent)

    response = api_for(client, support_agent).post(f"/api/threads/{thread.pk}/retry")

    assert response.status_code == 409
    assert "only a failed thread can be retried" in response.json()["detail"]
    assert not Run.objects.filter(thread=thread).exists()


def test_someone_else_retries_only_with_the_permission(client, support_agent, reviewer):
    thread = _failed(support_agent)

    refused = api_for(client, reviewer).post(f"/api/threads/{thread.pk}/retry")
    assert refused.status_code == 403
    assert "portal.retry_thread" in refused.json()["detail"]

    reviewer.user_permissions.add(Permission.objects.get(codename="retry_thread"))
    assert api_for(client, reviewer).post(f"/api/threads/{thread.pk}/retry").status_code == 202


def test_retrying_needs_the_start_scope(client, support_agent):
    thread = _failed(support_agent)
    token = Api(client, api_token_create(user=support_agent, scopes=["read", "decide"])[1])

    response = token.post(f"/api/threads/{thread.pk}/retry")

    assert response.status_code == 403
    assert "'start' scope" in response.json()["detail"]


def test_the_owner_cancels_a_paused_thread_and_its_request_leaves_the_queue(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = api_for(client, support_agent).post(f"/api/threads/{interrupt.thread_id}/cancel")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["cancelled_by"]) == ("cancelled", support_agent.username)
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.CANCELLED
    # Fail closed: nothing resumes the thread.
    assert not Run.objects.filter(thread_id=interrupt.thread_id, kind="resume").exists()


def test_cancelling_twice_is_refused_with_409_naming_who_did(client, support_agent):
    thread = make_thread(owner=support_agent)
    api = api_for(client, support_agent)
    api.post(f"/api/threads/{thread.pk}/cancel")

    response = api.post(f"/api/threads/{thread.pk}/cancel")

    assert response.status_code == 409
    assert f"already cancelled by {support_agent.username}" in response.json()["detail"]


def test_someone_else_may_not_cancel_without_the_permission(client, support_agent, reviewer):
    thread = make_thread(owner=support_agent)

    response = api_for(client, reviewer).post(f"/api/threads/{thread.pk}/cancel")

    assert response.status_code == 403
    assert "portal.cancel_thread" in response.json()["detail"]
    thread.refresh_from_db()
    assert thread.cancelled_at is None


def test_a_stranger_cannot_see_a_thread_to_cancel_it(client, support_agent, other_support_agent):
    thread = make_thread(owner=support_agent)

    response = api_for(client, other_support_agent).post(f"/api/threads/{thread.pk}/cancel")

    assert response.status_code == 404
