"""The interrupt page, its decision form POST and the claim endpoints."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from portal.models import Decision, Interrupt, Run
from tests.factories import make_decision, make_interrupt, make_tool_approval, pause_again

pytestmark = pytest.mark.django_db

PROFILE_SCHEMA = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Customer email"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["email", "priority"],
    "additionalProperties": False,
}


def detail_url(interrupt):
    return reverse("interrupt_detail", args=[interrupt.pk])


def decide_url(interrupt):
    return reverse("interrupt_decide", args=[interrupt.pk])


def login(client, user):
    client.force_login(user)
    return client


# --- the page --------------------------------------------------------------------------


def _claim_section(html: str) -> str:
    start = html.index('<section id="decision-claim"')
    return html[start : html.index("</section>", start)]


def test_a_decided_request_that_nobody_claimed_shows_no_claim_section(client, reviewer):
    pending = make_interrupt()
    decided = make_interrupt()
    make_decision(interrupt=decided, reviewer=reviewer)
    login(client, reviewer)

    open_section = _claim_section(client.get(detail_url(pending)).content.decode())
    closed_section = _claim_section(client.get(detail_url(decided)).content.decode())

    assert "Nobody has claimed this request." in open_section
    assert " hidden" not in open_section.split(">", 1)[0]
    # Nothing to claim any more, and no claim to tell of: the card is not shown.
    assert "Nobody has claimed" not in closed_section
    assert " hidden" in closed_section.split(">", 1)[0]


def test_a_decided_request_still_says_who_had_claimed_it(client, reviewer):
    from portal.reviews.claims import interrupt_claim

    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)
    make_decision(interrupt=interrupt, reviewer=reviewer)

    section = _claim_section(login(client, reviewer).get(detail_url(interrupt)).content.decode())

    assert "rita-reviewer</strong> claimed this request" in section
    assert " hidden" not in section.split(">", 1)[0]
    assert "Release" not in section and "Claim</button>" not in section


def test_a_reviewer_sees_the_request_the_conversation_the_tool_call_and_the_form(client, reviewer):
    interrupt = make_tool_approval()

    response = login(client, reviewer).get(detail_url(interrupt))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Approve transfer funds (amount: $5,000.00, recipient: Alice)?" in html
    assert "Send $5,000 to Alice." in html  # the user's message
    assert "transfer_funds" in html and "&quot;recipient&quot;: &quot;Alice&quot;" in html
    assert 'id="decision-form"' in html
    # Agent Inbox's four answers, as buttons and fields of their own.
    assert 'name="action" value="accept"' in html
    assert 'name="action" value="edit"' in html
    assert 'name="action" value="response"' in html
    assert 'name="action" value="ignore"' in html
    assert 'name="response"' in html
    assert 'id="run-live"' in html


def test_the_payload_and_message_are_shown_escaped(client, reviewer):
    interrupt = make_interrupt(
        value={"comment": "<script>alert(1)</script>"}, message="<b>Approve?</b>"
    )

    html = login(client, reviewer).get(detail_url(interrupt)).content.decode()

    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>Approve?</b>" not in html
    assert "&lt;b&gt;Approve?&lt;/b&gt;" in html


def test_an_auditor_can_read_the_request_but_gets_no_form(client, auditor):
    interrupt = make_interrupt()

    response = login(client, auditor).get(detail_url(interrupt))

    assert response.status_code == 200
    assert 'id="decision-form"' not in response.content.decode()


def test_the_thread_owner_sees_the_request_without_a_form(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = login(client, support_agent).get(detail_url(interrupt))

    assert response.status_code == 200
    assert 'id="decision-form"' not in response.content.decode()


@pytest.mark.parametrize("persona", ["outsider", "other_support_agent"])
def test_strangers_get_404_for_the_page_and_the_post(client, persona, request, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    login(client, request.getfixturevalue(persona))

    assert client.get(detail_url(interrupt)).status_code == 404
    assert client.post(decide_url(interrupt), {"action": "approve"}).status_code == 404


def test_anonymous_users_are_sent_to_log_in(client):
    interrupt = make_interrupt()

    response = client.get(detail_url(interrupt))

    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_an_unknown_interrupt_id_is_404(client, reviewer):
    login(client, reviewer)

    assert client.get("/interrupts/int_nope/").status_code == 404
    assert client.post("/interrupts/int_nope/decide", {"action": "approve"}).status_code == 404


def test_the_wrong_method_is_405(client, reviewer):
    interrupt = make_interrupt()
    login(client, reviewer)

    assert client.get(decide_url(interrupt)).status_code == 405
    assert client.post(detail_url(interrupt)).status_code == 405
    assert client.get(reverse("interrupt_claim", args=[interrupt.pk])).status_code == 405


# --- deciding --------------------------------------------------------------------------


def test_approving_from_the_form_records_the_decision_and_queues_the_resume(client, reviewer):
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "approve", "note": "photo received"},
    )

    assert response.status_code == 302
    assert response["Location"] == detail_url(interrupt)
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"approved": True, "note": "photo received"}
    assert Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).count() == 1
    page = client.get(detail_url(interrupt)).content.decode()
    assert 'id="decision-result"' in page and "rita-reviewer" in page
    # The page shows the decision already: its own announcement, arriving late over the
    # socket, finds no place to land (a second copy would repeat the decision).
    assert page.count('id="decision-result"') == 1 and 'id="decision-news"' not in page


def test_rejecting_from_the_form_sends_the_note(client, reviewer):
    interrupt = make_interrupt()

    login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": "outside window"},
    )

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.REJECTED
    assert decision.value == {"approved": False, "note": "outside window"}


def test_editing_arguments_from_the_form_executes_the_edited_ones(client, reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    login(client, reviewer).post(
        decide_url(interrupt),
        {
            "resume_interrupt_id": interrupt.pk,
            "action": "edit",
            f"args.{call_id}.amount": "500",
            f"args.{call_id}.recipient": "Alice",
        },
    )

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.EDITED
    assert decision.executed_args == {call_id: {"amount": 500.0, "recipient": "Alice"}}
    assert decision.original_args == {call_id: {"amount": 5000.0, "recipient": "Alice"}}


def test_ignoring_a_high_risk_tool_approval_is_offered_and_recorded_as_ignored(client, reviewer):
    interrupt = make_tool_approval()
    login(client, reviewer)

    page = client.get(detail_url(interrupt)).content.decode()
    # Ignoring is not a refusal: it is not red like Reject.
    assert 'value="ignore">Ignore</button>' in page and 'class="danger"' not in page
    assert ">Reject</button>" not in page  # the button says the answer it records
    assert "<dt><kbd>r</kbd></dt><dd>Ignore</dd>" in page  # and so does its shortcut's help
    response = client.post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "ignore", "note": "not ours"},
    )

    assert response.status_code == 302
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.IGNORED
    assert decision.value == {"type": "ignore", "note": "not ours"}
    assert decision.executed_args is None
    result = client.get(detail_url(interrupt)).content.decode()
    assert "<strong>Ignored</strong>" in result


def test_edited_arguments_that_break_the_schema_show_errors_next_to_the_field(client, reviewer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {
            "resume_interrupt_id": interrupt.pk,
            "action": "edit",
            f"args.{call_id}.amount": "500",
            f"args.{call_id}.recipient": "",
        },
    )

    assert response.status_code == 422
    form = response.context["form"]
    assert form.errors[f"args.{call_id}.recipient"] == [f"$.args.{call_id}.recipient: required"]
    assert Decision.objects.count() == 0


def test_a_schema_form_with_bad_values_is_refused_with_errors_by_field(client, reviewer):
    interrupt = make_interrupt(schema=PROFILE_SCHEMA, reason="input_required")

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "value.email": "", "value.priority": "9"},
    )

    assert response.status_code == 422
    errors = response.context["form"].errors
    assert errors["value.email"] == ["$.email: required"]
    assert "value.priority" in errors  # above the maximum
    html = response.content.decode()
    assert "$.email: required" in html
    assert Decision.objects.count() == 0
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_a_valid_schema_form_records_the_typed_value(client, reviewer):
    interrupt = make_interrupt(schema=PROFILE_SCHEMA, reason="input_required")

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {
            "resume_interrupt_id": interrupt.pk,
            "value.email": "ada@example.com",
            "value.priority": "2",
            "note": "called the customer",
        },
    )

    assert response.status_code == 302
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.value == {"email": "ada@example.com", "priority": 2}
    assert decision.note == "called the customer"


def test_a_second_submission_gets_409_naming_who_decided_and_when(
    client, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=reviewer)

    response = login(client, second_reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": "too late"},
    )

    assert response.status_code == 409
    html = response.content.decode()
    assert "already decided by rita-reviewer at" in html
    assert Decision.objects.count() == 1


def test_a_stale_form_for_a_thread_that_paused_again_gets_409(client, reviewer):
    interrupt = make_interrupt()
    pause_again(interrupt.thread)

    response = login(client, reviewer).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 409
    assert Decision.objects.count() == 0


def test_a_form_naming_another_interrupt_id_gets_409(client, reviewer):
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        decide_url(interrupt), {"resume_interrupt_id": "int_old", "action": "approve"}
    )

    assert response.status_code == 409


def test_an_auditor_posting_a_decision_gets_403(client, auditor):
    interrupt = make_interrupt()

    response = login(client, auditor).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 403
    assert Decision.objects.count() == 0


def test_html_in_a_note_is_stored_as_text_and_rendered_escaped(client, reviewer):
    interrupt = make_interrupt()
    note = '<script>alert("x")</script><b>bold</b>'

    login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": note},
    )

    assert Decision.objects.get(interrupt=interrupt).note == note
    html = client.get(detail_url(interrupt)).content.decode()
    assert note not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in html


def test_an_oversized_note_is_refused_next_to_the_note_field(client, reviewer, settings):
    settings.PORTAL_MAX_NOTE_CHARS = 20
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": "n" * 21},
    )

    assert response.status_code == 422
    assert response.context["form"].errors["note"] == ["note: 21 characters, over the limit of 20"]
    assert Decision.objects.count() == 0


def test_a_post_without_approve_or_reject_is_refused(client, reviewer):
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk}
    )

    assert response.status_code == 422
    assert Decision.objects.count() == 0


# --- claiming --------------------------------------------------------------------------


def test_a_reviewer_claims_and_others_see_who_holds_it(client, reviewer, second_reviewer):
    interrupt = make_interrupt()

    response = login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    assert response.status_code == 302
    interrupt.refresh_from_db()
    assert interrupt.claimed_by == reviewer
    html = login(client, second_reviewer).get(detail_url(interrupt)).content.decode()
    assert "rita-reviewer</strong> claimed this request" in html
    # The claim is all that stands in the way: the form is there, closed by live.js
    # while the claim section says so, with the reason, and opens once it is released.
    assert 'data-open="0"' in html
    assert 'id="decision-form"' in html and 'data-open-while="decision-claim"' in html
    assert "the claim lapses at" in html and "data-closed-why" in html


def test_a_form_waiting_for_a_claim_is_closed_without_javascript_and_the_claim_says_why(
    client, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    waiting = login(client, second_reviewer).get(detail_url(interrupt)).content.decode()
    # Closed in the HTML itself: without live.js nothing in it can be sent.
    assert '<fieldset class="bare" disabled>' in waiting
    # The claim section gives this viewer's reason, for live.js to show should the form
    # close after the page loaded (a claim made meanwhile).
    claim = re.search(r'<section id="decision-claim"[^>]*>', waiting)
    assert claim and "ask them to release it, or wait:" in claim[0]

    holding = login(client, reviewer).get(detail_url(interrupt)).content.decode()
    assert '<fieldset class="bare">' in holding
    assert 'data-why=""' in holding
    assert 'id="decision-blocked" data-closed-why hidden></p>' in holding


def test_a_refused_answer_gives_the_claims_reason_once(client, reviewer, second_reviewer):
    # Claimed between the page's load and the submit: the refusal above the form says
    # why; nothing in the form says it again.
    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    refused = login(client, second_reviewer).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    html = refused.content.decode()
    assert refused.status_code == 403
    assert html.count("ask them to release it, or wait:") == 1
    assert 'id="decision-blocked" data-closed-why hidden></p>' in html
    claim = re.search(r'<section id="decision-claim"[^>]*>', html)
    assert claim and 'data-why=""' in claim[0]


def test_a_claim_on_a_request_one_may_not_decide_anyway_shows_no_form(
    client, reviewer, second_reviewer
):
    # The second reviewer started the thread (separation of duties): a released claim
    # would not let them decide, so no form waits for it.
    interrupt = make_interrupt(owner=second_reviewer)
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    html = login(client, second_reviewer).get(detail_url(interrupt)).content.decode()
    assert "ask them to release it, or wait:" in html
    assert 'id="decision-form"' not in html and "data-closed-why" not in html


def test_a_claim_over_htmx_answers_204(client, reviewer):
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        reverse("interrupt_claim", args=[interrupt.pk]), HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 204


def test_a_second_reviewer_cannot_claim_or_decide_a_claimed_request(
    client, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    login(client, second_reviewer)
    claim = client.post(reverse("interrupt_claim", args=[interrupt.pk]), HTTP_HX_REQUEST="true")
    decide = client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert claim.status_code == 409
    assert "rita-reviewer already claimed" in claim.content.decode()
    assert decide.status_code == 403
    assert Decision.objects.count() == 0


def test_the_page_says_why_a_reviewer_may_not_decide_in_the_words_the_service_refuses_with(
    client, reviewer, second_reviewer
):
    from django.utils.html import escape

    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))
    login(client, second_reviewer)

    page = client.get(detail_url(interrupt)).content.decode()
    decide = client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert decide.status_code == 403
    refusal = decide.context["refusal"].message
    assert "claimed this request at" in refusal
    assert escape(refusal) in page


def test_a_claim_does_not_block_an_admin(client, reviewer, admin_user):
    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))

    response = login(client, admin_user).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 302
    assert Decision.objects.get(interrupt=interrupt).reviewer == admin_user


def test_releasing_a_claim_lets_others_decide(client, reviewer, second_reviewer):
    interrupt = make_interrupt()
    login(client, reviewer).post(reverse("interrupt_claim", args=[interrupt.pk]))
    client.post(reverse("interrupt_unclaim", args=[interrupt.pk]))

    response = login(client, second_reviewer).post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 302


def test_an_auditor_cannot_claim(client, auditor):
    interrupt = make_interrupt()

    response = login(client, auditor).post(reverse("interrupt_claim", args=[interrupt.pk]))

    assert response.status_code == 403


def test_the_banner_of_a_refused_note_names_the_real_cause(client, reviewer, settings):
    settings.PORTAL_MAX_NOTE_CHARS = 2000
    interrupt = make_interrupt()

    response = login(client, reviewer).post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "approve", "note": "n" * 2100},
    )

    assert response.status_code == 422
    assert response.context["form"].non_field_errors() == [
        "Not recorded: note: 2,100 characters, over the limit of 2,000."
    ]
    assert "does not fit" not in response.content.decode()


# --- catching up after a reconnect -------------------------------------------------------


def test_a_pending_page_catches_up_leaving_its_form_and_a_decided_one_with_the_decision(
    client, reviewer, second_reviewer
):
    # A page whose socket was away asks this on reconnect: while pending, not the form (so a
    # half-typed answer stays); once decided elsewhere, the swaps the decision pushed.
    from portal.reviews.decisions import decision_submit

    interrupt = make_interrupt()
    login(client, reviewer)
    page = client.get(detail_url(interrupt)).content.decode()
    url = reverse("interrupt_catch_up", args=[interrupt.pk])
    assert f'data-refresh-url="{url}"' in page
    assert 'data-refresh-target="interrupt-catch-up"' in page

    pending = client.get(url).content.decode()
    assert pending.startswith('<div id="interrupt-catch-up" hidden></div>')
    assert 'id="decision-panel"' not in pending and 'id="interrupt-status"' not in pending

    decision_submit(
        interrupt=interrupt,
        reviewer=second_reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )
    html = client.get(url).content.decode()
    assert html.startswith('<div id="interrupt-catch-up" hidden></div>')
    assert 'id="interrupt-status"' in html and ">resolved</span>" in html
    assert 'hx-swap-oob="outerHTML:#decision-news' in html
    assert second_reviewer.get_username() in html


def test_a_pending_page_catches_up_with_the_votes_and_the_claim_made_while_it_was_away(
    client, settings, reviewer, second_reviewer
):
    # Two approvals needed. While this reviewer's socket was away another voted, then
    # claimed the request: the catch-up shows both, leaves the form alone (a half-typed
    # answer stays) and says this reviewer may no longer decide (live.js disables it).
    from portal.reviews.claims import interrupt_claim
    from portal.reviews.decisions import decision_submit

    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:tool_approval": {"approvals_required": 2}}
    interrupt = make_interrupt()
    login(client, reviewer)
    url = reverse("interrupt_catch_up", args=[interrupt.pk])
    before = client.get(url).content.decode()
    assert 'data-open="1"' in before and "Approvals: 0 of 2" in before

    decision_submit(
        interrupt=interrupt,
        reviewer=second_reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )
    interrupt_claim(interrupt=Interrupt.objects.get(pk=interrupt.pk), user=second_reviewer)
    html = client.get(url).content.decode()
    assert html.startswith('<div id="interrupt-catch-up" hidden></div>')
    assert '<section id="decision-claim"' in html and 'hx-swap-oob="true"' in html
    assert f"<strong>{second_reviewer.get_username()}</strong> claimed" in html
    assert 'data-open="0"' in html
    assert "Approvals: 1 of 2" in html and f"by <strong>{second_reviewer.get_username()}" in html
    assert 'id="decision-panel"' not in html and 'name="approved"' not in html


def test_catching_up_on_a_thread_one_may_not_see_is_a_404(client, support_agent, reviewer):
    interrupt = make_interrupt(owner=reviewer)
    login(client, support_agent)
    assert client.get(reverse("interrupt_catch_up", args=[interrupt.pk])).status_code == 404
