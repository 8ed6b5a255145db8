"""A message pushed live reads exactly as the thread's page shows it."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import connection

from portal.models import Interrupt, Run
from portal.notify import broadcast
from portal.reviews.decisions import decision_submit
from portal.reviews.threads import thread_start
from portal.runs.worker import Worker

pytestmark = pytest.mark.usefixtures("test_agents")


def _divs(html: str) -> dict[str, str]:
    """Each transcript message in ``html`` by its element id, as the page would hold it
    (the out-of-band marker dropped)."""
    found = re.findall(r'(<div id="(msg-[^"]+)".*?\n</div>)', html, flags=re.S)
    return {mid: div.replace(' hx-swap-oob="true"', "") for div, mid in found}


def _run_once(worker: Worker) -> None:
    worker.execute(worker.claim())


@pytest.fixture
def watched(monkeypatch) -> list[str]:
    """Someone watches every thread; the HTML sent to them, in order."""
    live: list[str] = []

    async def record(group, message):
        if message["type"] == broadcast.THREAD_HTML:
            live.append(message["html"])

    monkeypatch.setattr(broadcast, "listening", lambda *groups: [True for _ in groups])
    monkeypatch.setattr(broadcast, "agroup_send", record)
    return live


def _start(user):
    return thread_start(
        agent="approve", input={"messages": [{"role": "user", "content": "pay 7"}]}, user=user
    )


@pytest.mark.django_db(transaction=True)
def test_a_live_message_names_the_owner_and_who_declined_as_the_page_does(
    client, support_agent, reviewer, watched
):
    thread, _ = _start(support_agent)
    worker = Worker(name="live-messages")
    try:
        _run_once(worker)
        request = Interrupt.objects.get(thread=thread)
        decision_submit(
            interrupt=request,
            reviewer=reviewer,
            value={"approved": False, "reason": "not this customer"},
            resume_interrupt_id=request.pk,
        )
        _run_once(worker)
    finally:
        worker._close_loop()

    pushed = {mid: div for html in watched for mid, div in _divs(html).items()}
    client.force_login(support_agent)
    page = _divs(client.get(f"/threads/{thread.pk}/").content.decode())
    shown = {mid: page[mid] for mid in pushed}
    assert pushed == shown
    words = " ".join(pushed.values())
    assert support_agent.get_username() in words
    assert f"declined by {reviewer.get_username()}" in words


@pytest.mark.django_db
def test_a_watched_run_inside_a_callers_transaction_keeps_it(support_agent, watched):
    # The worker runs a graph on its own connection, or inside its caller's transaction
    # (a test's). Reading the thread for the live transcript must not close that
    # connection, which would lose the transaction and leave the run unfinished.
    _, run = _start(support_agent)
    worker = Worker(name="in-a-transaction")
    try:
        outcome = worker.execute(worker.claim())
    finally:
        worker._close_loop()
    assert outcome.status == Run.Status.INTERRUPTED
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    assert connection.in_atomic_block and not connection.needs_rollback
    assert watched  # rendered, with or without the thread's own details


@pytest.mark.django_db(transaction=True)
def test_the_live_transcript_reads_on_the_announcers_connection(
    support_agent, watched, monkeypatch
):
    # A worker keeps its own connection between runs (run_worker keeps it for minutes),
    # and one for the thread that announces queue changes. The live transcript's read
    # uses the latter: not the run's, and no third.
    from portal.web import threads

    read, real = [], threads.live_transcript_context

    def spy(thread_id):
        read.append(threading.current_thread().name)
        return real(thread_id)

    monkeypatch.setattr(threads, "live_transcript_context", spy)
    _start(support_agent)
    worker = Worker(name="one-connection")
    try:
        worker.execute(worker.claim())
    finally:
        worker._close_loop()
    assert watched and len(read) == 1  # once a run
    assert read[0].startswith("announce")
