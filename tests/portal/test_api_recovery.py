"""Retrying and cancelling a thread over the JSON API: the thread page's services, the
same refusals as status codes."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.api import api_token_create
from portal.models import Interrupt, Run, Thread
from tests.factories import make_interrupt, make_thread

pytestmark = pytest.mark.django_db


def _client(user, scopes=("read", "start")) -> tuple[Client, dict[str, str]]:
    _, token = api_token_create(user=user, scopes=scopes)
    return Client(), {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _failed(owner) -> Thread:
    thread = make_thread(agent="refunds", owner=owner)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    return thread


def test_the_owner_retries_a_failed_thread(support_agent):
    thread = _failed(support_agent)
    client, auth = _client(support_agent)

    response = client.post(f"/api/threads/{thread.pk}/retry", **auth)

    assert response.status_code == 202, response.content
    run = Run.objects.get(thread=thread)
    assert response.json() == {"thread_id": str(thread.pk), "run_id": str(run.pk)}
    assert run.kind == Run.Kind.CONTINUE
    again = client.post(f"/api/threads/{thread.pk}/retry", **auth)
    assert again.status_code == 409
    assert again.json()["detail"].startswith("Not retried: thread")


def test_a_reader_who_is_not_the_owner_gets_403_naming_the_permission(support_agent, reviewer):
    thread = _failed(support_agent)
    client, auth = _client(reviewer)

    response = client.post(f"/api/threads/{thread.pk}/retry", **auth)

    assert response.status_code == 403
    assert "portal.retry_thread" in response.json()["detail"]
    assert not Run.objects.filter(thread=thread).exists()


def test_a_token_without_the_start_scope_is_refused(support_agent):
    thread = _failed(support_agent)
    client, auth = _client(support_agent, scopes=("read", "decide"))

    response = client.post(f"/api/threads/{thread.pk}/retry", **auth)

    assert response.status_code == 403
    assert "lacks the 'start' scope" in response.json()["detail"]


def test_the_owner_cancels_a_paused_thread_and_a_second_cancel_is_409(support_agent):
    request = make_interrupt(owner=support_agent)
    client, auth = _client(support_agent)

    response = client.post(f"/api/threads/{request.thread_id}/cancel", **auth)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["cancelled_by"]) == ("cancelled", "sam-support")
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.CANCELLED
    again = client.post(f"/api/threads/{request.thread_id}/cancel", **auth)
    assert again.status_code == 409
    assert "already cancelled by sam-support" in again.json()["detail"]


def test_a_thread_you_cannot_see_is_404(support_agent, other_support_agent):
    thread = _failed(support_agent)
    client, auth = _client(other_support_agent)
    for action in ("retry", "cancel"):
        assert client.post(f"/api/threads/{thread.pk}/{action}", **auth).status_code == 404
