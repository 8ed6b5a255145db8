"""The thread page's retry and cancel buttons, and the views behind them: right role,
stranger (404), read-only role (403), wrong method (405), bad id."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission

from portal.models import Interrupt, Run, Thread
from tests.factories import make_interrupt, make_thread

pytestmark = pytest.mark.django_db


def _failed(owner) -> Thread:
    thread = make_thread(agent="refunds", owner=owner)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    return Thread.objects.get(pk=thread.pk)


def test_the_owner_sees_retry_on_a_failed_thread_and_retrying_queues_a_run(client, support_agent):
    thread = _failed(support_agent)
    client.force_login(support_agent)

    page = client.get(f"/threads/{thread.pk}/").content.decode()
    assert "Retry from the last checkpoint" in page

    response = client.post(f"/threads/{thread.pk}/retry", follow=True)

    assert response.redirect_chain == [(f"/threads/{thread.pk}/", 302)]
    assert "Retrying from the last checkpoint" in response.content.decode()
    assert Run.objects.get(thread=thread).kind == Run.Kind.CONTINUE


def test_retrying_from_the_chat_returns_to_the_chat(client, support_agent):
    thread = _failed(support_agent)
    client.force_login(support_agent)
    assert "Retry from the last checkpoint" in client.get(f"/chat/{thread.pk}/").content.decode()

    response = client.post(f"/threads/{thread.pk}/retry", {"back": "chat"})

    assert response["Location"] == f"/chat/{thread.pk}/"


def test_a_reviewer_reads_the_thread_without_a_retry_button_and_gets_403(
    client, support_agent, reviewer
):
    thread = _failed(support_agent)
    client.force_login(reviewer)

    page = client.get(f"/threads/{thread.pk}/").content.decode()
    assert "Retry from the last checkpoint" not in page
    assert "Cancel this conversation" not in page
    assert client.post(f"/threads/{thread.pk}/retry").status_code == 403
    assert client.post(f"/threads/{thread.pk}/cancel", {"confirm": "yes"}).status_code == 403
    assert not Run.objects.filter(thread=thread).exists()


def test_the_retry_permission_shows_the_button_to_someone_else(client, support_agent, reviewer):
    thread = _failed(support_agent)
    reviewer.user_permissions.add(Permission.objects.get(codename="retry_thread"))
    client.force_login(reviewer)

    assert "Retry from the last checkpoint" in client.get(f"/threads/{thread.pk}/").content.decode()
    assert client.post(f"/threads/{thread.pk}/retry").status_code == 302
    assert Run.objects.filter(thread=thread, kind=Run.Kind.CONTINUE).count() == 1


def test_a_stranger_gets_404_and_a_bad_id_404(client, support_agent, other_support_agent):
    thread = _failed(support_agent)
    client.force_login(other_support_agent)
    for action in ("retry", "cancel"):
        assert client.post(f"/threads/{thread.pk}/{action}").status_code == 404
        assert client.post(f"/threads/not-a-uuid/{action}").status_code == 404


def test_retry_and_cancel_answer_only_post(client, support_agent):
    thread = _failed(support_agent)
    client.force_login(support_agent)
    for action in ("retry", "cancel"):
        assert client.get(f"/threads/{thread.pk}/{action}").status_code == 405


def test_retrying_a_thread_that_has_not_failed_says_why(client, support_agent):
    thread = make_thread(agent="refunds", owner=support_agent)
    client.force_login(support_agent)

    response = client.post(f"/threads/{thread.pk}/retry", follow=True)

    assert "Not retried: thread" in response.content.decode()
    assert "only a failed thread can be retried" in response.content.decode()


def test_cancelling_asks_first_then_cancels_and_the_page_says_who(client, support_agent):
    request = make_interrupt(owner=support_agent)
    thread = request.thread
    client.force_login(support_agent)
    assert "Cancel this conversation" in client.get(f"/threads/{thread.pk}/").content.decode()

    asked = client.post(f"/threads/{thread.pk}/cancel")
    assert asked.status_code == 200
    assert "Cancel this conversation?" in asked.content.decode()
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.INTERRUPTED

    response = client.post(f"/threads/{thread.pk}/cancel", {"confirm": "yes"}, follow=True)

    page = response.content.decode()
    assert "Cancelled. Nothing more runs in this conversation." in page
    assert 'id="cancelled-notice"' in page and "by sam-support" in page
    notice = re.search(r'<div[^>]*id="cancelled-notice"[^>]*>(.*?)</div>', page, re.S)
    words = " ".join(re.sub(r"<[^>]+>", "", notice[1]).split())  # its text, as copied
    assert re.search(r" UTC Nothing more runs in this conversation\.$", words), words
    assert "Cancel this conversation" not in page
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.CANCELLED


def test_cancelling_twice_says_it_was_already_cancelled(client, support_agent):
    thread = make_interrupt(owner=support_agent).thread
    client.force_login(support_agent)
    client.post(f"/threads/{thread.pk}/cancel", {"confirm": "yes"})

    response = client.post(f"/threads/{thread.pk}/cancel", {"confirm": "yes"}, follow=True)

    assert "Not cancelled: thread" in response.content.decode()
    assert "already cancelled by sam-support" in response.content.decode()
