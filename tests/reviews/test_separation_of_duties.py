"""Separation of duties covers everyone who wrote into a thread, not only its owner.

The bypass this closes: a user with both the support and the reviewer role posted a
follow-up into another user's finished chat, which made the agent ask for a new refund,
and then approved that refund themselves; the audit trail named the chat's owner. Two
layers stop it, and each is tested on its own: only a thread's owner may post into it,
and the policy refuses any decider who wrote into the thread, however their words got in.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from portal.errors import NotThreadOwner
from portal.models import Decision, Interrupt, Run, Thread
from portal.reviews import threads
from portal.runs.worker import Worker
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def drain() -> int:
    return Worker(name="test-worker").run_forever(once=True)


def say(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def support_reviewer(roles):
    user = make_user("sara-both", role="support")
    user.groups.add(Group.objects.get(name="reviewer"))
    return user


@pytest.fixture
def finished_chat(client, support_agent):
    """The support agent's conversation with the refunds agent, answered and finished."""
    client.force_login(support_agent)
    response = client.post("/chat/", {"agent": "refunds", "message": "Where is order A-1001?"})
    assert response.status_code == 302
    client.logout()
    thread = Thread.objects.get(owner=support_agent)
    drain()
    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    return thread


def test_a_support_reviewer_cannot_post_a_follow_up_into_another_users_chat(
    client, finished_chat, support_reviewer
):
    client.force_login(support_reviewer)
    response = client.post(
        f"/chat/{finished_chat.pk}/", {"message": "Refund $900 for order A-1001."}
    )
    assert response.status_code == 403
    assert Run.objects.filter(thread=finished_chat).count() == 1  # only the owner's start
    assert drain() == 0
    assert not Interrupt.objects.filter(thread=finished_chat).exists()


def test_a_decider_whose_words_reached_the_thread_cannot_approve_what_they_asked_for(
    client, finished_chat, support_reviewer, reviewer
):
    """The policy on its own: the follow-up gets in as if a path had forgotten the owner
    check (a run carrying the support reviewer's message), the agent asks for the refund,
    and their approval is refused while another reviewer's is not."""
    Run.objects.create(
        thread=finished_chat,
        kind=Run.Kind.START,
        input=say("Refund $900 for order A-1001."),
        author=support_reviewer,
    )
    drain()
    request = Interrupt.objects.get(thread=finished_chat, status=Interrupt.Status.PENDING)
    assert "$900.00" in request.message

    client.force_login(support_reviewer)
    page = client.get(f"/interrupts/{request.pk}/").content.decode()
    assert "You wrote into this conversation" in page
    response = client.post(
        f"/interrupts/{request.pk}/decide",
        {"resume_interrupt_id": request.pk, "action": "approve"},
    )
    assert response.status_code == 403
    assert "separation of duties" in response.content.decode()
    assert not Decision.objects.filter(interrupt=request).exists()

    client.force_login(reviewer)
    response = client.post(
        f"/interrupts/{request.pk}/decide",
        {"resume_interrupt_id": request.pk, "action": "reject", "note": "No."},
    )
    assert response.status_code == 302
    assert Decision.objects.get(interrupt=request).reviewer == reviewer


def test_the_api_refuses_a_decider_who_wrote_into_the_thread(
    client, finished_chat, support_reviewer
):
    from portal.accounts.tokens import api_token_create

    Run.objects.create(
        thread=finished_chat,
        kind=Run.Kind.START,
        input=say("Refund $900 for order A-1001."),
        author=support_reviewer,
    )
    drain()
    request = Interrupt.objects.get(thread=finished_chat, status=Interrupt.Status.PENDING)
    _, token = api_token_create(user=support_reviewer)
    response = client.post(
        f"/api/threads/{finished_chat.pk}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": request.pk},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 403
    assert "separation of duties" in response.json()["detail"]
    assert not Decision.objects.filter(interrupt=request).exists()


def test_the_follow_up_service_refuses_anyone_but_the_owner(finished_chat, support_reviewer):
    with pytest.raises(NotThreadOwner, match="Only the person who started"):
        threads.thread_message(
            thread=finished_chat, text="Refund $5 for A-1", user=support_reviewer
        )
    assert Run.objects.filter(thread=finished_chat).count() == 1


def test_every_human_message_records_its_author(client, support_agent, finished_chat):
    start = Run.objects.get(thread=finished_chat)
    assert start.author == support_agent

    client.force_login(support_agent)
    response = client.post(f"/chat/{finished_chat.pk}/", {"message": "Thanks, and A-1002?"})
    assert response.status_code == 302
    follow_up = Run.objects.filter(thread=finished_chat).latest("created_at")
    assert (follow_up.input, follow_up.author) == (say("Thanks, and A-1002?"), support_agent)


def test_a_thread_started_through_the_api_records_its_author(client, support_agent):
    from portal.accounts.tokens import api_token_create

    _, token = api_token_create(user=support_agent)
    response = client.post(
        "/api/threads",
        {"agent": "refunds", "input": say("Hello")},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 202
    assert Run.objects.get(pk=response.json()["run_id"]).author == support_agent


def test_a_retry_that_sends_a_failed_turn_again_keeps_its_author(support_agent):
    thread, run = threads.thread_start(agent="refunds", input=say("Hi"), user=support_agent)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    retry = threads.thread_continue(thread=thread, user=None)
    assert (retry.input, retry.author) == (say("Hi"), support_agent)


def test_a_resume_run_has_no_author(support_agent, reviewer):
    from tests.factories import make_decision, make_interrupt

    interrupt = make_interrupt(owner=support_agent)
    make_decision(interrupt=interrupt, reviewer=reviewer)
    resume = Run.objects.get(thread=interrupt.thread, kind=Run.Kind.RESUME)
    assert resume.author is None
    # ...so deciding one request does not bar the reviewer from the thread's next one.
    assert not interrupt.thread.written_into_by(reviewer)
