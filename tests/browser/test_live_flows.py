"""The portal in real Chromium against a live server with a worker: support chat, review
queue, interrupt page and thread page, updating over websockets without reloads."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from portal.models import Decision, Interrupt, Thread
from tests.browser.conftest import assert_not_reloaded, mark_page, wait_live

REFUND = "Refund $42.50 for order A-1001, it arrived broken."
FINAL = "Refund of $42.50 issued for order A-1001"


def _wait_for(predicate, *, timeout: float = 15, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _pending(thread_id=None) -> Interrupt | None:
    qs = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    if thread_id is not None:
        qs = qs.filter(thread_id=thread_id)
    return qs.first()


def _start_chat(page, live: str, message: str = REFUND):
    page.goto(f"{live}/chat/")
    page.locator("input[name=agent][value=refunds]").check()
    page.get_by_role("textbox", name="Message").fill(message)
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
    return Thread.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[1])


def _paused_refund(live, login, support_agent, shoot=None):
    chat = login(support_agent, start="/chat/")
    thread = _start_chat(chat, live)
    expect(chat.locator("#waiting-notice")).to_contain_text("Waiting for approval")
    interrupt = _wait_for(lambda: _pending(thread.pk), what="the pause")
    return chat, thread, interrupt


@pytest.mark.embedded
def test_the_full_round_trip_between_support_and_a_reviewer(
    live, login, shoot, support_agent, reviewer
):
    # The reviewer's queue is open (and live) before anything happens.
    queue = login(reviewer, start="/queue/")
    expect(queue).to_have_url(f"{live}/queue/")
    wait_live(queue)
    expect(queue.locator("#queue-empty")).to_be_visible()
    mark_page(queue)

    # Support starts a refund chat; it pauses with a clear notice.
    chat = login(support_agent, start="/chat/")
    shoot(chat, "chat-new")
    thread = _start_chat(chat, live)
    wait_live(chat)
    mark_page(chat)
    notice = chat.locator("#waiting-notice")
    expect(notice).to_contain_text("Waiting for approval")
    expect(notice).to_contain_text("Approve a $42.50 refund for order A-1001?")
    expect(chat.locator(".msg.assistant")).to_contain_text(
        "Issue refund (order id: A-1001, amount: $42.50)"
    )
    # Paused: nothing says the agent is still at work, and the composer says who is awaited.
    expect(chat.locator("[data-typing]")).to_have_count(0)
    expect(chat.locator("#chat-composer [data-closed-why]")).to_have_text(
        "You can write again once a reviewer has answered the request above."
    )
    expect(chat.locator(".chat-recent [aria-current] .tag")).to_have_text("waiting for approval")
    shoot(chat, "chat-waiting")

    # The reviewer's already-open queue shows it without a reload.
    interrupt = _wait_for(lambda: _pending(thread.pk), what="the interrupt row")
    row = queue.locator(f"#q-{interrupt.pk}")
    expect(row).to_be_visible(timeout=3000)
    expect(row).to_contain_text("Refunds")
    expect(row).to_contain_text("Tool approval")
    expect(row).to_contain_text("asked by sam-support")
    expect(row).to_contain_text("Approve a $42.50 refund")
    expect(queue.locator("#queue-empty")).to_be_hidden()
    assert_not_reloaded(queue)
    shoot(queue, "queue")

    # An answer the server rejects shows the field error, and nothing is recorded.
    row.get_by_role("link", name="Review", exact=True).click()
    expect(queue).to_have_url(f"{live}/interrupts/{interrupt.pk}/")
    shoot(queue, "interrupt")
    note = queue.get_by_label("Note")
    note.evaluate("el => el.removeAttribute('maxlength')")
    note.fill("x" * 2001)
    queue.get_by_role("button", name="Approve", exact=True).click()
    expect(queue.locator("#field-note .errorlist")).to_contain_text("over the limit")
    queue.locator("#field-note").scroll_into_view_if_needed()
    shoot(queue, "interrupt-invalid")
    assert not Decision.objects.exists()
    assert _pending(thread.pk) is not None

    # The reviewer approves; the support chat shows the resumed answer live.
    queue.get_by_label("Note").fill("Photo of the damage received.")
    queue.get_by_role("button", name="Approve", exact=True).click()
    expect(queue.locator("#decision-result")).to_contain_text("Approved")
    expect(queue.locator("#run-live")).to_contain_text(FINAL)
    queue.locator("#run-live").scroll_into_view_if_needed()
    shoot(queue, "interrupt-decided")

    expect(chat.locator("#transcript")).to_contain_text(f"Done. {FINAL}")
    expect(chat.locator(".chat-recent [aria-current] .tag")).to_have_text("Approved")
    expect(chat.locator("#waiting-notice")).to_have_count(0)
    assert_not_reloaded(chat)
    # It arrived token by token over the websocket, not as one piece.
    assert chat.evaluate("window.portalLive.deltas") >= 5
    shoot(chat, "chat-done")
    decision = Decision.objects.get()
    assert (decision.outcome, decision.reviewer, decision.note) == (
        "approved",
        reviewer,
        "Photo of the damage received.",
    )
    _wait_for(lambda: Thread.objects.get(pk=thread.pk).status == "done", what="thread done")

    # The decided request left the queue; the thread page tells the whole story.
    queue.goto(f"{live}/queue/")
    expect(queue.locator("#queue-empty")).to_be_visible()
    queue.goto(f"{live}/threads/{thread.pk}/")
    expect(queue.locator("#thread-live .timeline")).to_contain_text("Decision")
    shoot(queue, "thread")


def test_a_rejection_with_a_note_reaches_the_agent(live, login, shoot, support_agent, reviewer):
    chat, thread, interrupt = _paused_refund(live, login, support_agent)
    wait_live(chat)
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    page.get_by_label("Note").fill("Outside the return window.")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#decision-result")).to_contain_text("Rejected")
    expect(page.locator("#decision-result")).to_contain_text("Outside the return window.")
    decision = Decision.objects.get()
    assert (decision.outcome, decision.note) == ("rejected", "Outside the return window.")
    # The agent was told, and says so in the still-open chat.
    _wait_for(lambda: Thread.objects.get(pk=thread.pk).status == "done", what="thread done")
    expect(chat.locator("#waiting-notice")).to_have_count(0)
    expect(chat.locator(".msg.tool")).to_contain_text(
        "Issue refund declined by rita-reviewer: Outside the return window."
    )
    expect(chat.locator(".msg.tool")).not_to_contain_text('{"status"')
    page.locator("#decision-result").scroll_into_view_if_needed()
    shoot(page, "interrupt-rejected")


def test_two_reviewers_race_one_wins_and_the_other_sees_who_decided(
    live, login, support_agent, reviewer, second_reviewer, shoot
):
    _chat, _thread, interrupt = _paused_refund(live, login, support_agent)
    first = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    second = login(second_reviewer, start=f"/interrupts/{interrupt.pk}/")
    # Both click Approve at (nearly) the same moment; neither waits for the other.
    for page in (first, second):
        page.evaluate("document.querySelector('#decision-form button[value=approve]').click()")
    for page in (first, second):
        page.wait_for_load_state()
        expect(page.locator("#decision-result")).to_be_visible()
    decision = Decision.objects.get()
    winner, loser = (first, second) if decision.reviewer == reviewer else (second, first)
    expect(winner.locator("#decision-result")).to_contain_text("Approved")
    expect(loser.locator("#decision-refused")).to_contain_text(decision.reviewer.get_username())
    expect(loser.locator("#decision-result")).to_contain_text(decision.reviewer.get_username())
    loser.locator("#decision-result").scroll_into_view_if_needed()
    shoot(loser, "interrupt-race-lost")
    assert Decision.objects.filter(interrupt=interrupt).count() == 1


def test_a_claim_shows_in_every_open_queue(live, login, support_agent, reviewer, second_reviewer):
    _chat, _thread, interrupt = _paused_refund(live, login, support_agent)
    mine = login(reviewer, start="/queue/")
    theirs = login(second_reviewer, start="/queue/")
    for page in (mine, theirs):
        wait_live(page)
        mark_page(page)
    mine.locator(f"#q-{interrupt.pk}").get_by_role("button", name="Claim").click()
    for page in (mine, theirs):
        expect(page.locator(f"#q-{interrupt.pk} .queue-claim")).to_contain_text("rita-reviewer")
        assert_not_reloaded(page)
    # Only the holder is offered the release.
    expect(mine.locator(f"#q-{interrupt.pk}").get_by_role("button", name="Release")).to_be_visible()
    expect(
        theirs.locator(f"#q-{interrupt.pk}").get_by_role("button", name="Release")
    ).to_be_hidden()
    mine.locator(f"#q-{interrupt.pk}").get_by_role("button", name="Release").click()
    expect(theirs.locator(f"#q-{interrupt.pk} .queue-claim")).to_contain_text("unclaimed")


def test_after_a_dropped_connection_the_chat_catches_up(live, login, support_agent, reviewer):
    from portal.reviews.decisions import decision_submit

    chat, thread, interrupt = _paused_refund(live, login, support_agent)
    wait_live(chat)
    mark_page(chat)
    # The socket goes away for three seconds; meanwhile the request is approved and the
    # run finishes, so every chunk of it is missed.
    chat.evaluate("window.portalLive.drop(3000)")
    expect(chat.locator("[data-live-status]")).not_to_have_attribute("data-state", "open")
    # A transcript refresh the pause's announcements started must be back first, or it
    # could return after the resume below finished and show its answer already.
    # A function, not an expression string: Playwright evals strings, which the CSP forbids.
    chat.wait_for_function("() => window.portalLive.refreshes === 0")
    decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )
    _wait_for(lambda: Thread.objects.get(pk=thread.pk).status == "done", what="thread done")
    expect(chat.locator("#transcript")).not_to_contain_text(FINAL)
    # Back online: the transcript is rebuilt from the checkpoints, without a reload.
    wait_live(chat)
    expect(chat.locator("#transcript")).to_contain_text(f"Done. {FINAL}")
    assert_not_reloaded(chat)


def _pending_page_gone_away(login, reviewer):
    """A pending request's page with a note half typed, its socket dropped for two
    seconds: the request, and the page."""
    from tests.factories import make_interrupt

    interrupt = make_interrupt()
    page = login(reviewer, start=f"/interrupts/{interrupt.pk}/")
    wait_live(page)
    mark_page(page)
    page.get_by_label("Note").fill("half typed")  # kept while nothing changed
    page.wait_for_function("() => window.portalLive.refreshes === 0")
    page.evaluate("window.portalLive.drop(2000)")
    expect(page.locator("[data-live-status]")).not_to_have_attribute("data-state", "open")
    return interrupt, page


def test_after_a_dropped_connection_a_pending_decision_page_catches_up(
    live, login, reviewer, second_reviewer
):
    from portal.reviews.decisions import decision_submit

    interrupt, page = _pending_page_gone_away(login, reviewer)
    # Decided by this process, whose broadcasts never reach the server: only the catch-up
    # on reconnect can show it.
    decision_submit(
        interrupt=interrupt,
        reviewer=second_reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )
    wait_live(page)
    expect(page.locator("#interrupt-status")).to_have_text("resolved")
    expect(page.locator("#decision-news")).to_contain_text(second_reviewer.get_username())
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(page.get_by_label("Note")).to_have_value("half typed")
    assert_not_reloaded(page)


def test_after_a_dropped_connection_a_pending_page_shows_who_claimed_it_meanwhile(
    live, login, reviewer, second_reviewer
):
    from portal.reviews.claims import interrupt_claim

    interrupt, page = _pending_page_gone_away(login, reviewer)
    # Claimed by this process, whose broadcasts never reach the server: only the catch-up
    # on reconnect can show it. The request is still pending, so the form stays, closed.
    interrupt_claim(interrupt=interrupt, user=second_reviewer)
    wait_live(page)
    expect(page.locator("#decision-claim")).to_contain_text(
        f"{second_reviewer.get_username()} claimed this request"
    )
    expect(page.locator("#interrupt-status")).to_have_text("pending")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(page.get_by_label("Note")).to_have_value("half typed")
    assert_not_reloaded(page)


@pytest.mark.parametrize("path", ["/queue/", "/chat/", "/threads/"])
def test_an_anonymous_visitor_is_sent_to_login(live, page, path):
    page.goto(live + path)
    expect(page).to_have_url(re.compile(r"/login/\?next=" + re.escape(path)))
    expect(page.get_by_role("button", name="Log in")).to_be_visible()


def test_an_auditor_reads_but_sees_no_decision_controls(live, login, shoot, support_agent, auditor):
    from tests.factories import make_interrupt

    interrupt = make_interrupt(owner=support_agent)
    page = login(auditor, start=f"/interrupts/{interrupt.pk}/")
    expect(page.locator("h1")).to_contain_text("Approve a $42.50 refund")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    expect(page.get_by_role("button", name="Claim")).to_have_count(0)
    page.goto(f"{live}/threads/{interrupt.thread_id}/")
    expect(page.locator("#waiting-notice")).to_be_visible()
    expect(page.get_by_role("link", name="Review this request")).to_have_count(0)
    shoot(page, "thread-auditor")
    # The queue is for reviewers.
    response = page.goto(f"{live}/queue/")
    assert response is not None and response.status == 403


def test_after_a_dropped_connection_the_queue_catches_up(live, login, reviewer):
    from tests.factories import make_interrupt

    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    mark_page(queue)
    queue.evaluate("window.portalLive.drop(1500)")
    expect(queue.locator("[data-live-status]")).not_to_have_attribute("data-state", "open")
    # Written while the queue is away (and by this process, whose broadcasts never reach
    # the server): only the catch-up on reconnect can show it.
    interrupt = make_interrupt()
    expect(queue.locator(f"#q-{interrupt.pk}")).to_be_visible()
    expect(queue.locator("[data-live-status]")).to_have_attribute("data-state", "open")
    assert_not_reloaded(queue)


def test_an_open_queue_recovers_an_update_it_never_received(live, login, reviewer, monkeypatch):
    """Publishing is best effort (a server reconnecting to Redis misses messages with no
    sign on the socket): the queue re-fetches now and then, so nothing stays missing."""
    from portal.notify import broadcast
    from tests.factories import make_interrupt

    queue = login(reviewer, start="/queue/")
    wait_live(queue)
    mark_page(queue)
    # The catch-up fetch of the socket's first connect must be back first.
    _wait_for(lambda: queue.evaluate("window.portalLive.refreshes") == 0, what="the catch-up")
    monkeypatch.setattr(broadcast, "publish_queue_change", lambda **change: None)
    interrupt = make_interrupt()  # never announced
    time.sleep(1.5)
    expect(queue.locator(f"#q-{interrupt.pk}")).to_have_count(0)
    queue.evaluate("window.portalLive.resyncEvery(500)")
    expect(queue.locator(f"#q-{interrupt.pk}")).to_be_visible(timeout=5000)
    expect(queue.locator("[data-live-status]")).to_have_attribute("data-state", "open")
    assert_not_reloaded(queue)


def test_a_catch_up_answered_before_a_live_change_does_not_undo_it(
    live, login, reviewer, second_reviewer
):
    """A reconnect's catch-up is rendered, then a claim is pushed, then the catch-up lands:
    its older queue must not stand over the claim the page has already shown."""
    from tests.factories import make_interrupt

    interrupt = make_interrupt()
    mine = login(reviewer, start="/queue/")
    theirs = login(second_reviewer, start="/queue/")
    for page in (mine, theirs):
        wait_live(page)
        page.wait_for_function("() => window.portalLive.refreshes === 0")
    mark_page(theirs)
    held = []  # the first catch-up, fetched from the server at once and delivered late

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    theirs.route("**/queue/", hold_the_first)
    theirs.evaluate("window.portalLive.drop(0)")
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:
        theirs.wait_for_timeout(50)  # lets Playwright run the route's handler
    assert held, "the reconnect asked for no catch-up"
    row = theirs.locator(f"#q-{interrupt.pk} .queue-claim")
    expect(row).to_contain_text("unclaimed")  # what the held catch-up says
    mine.locator(f"#q-{interrupt.pk}").get_by_role("button", name="Claim").click()
    expect(row).to_contain_text("rita-reviewer")  # pushed over the reconnected socket
    # Every text the row shows from now on, so a moment of "unclaimed" cannot pass unseen.
    theirs.evaluate(
        """(id) => {
            window.__claimTexts = [];
            const note = () => {
                const cell = document.querySelector("#q-" + id + " .queue-claim");
                window.__claimTexts.push(cell ? cell.innerText : "(gone)");
            };
            new MutationObserver(note).observe(document.body, {
                subtree: true, childList: true, characterData: true,
            });
        }""",
        interrupt.pk,
    )
    route, response = held[0]
    route.fulfill(response=response)
    theirs.wait_for_function("() => window.portalLive.refreshes === 0")
    assert "rita-reviewer" in row.inner_text()
    shown = theirs.evaluate("window.__claimTexts")
    assert shown and all("rita-reviewer" in text for text in shown), shown
    assert_not_reloaded(theirs)
