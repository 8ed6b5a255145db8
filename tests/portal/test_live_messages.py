"""A message pushed live reads exactly as the thread's page shows it."""

from __future__ import annotations

import re

import pytest

from portal import broadcast, services
from portal.decisions import decision_submit
from portal.models import Interrupt
from portal.worker import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("test_agents")]


def _divs(html: str) -> dict[str, str]:
    """Each transcript message in ``html`` by its element id, as the page would hold it
    (the out-of-band marker dropped)."""
    found = re.findall(r'(<div id="(msg-[^"]+)".*?\n</div>)', html, flags=re.S)
    return {mid: div.replace(' hx-swap-oob="true"', "") for div, mid in found}


def _run_once(worker: Worker) -> None:
    worker.execute(worker.claim())


def test_a_live_message_names_the_owner_and_who_declined_as_the_page_does(
    client, support_agent, reviewer, monkeypatch
):
    live: list[str] = []

    async def record(group, message):
        if message["type"] == broadcast.THREAD_HTML:
            live.append(message["html"])

    monkeypatch.setattr(broadcast, "listening", lambda *groups: [True for _ in groups])
    monkeypatch.setattr(broadcast, "agroup_send", record)
    thread, _ = services.thread_start(
        agent="approve",
        input={"messages": [{"role": "user", "content": "pay 7"}]},
        user=support_agent,
    )
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

    pushed = {mid: div for html in live for mid, div in _divs(html).items()}
    client.force_login(support_agent)
    page = _divs(client.get(f"/threads/{thread.pk}/").content.decode())
    shown = {mid: page[mid] for mid in pushed}
    assert pushed == shown
    words = " ".join(pushed.values())
    assert support_agent.get_username() in words
    assert f"declined by {reviewer.get_username()}" in words
