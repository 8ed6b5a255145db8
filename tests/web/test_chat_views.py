"""The support chat: starting a conversation and following up queue runs (no request
runs an agent), the page rebuilds the transcript from the checkpoints, and only support
staff use it."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Message
from portal.models import Run, Thread
from tests.factories import _put, make_interrupt, make_thread

pytestmark = pytest.mark.django_db
REFUND = "Refund $42.50 for order A-1001, it arrived broken."


def _finish(thread: Thread) -> None:
    Run.objects.filter(thread=thread).update(status=Run.Status.SUCCEEDED)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.DONE)


def test_the_chat_url_is_named_chat():
    assert reverse("chat") == "/chat/"


def test_a_support_user_sees_the_agents_to_pick_from(client, support_agent):
    client.force_login(support_agent)
    html = client.get("/chat/").content.decode()
    for agent in ("refunds", "transfers", "accounts", "contact"):
        assert f'value="{agent}"' in html
    assert '<label for="id_message"' in html


def test_the_example_link_prefills_the_form(client, support_agent):
    client.force_login(support_agent)
    html = client.get("/chat/", {"agent": "refunds", "example": "1"}).content.decode()
    assert REFUND in html


def test_posting_a_message_starts_a_thread_queues_its_run_and_opens_it(client, support_agent):
    client.force_login(support_agent)
    response = client.post("/chat/", {"agent": "refunds", "message": REFUND})
    thread = Thread.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("chat_thread", args=[thread.pk])
    assert (thread.owner, thread.agent, thread.title) == (support_agent, "refunds", REFUND)
    run = Run.objects.get(thread=thread)
    assert (run.kind, run.status) == (Run.Kind.START, Run.Status.QUEUED)
    assert run.input == {"messages": [{"role": "user", "content": REFUND}]}


def test_an_empty_message_or_unknown_agent_is_refused_and_nothing_is_written(client, support_agent):
    client.force_login(support_agent)
    assert client.post("/chat/", {"agent": "refunds", "message": "  "}).status_code == 400
    response = client.post("/chat/", {"agent": "nope", "message": "hi"})
    assert response.status_code == 400
    assert "nope" in response.content.decode()
    assert not Thread.objects.exists()


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "outsider"])
def test_roles_that_cannot_start_conversations_get_403(client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/chat/").status_code == 403
    assert client.post("/chat/", {"agent": "refunds", "message": "hi"}).status_code == 403
    assert not Thread.objects.exists()


def test_an_anonymous_user_is_sent_to_login(client):
    response = client.get("/chat/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_chat_refuses_other_methods_with_405(client, support_agent):
    client.force_login(support_agent)
    assert client.put("/chat/").status_code == 405
    thread = make_thread(owner=support_agent)
    assert client.delete(f"/chat/{thread.pk}/").status_code == 405


def test_a_paused_conversation_is_rebuilt_from_the_checkpoint_with_the_waiting_notice(
    client, support_agent
):
    interrupt = make_interrupt(owner=support_agent, text=REFUND)
    client.force_login(support_agent)
    response = client.get(f"/chat/{interrupt.thread_id}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert REFUND in html
    assert "Issue refund (order id: A-1001, amount: $42.50)" in html  # the call that asked
    assert "42.5)" not in html  # amounts read one way: $42.50
    assert "Waiting for approval" in html
    assert interrupt.message in html
    assert f'ws-connect="/ws/threads/{interrupt.thread_id}/"' in html
    assert 'data-open="0"' in html


def test_another_support_users_conversation_is_404(client, support_agent, other_support_agent):
    thread = make_thread(owner=support_agent)
    client.force_login(other_support_agent)
    assert client.get(f"/chat/{thread.pk}/").status_code == 404
    assert client.post(f"/chat/{thread.pk}/", {"message": "hi"}).status_code == 404


def test_a_reviewer_reads_conversations_on_the_thread_page_not_in_the_chat(
    client, support_agent, reviewer
):
    thread = make_thread(owner=support_agent)
    client.force_login(reviewer)
    assert client.get(f"/chat/{thread.pk}/").status_code == 403


@pytest.mark.parametrize("bad", ["not-a-uuid", str(uuid.uuid4())], ids=["not-a-uuid", "unknown"])
def test_a_bad_or_unknown_thread_id_is_404(client, support_agent, bad):
    client.force_login(support_agent)
    assert client.get(f"/chat/{bad}/").status_code == 404


def test_a_follow_up_on_a_finished_conversation_queues_a_new_turn(client, support_agent):
    thread = make_thread(owner=support_agent)
    _finish(thread)
    client.force_login(support_agent)
    response = client.post(f"/chat/{thread.pk}/", {"message": "And order A-1002 too."})
    assert response.status_code == 302
    run = Run.objects.filter(thread=thread, status=Run.Status.QUEUED).get()
    assert run.input == {"messages": [{"role": "user", "content": "And order A-1002 too."}]}


def test_a_follow_up_while_the_agent_waits_for_approval_is_refused(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    response = client.post(f"/chat/{interrupt.thread_id}/", {"message": "Hurry up"})
    assert response.status_code == 400
    assert "wait until it has finished" in response.content.decode()
    assert not Run.objects.filter(thread_id=interrupt.thread_id).exists()


def _composer_why(html: str) -> str:
    """The text under the closed composer, and whether it is shown."""
    start = html.index('<p class="help" data-closed-why')
    tag_end = html.index(">", start)
    return html[start:tag_end] + "|" + html[tag_end + 1 : html.index("</p>", tag_end)]


@pytest.mark.parametrize(
    "status, why",
    [
        ("paused", "once a reviewer has answered the request above"),
        (Thread.Status.RUNNING, "once the agent has finished this turn"),
        (Thread.Status.FAILED, "stopped on an error: you can write again once it is retried"),
        (Thread.Status.CANCELLED, "was cancelled"),
    ],
)
def test_a_closed_composer_says_what_it_waits_for(client, support_agent, status, why):
    if status == "paused":
        thread = make_interrupt(owner=support_agent).thread
    else:
        thread = make_thread(owner=support_agent)
        Thread.objects.filter(pk=thread.pk).update(status=status)
    client.force_login(support_agent)

    html = client.get(f"/chat/{thread.pk}/").content.decode()

    shown = _composer_why(html)
    assert why in shown and " hidden" not in shown.split("|")[0]
    # The transcript carries the same reason, for live.js to copy when the state changes.
    region = re.search(r'<div id="transcript"[^>]*data-why="([^"]*)"', html)
    assert region is not None and why in region.group(1)


def test_an_open_composer_hides_its_reason(client, support_agent):
    thread = make_thread(owner=support_agent)
    _finish(thread)
    client.force_login(support_agent)

    html = client.get(f"/chat/{thread.pk}/").content.decode()

    assert " hidden" in _composer_why(html).split("|")[0]


# --- withdrawing a request ---------------------------------------------------------------


def test_the_waiting_notice_offers_its_owner_a_way_to_withdraw(client, support_agent, reviewer):
    interrupt = make_interrupt(owner=support_agent)
    withdraw = f"/chat/{interrupt.thread_id}/withdraw"
    client.force_login(support_agent)
    assert f'action="{withdraw}"' in client.get(f"/chat/{interrupt.thread_id}/").content.decode()
    client.force_login(reviewer)
    page = client.get(f"/threads/{interrupt.thread_id}/").content.decode()
    assert f'action="{withdraw}"' not in page


def test_the_owner_withdraws_a_pending_request_and_the_agent_resumes_with_a_decline(
    client, support_agent
):
    from portal.models import Decision, Interrupt

    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    response = client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"}, follow=True)

    assert response.status_code == 200
    assert "Request withdrawn" in response.content.decode()
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.CANCELLED
    decision = Decision.objects.get(interrupt=interrupt)
    assert (decision.outcome, decision.reviewer) == (Decision.Outcome.CANCELLED, support_agent)
    run = Run.objects.get(thread_id=interrupt.thread_id, kind=Run.Kind.RESUME)
    assert run.input == {"resume": None, "resume_interrupt_id": interrupt.pk}


def test_withdrawing_asks_for_confirmation_first_and_records_nothing_until_confirmed(
    client, support_agent
):
    from portal.models import Decision, Interrupt

    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)

    response = client.post(f"/chat/{interrupt.thread_id}/withdraw")

    assert response.status_code == 200
    page = response.content.decode()
    assert "Withdraw this request?" in page
    assert '<input type="hidden" name="confirm" value="yes">' in page
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not Decision.objects.exists()
    assert not Run.objects.filter(thread_id=interrupt.thread_id, kind=Run.Kind.RESUME).exists()


def test_a_withdrawal_reads_as_withdrawn_by_its_requester_in_transcript_and_history(
    client, support_agent, reviewer
):
    from portal.models import Checkpoint

    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"})
    # The agent's decline as the refunds tool words it, resumed with no answer.
    thread = interrupt.thread
    thread.refresh_from_db()
    _put(
        thread,
        CheckpointWrite(
            status=ThreadStatus.DONE,
            next_node=None,
            new_messages=[
                Message(
                    role="tool",
                    content='{"status": "declined", "reason": "the request was cancelled"}',
                    name="issue_refund",
                    tool_call_id=interrupt.tool_call_id,
                ).to_dict()
            ],
        ),
    )
    assert Checkpoint.objects.filter(thread=thread).count() >= 3

    chat = client.get(f"/chat/{interrupt.thread_id}/").content.decode()
    assert "Issue refund withdrawn by its requester, sam-support." in chat
    assert "declined" not in chat
    assert "{&quot;status&quot;" not in chat

    client.force_login(reviewer)
    timeline = client.get(f"/threads/{interrupt.thread_id}/").content.decode()
    assert "<strong>Withdrawn</strong> by its requester, sam-support" in timeline
    history = client.get("/history/").content.decode()
    assert "Withdrawn by its requester" in history


def test_withdrawing_twice_records_one_cancellation_and_says_why(client, support_agent):
    from portal.models import Decision

    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"})
    response = client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"}, follow=True)

    assert "nothing was withdrawn" in response.content.decode()
    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread_id=interrupt.thread_id, kind=Run.Kind.RESUME).count() == 1


@pytest.mark.parametrize(
    ("persona", "status"),
    [("reviewer", 403), ("auditor", 403), ("other_support_agent", 404), ("outsider", 404)],
)
def test_only_the_owner_may_withdraw(client, request, support_agent, persona, status):
    from portal.models import Interrupt

    interrupt = make_interrupt(owner=support_agent)
    client.force_login(request.getfixturevalue(persona))
    response = client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"})
    assert response.status_code == status
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_withdraw_needs_post_a_login_and_a_real_thread(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    url = f"/chat/{interrupt.thread_id}/withdraw"
    assert client.post(url).status_code == 302  # anonymous: to the login page
    client.force_login(support_agent)
    assert client.get(url).status_code == 405
    assert client.post("/chat/not-a-uuid/withdraw").status_code == 404
    assert client.post(f"/chat/{uuid.uuid4()}/withdraw").status_code == 404


def test_the_request_page_of_a_withdrawn_request_says_its_requester_withdrew_it(
    client, support_agent, reviewer
):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    client.post(f"/chat/{interrupt.thread_id}/withdraw", {"confirm": "yes"})

    client.force_login(reviewer)
    page = client.get(reverse("interrupt_detail", args=[interrupt.pk])).content.decode()

    assert "<strong>Withdrawn</strong> by its requester, sam-support" in page
    assert "Cancelled" not in page


def test_the_open_chat_names_its_agent_in_words_not_its_code(client, support_agent):
    thread = make_thread(owner=support_agent, agent="refunds")
    client.force_login(support_agent)

    page = client.get(reverse("chat_thread", args=[thread.pk])).content.decode()

    assert '<span class="tag">Refunds</span>' in page
    assert '<span class="tag">refunds</span>' not in page
