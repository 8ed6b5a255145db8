"""Who may open the history pages: the per-view checklist, and the decision page itself."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Message
from portal.runs.checkpointer import DjangoCheckpointer
from tests.factories import make_decision, make_interrupt

pytestmark = pytest.mark.django_db

LIST_VIEWS = ["history", "history_export_csv", "history_export_jsonl", "metrics"]


@pytest.fixture
def decided(support_agent, reviewer):
    """A decision on the support agent's thread."""
    interrupt = make_interrupt(
        owner=support_agent, message="Approve a refund for the broken kettle?"
    )
    return make_decision(interrupt=interrupt, reviewer=reviewer, note="Looks fine")


def _get(client, user, url):
    if user is not None:
        client.force_login(user)
    return client.get(url)


@pytest.mark.parametrize("name", LIST_VIEWS)
@pytest.mark.parametrize("persona", ["auditor", "reviewer", "admin_user"])
def test_auditors_reviewers_and_admins_can_open_the_history_pages(
    client, request, decided, name, persona
):
    response = _get(client, request.getfixturevalue(persona), reverse(name))
    assert response.status_code == 200


@pytest.mark.parametrize("name", LIST_VIEWS)
@pytest.mark.parametrize("persona", ["support_agent", "outsider"])
def test_users_without_the_history_permission_get_403(client, request, decided, name, persona):
    response = _get(client, request.getfixturevalue(persona), reverse(name))
    assert response.status_code == 403


@pytest.mark.parametrize("name", LIST_VIEWS)
def test_anonymous_visitors_are_sent_to_log_in(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", LIST_VIEWS)
def test_the_history_pages_refuse_post_with_405(client, auditor, name):
    client.force_login(auditor)
    assert client.post(reverse(name)).status_code == 405


@pytest.mark.parametrize("persona", ["auditor", "reviewer", "admin_user"])
def test_the_decision_page_opens_for_auditors_reviewers_and_admins(
    client, request, decided, persona
):
    response = _get(
        client, request.getfixturevalue(persona), reverse("decision_detail", args=[decided.pk])
    )
    assert response.status_code == 200
    assert "broken kettle" in response.content.decode()


def test_the_decision_page_is_403_for_the_support_agent_whose_thread_it_is(
    client, support_agent, decided
):
    response = _get(client, support_agent, reverse("decision_detail", args=[decided.pk]))
    assert response.status_code == 403


def test_the_decision_page_is_404_for_users_who_cannot_see_the_thread(
    client, other_support_agent, outsider, decided
):
    for user in (other_support_agent, outsider):
        assert _get(client, user, reverse("decision_detail", args=[decided.pk])).status_code == 404


def test_the_decision_page_sends_anonymous_visitors_to_log_in(client, decided):
    response = client.get(reverse("decision_detail", args=[decided.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_decision_page_refuses_post_with_405(client, auditor, decided):
    client.force_login(auditor)
    assert client.post(reverse("decision_detail", args=[decided.pk])).status_code == 405


def test_a_decision_that_does_not_exist_is_404(client, auditor):
    client.force_login(auditor)
    assert client.get(reverse("decision_detail", args=[987654])).status_code == 404
    assert client.get("/history/not-a-number/").status_code == 404


def test_the_decision_page_shows_the_request_the_answer_and_links_to_the_thread(
    client, auditor, decided
):
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decided.pk])).content.decode()
    assert reverse("thread_detail", kwargs={"thread_id": decided.thread_id}) in html
    assert "Approve a refund for the broken kettle?" in html  # the message
    assert "A-1001" in html  # the payload
    assert "&quot;approved&quot;: true" in html  # the value submitted
    assert "rita-reviewer" in html and "approved" in html
    assert decided.hash in html and decided.prev_hash in html
    assert "has not moved on" in html  # the resume has not run yet


def _resume_steps(decided) -> None:
    """The two steps a resume of ``decided``'s thread writes: the tool's result, the answer."""
    thread = decided.thread
    thread.refresh_from_db()
    reply = Message(
        role="tool", content='{"status": "refunded", "order_id": "A-1001"}', tool_call_id="c1"
    )
    answer = Message(role="assistant", content="Refund of $42.50 issued for A-1001.")
    checkpointer = DjangoCheckpointer()
    seq = checkpointer.put_sync(
        str(thread.pk),
        CheckpointWrite(
            status=ThreadStatus.RUNNING,
            next_node="MAIN",
            new_messages=[reply.to_dict()],
            node="TOOL",
        ),
        parent_seq=thread.last_seq,
    )
    checkpointer.put_sync(
        str(thread.pk),
        CheckpointWrite(
            status=ThreadStatus.DONE, next_node=None, new_messages=[answer.to_dict()], node="MAIN"
        ),
        parent_seq=seq,
    )


def test_the_decision_page_diffs_the_paused_step_against_the_first_step_after_the_resume(
    client, auditor, decided
):
    _resume_steps(decided)
    client.force_login(auditor)
    response = client.get(reverse("decision_detail", args=[decided.pk]))
    diff = response.context["diff"]
    added = [line for kind, line in diff if kind == "add"]
    removed = [line for kind, line in diff if kind == "del"]
    assert any("refunded" in line for line in added)  # the tool result the resume added
    assert any('"status": "running"' in line for line in added)
    assert any('"status": "interrupted"' in line for line in removed)
    assert response.context["resumed"].seq == decided.interrupt.checkpoint_seq + 1
    html = response.content.decode()
    assert "What the agent did next" in html
    assert "Refund of $42.50 issued for A-1001." in html  # the step after that


def test_the_diff_shows_one_line_per_line_with_no_blank_line_between(client, auditor, decided):
    _resume_steps(decided)
    client.force_login(auditor)
    html = client.get(reverse("decision_detail", args=[decided.pk])).content.decode()
    body = re.search(r'<pre class="diff"[^>]*>(.*?)</pre>', html, re.S)
    assert body is not None
    # Each line is a block of its own; any text between two of them (a newline in a <pre>)
    # is drawn as an empty line.
    between = re.findall(r"</span>(.*?)<span", body.group(1), re.S)
    assert len(between) >= 3 and set(between) == {""}
    assert body.group(1).strip().endswith("</span>")
