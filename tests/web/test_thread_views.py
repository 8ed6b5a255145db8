"""Thread list, thread page (transcript and timeline) and the transcript fragment the
live pages re-fetch to catch up; the landing page per role."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from portal.models import Thread
from tests.factories import make_decision, make_interrupt, make_thread

pytestmark = pytest.mark.django_db


def test_a_support_user_lists_only_their_own_threads(client, support_agent, other_support_agent):
    mine = make_thread(owner=support_agent, text="Mine")
    theirs = make_thread(owner=other_support_agent, text="Theirs")
    client.force_login(support_agent)
    response = client.get("/threads/")
    assert response.status_code == 200
    assert [t.pk for t in response.context["items"]] == [mine.pk]
    assert str(theirs.pk) not in response.content.decode()


@pytest.mark.parametrize("persona", ["reviewer", "auditor"])
def test_reviewers_and_auditors_list_every_thread(client, request, persona, support_agent):
    threads = {make_thread(owner=support_agent).pk for _ in range(2)}
    client.force_login(request.getfixturevalue(persona))
    assert {t.pk for t in client.get("/threads/").context["items"]} == threads


def test_the_list_filters_by_status(client, reviewer):
    paused = make_interrupt().thread
    make_thread()
    client.force_login(reviewer)
    items = client.get("/threads/", {"status": "interrupted"}).context["items"]
    assert [t.pk for t in items] == [paused.pk]


def test_the_list_filters_by_agent_and_searches_the_customers_words(
    client, reviewer, support_agent
):
    long_hello = "Hello, I ordered a kettle last week and it came today. " * 2
    kettle = make_thread(agent="refunds", owner=support_agent, text=long_hello + "It is BROKEN.")
    assert "BROKEN" not in kettle.title
    transfer = make_thread(agent="transfers", owner=support_agent, text="Send $5 to Alice.")
    client.force_login(reviewer)

    def listed(**query) -> set:
        html = client.get(reverse("threads"), query).content.decode()
        return {t for t in (kettle, transfer) if f'id="t-{t.pk}"' in html}

    assert listed(agent="transfers") == {transfer}
    assert listed(q="broken") == {kettle}  # not in the title: further in their words
    assert listed(q="alice") == {transfer}
    assert listed(q="broken", agent="transfers") == set()
    html = client.get(reverse("threads")).content.decode()
    assert '<option value="refunds">Refunds</option>' in html


def test_an_outsider_sees_an_empty_list(client, outsider, support_agent):
    make_thread(owner=support_agent)
    client.force_login(outsider)
    response = client.get("/threads/")
    assert response.status_code == 200
    assert "No threads yet" in response.content.decode()


def test_the_thread_list_refuses_post_with_405(client, reviewer):
    client.force_login(reviewer)
    assert client.post("/threads/").status_code == 405


def test_the_thread_page_shows_transcript_and_timeline(client, support_agent, reviewer):
    interrupt = make_interrupt(owner=support_agent)
    make_decision(interrupt=interrupt, reviewer=reviewer, note="Looks fine")
    client.force_login(reviewer)
    response = client.get(reverse("thread_detail", args=[interrupt.thread_id]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Refund $42.50 for order A-1001" in html
    assert "Issue refund (order id: A-1001, amount: $42.50)" in html
    for entry in ("Checkpoint #1", "Checkpoint #2", "Approval requested", "Decision", "Looks fine"):
        assert entry in html
    assert f'ws-connect="/ws/threads/{interrupt.thread_id}/"' in html


def test_an_auditor_reads_the_thread_page_without_decision_controls(client, support_agent, auditor):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(auditor)
    html = client.get(reverse("thread_detail", args=[interrupt.thread_id])).content.decode()
    assert "Waiting for approval" in html
    assert "Review this request" not in html


def test_another_support_users_thread_page_is_404(client, support_agent, other_support_agent):
    thread = make_thread(owner=support_agent)
    client.force_login(other_support_agent)
    assert client.get(reverse("thread_detail", args=[thread.pk])).status_code == 404
    assert client.get(reverse("thread_transcript_hx", args=[thread.pk])).status_code == 404


@pytest.mark.parametrize("bad", ["not-a-uuid", str(uuid.uuid4())], ids=["not-a-uuid", "unknown"])
def test_a_bad_or_unknown_thread_id_is_404(client, reviewer, bad):
    client.force_login(reviewer)
    assert client.get(f"/threads/{bad}/").status_code == 404
    assert client.get(f"/threads/{bad}/transcript/").status_code == 404


def test_the_thread_pages_refuse_post_with_405(client, support_agent):
    thread = make_thread(owner=support_agent)
    client.force_login(support_agent)
    assert client.post(reverse("thread_detail", args=[thread.pk])).status_code == 405
    assert client.post(reverse("thread_transcript_hx", args=[thread.pk])).status_code == 405


def test_an_anonymous_user_is_sent_to_login(client, support_agent):
    thread = make_thread(owner=support_agent)
    for url in ("/threads/", reverse("thread_detail", args=[thread.pk])):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_the_transcript_fragment_is_rebuilt_from_the_checkpoints(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    response = client.get(reverse("thread_transcript_hx", args=[interrupt.thread_id]))
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="transcript"')
    assert 'data-status="interrupted"' in html
    assert "Waiting for approval" in html
    assert html.count('class="msg ') == 2  # the request and the tool call, each once


def test_a_paused_thread_whose_run_is_still_finishing_does_not_say_the_agent_works(
    client, support_agent
):
    # The pause is written (and announced) before the worker marks its run finished: a
    # page that looks in between sees the request pending and the run still running.
    from portal.models import Run

    interrupt = make_interrupt(owner=support_agent)
    Run.objects.create(thread=interrupt.thread, kind=Run.Kind.START, status=Run.Status.RUNNING)
    client.force_login(support_agent)

    html = client.get(reverse("thread_transcript_hx", args=[interrupt.thread_id])).content.decode()
    assert "Waiting for approval" in html
    assert "The agent is working" not in html and 'data-working="0"' in html


def test_a_message_is_escaped_in_the_transcript(client, support_agent):
    thread = make_thread(owner=support_agent, text="<script>alert(1)</script>")
    client.force_login(support_agent)
    html = client.get(reverse("thread_transcript_hx", args=[thread.pk])).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_an_htmx_request_for_the_thread_page_gets_the_live_region_only(client, reviewer):
    thread = make_thread()
    client.force_login(reviewer)
    response = client.get(
        reverse("thread_detail", args=[thread.pk]), headers={"HX-Request": "true"}
    )
    assert response.content.decode().lstrip().startswith('<div id="thread-live"')


@pytest.mark.parametrize(
    ("persona", "landing"),
    [
        ("reviewer", "/queue/"),
        ("support_agent", "/chat/"),
        ("admin_user", "/admin/"),
    ],
)
def test_each_role_lands_on_its_page(client, request, persona, landing):
    client.force_login(request.getfixturevalue(persona))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == landing


def test_an_auditor_lands_on_history_or_the_thread_list(client, auditor):
    client.force_login(auditor)
    response = client.get("/")
    assert response["Location"] in ("/threads/", _reverse_or_none("history"))


def test_a_user_without_a_role_stays_on_the_welcome_page(client, outsider):
    client.force_login(outsider)
    response = client.get("/")
    assert response.status_code == 200
    assert "Ask an administrator" in response.content.decode()


def _reverse_or_none(name: str) -> str | None:
    from django.urls import NoReverseMatch

    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def test_threads_model_is_untouched_by_reading(client, support_agent):
    thread = make_thread(owner=support_agent)
    before = Thread.objects.values().get(pk=thread.pk)
    client.force_login(support_agent)
    client.get(reverse("thread_detail", args=[thread.pk]))
    client.get(reverse("thread_transcript_hx", args=[thread.pk]))
    assert Thread.objects.values().get(pk=thread.pk) == before


def test_the_transcript_fragment_can_start_after_a_checkpoint(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    client.force_login(support_agent)
    url = reverse("thread_transcript_hx", args=[interrupt.thread_id])
    everything = client.get(url).content.decode()
    after_pause = client.get(url, {"after": interrupt.checkpoint_seq}).content.decode()
    assert "Refund $42.50 for order A-1001" in everything
    assert "Refund $42.50 for order A-1001" not in after_pause

    # A bad cursor is ignored (CSRF tokens are masked anew on every render).
    def unmasked(html: str) -> str:
        return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)

    assert unmasked(client.get(url, {"after": "junk"}).content.decode()) == unmasked(everything)
