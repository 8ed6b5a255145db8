"""One interrupt: what the agent asks, the conversation so far, and the decision form.

The form posts to ``interrupt_decide`` (a plain POST, so it works without JavaScript),
which goes through ``decision_submit`` like the admin and the API. A refusal re-renders
the page with the errors next to their fields and the status the service gave it (422
for a value that breaks the schema, 409 when someone else decided first, 403 for a
policy). Claiming and releasing are POSTs that answer HTMX with 204 and redirect
otherwise.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from portal.accounts import access, roles
from portal.errors import DecisionRefused
from portal.models import Checkpoint, Decision, Interrupt
from portal.reviews.checks import decision_forbidden
from portal.reviews.claims import interrupt_claim, interrupt_unclaim
from portal.reviews.forms import DecisionForm
from portal.reviews.words import recorded_words
from portal.web import live
from portal.web.threads import transcript


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


def _conversation(interrupt: Interrupt) -> list[dict[str, Any]]:
    # The thread as the agent saw it when it asked: checkpoints up to the pause.
    steps = Checkpoint.objects.filter(
        thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq
    )
    return transcript(interrupt.thread, steps.conversation())


def _asking_calls(interrupt: Interrupt, conversation: list[dict[str, Any]]) -> list[Any]:
    """The tool call(s) this request is about."""
    calls = interrupt.tool_calls
    if calls:  # the ToolNode's approval of high-risk calls
        return calls
    if interrupt.tool_call_id:  # a tool that asked from inside itself
        for message in conversation:
            for call in message["tool_calls"]:
                if call["id"] == interrupt.tool_call_id:
                    return [call]
    return []


def _render(
    request: HttpRequest,
    interrupt: Interrupt,
    *,
    form: DecisionForm | None = None,
    status: int = 200,
    refusal: DecisionRefused | None = None,
) -> HttpResponse:
    conversation = _conversation(interrupt)
    decision = Decision.objects.select_related("reviewer").filter(interrupt=interrupt).first()
    context = _claim_context(request, interrupt)
    if form is None and (context["decide_open"] or context["waits_for_claim"]):
        form = DecisionForm(interrupt=interrupt)
    if form is not None and form.non_field_errors():
        context["closed_why"] = ""  # the refusal above the form says it already
    context |= {
        "thread": interrupt.thread,
        "conversation": conversation,
        "asking_calls": _asking_calls(interrupt, conversation),
        "decision": decision,
        "form": form,
        "refusal": refusal,
        # A refusal the form does not carry (a conflict): shown above the panel.
        "refusal_notice": refusal.message if refusal and not (form and form.is_bound) else "",
    }
    return render(request, "portal/interrupt.html", context, status=status)


def _claim_context(request: HttpRequest, interrupt: Interrupt) -> dict[str, Any]:
    """What the claim section says to this user: who holds the request, which buttons they
    get, and whether they may decide now."""
    can_decide = roles.can_decide(request.user)
    forbidden = decision_forbidden(interrupt=interrupt, user=request.user)
    blocked = str(forbidden) if interrupt.is_pending and forbidden else ""
    holder = interrupt.claim_holder()
    context = {
        "interrupt": interrupt,
        # A claim that has not lapsed, and when it does (the page shows both).
        "holder": holder,
        "claim_minutes": settings.PORTAL_CLAIM_EXPIRES_SECONDS // 60,
        "can_decide": can_decide,
        "can_claim": roles.can_claim(request.user),
        "can_take_over": roles.can_take_over_claims(request.user),
        "blocked_reason": blocked,
        "claimed_by_me": holder is not None and holder.pk == request.user.pk,
        # Whether this user may decide now; live.js disables the form when it turns false.
        "decide_open": interrupt.is_pending and can_decide and not blocked,
        # Only someone else's claim stands in the way: the form is shown, closed, and
        # opens (live.js) once the claim section says the claim has ended.
        "waits_for_claim": bool(blocked)
        and decision_forbidden(interrupt=interrupt, user=request.user, claims=False) is None,
    }
    # What the closed form says, and the claim section offers live.js for it.
    context["closed_why"] = blocked if context["waits_for_claim"] else ""
    return context


@require_GET
@login_required
def interrupt_detail(request: HttpRequest, interrupt_id: str) -> HttpResponse:
    interrupt = access.get_interrupt_for_user(request, interrupt_id)
    return _render(request, interrupt)


@require_GET
@login_required
def interrupt_catch_up(request: HttpRequest, interrupt_id: str) -> HttpResponse:
    """What an open page of this request missed while its socket was away, as out-of-band
    swaps beside an empty target. While the request is pending: who holds it now and the
    votes so far (the form is left alone, so a half-typed answer stays; live.js closes
    or opens it as the claim section now says). Once it is not: the swaps its decision
    pushed (``live.render_interrupt_page``)."""
    interrupt = access.get_interrupt_for_user(request, interrupt_id)
    html = '<div id="interrupt-catch-up" hidden></div>'
    if interrupt.is_pending:
        context = {**_claim_context(request, interrupt), "oob": True}
        html += render_to_string("portal/partials/claim_change.html", context, request=request)
    else:
        decision = Decision.objects.select_related("reviewer").filter(interrupt=interrupt).first()
        html += live.render_interrupt_page(interrupt, decision)
    return HttpResponse(html)


@require_POST
@login_required
def interrupt_decide(request: HttpRequest, interrupt_id: str) -> HttpResponse:
    interrupt = access.get_interrupt_for_user(request, interrupt_id, needs=roles.can_decide)
    form = DecisionForm(request.POST, interrupt=interrupt)
    if not form.is_valid():
        return _render(request, interrupt, form=form, status=422)
    try:
        decision = form.submit(request.user, door=Decision.Door.DASHBOARD)
    except DecisionRefused as refusal:
        interrupt.refresh_from_db()
        if refusal.status_code in (404, 409):
            # The form is moot (decided, or the thread moved on): say why, show the page.
            return _render(request, interrupt, status=refusal.status_code, refusal=refusal)
        form.show_refusal(refusal)
        return _render(request, interrupt, form=form, status=refusal.status_code, refusal=refusal)
    messages.success(request, recorded_words(decision))
    return redirect("interrupt_detail", interrupt_id=interrupt.pk)


def _claim_response(request: HtmxRequest, interrupt: Interrupt, action: Any) -> HttpResponse:
    try:
        action(interrupt=interrupt, user=request.user)
    except DecisionRefused as refusal:
        if request.htmx:
            return HttpResponse(
                refusal.message,
                status=refusal.status_code,
                content_type="text/plain; charset=utf-8",
            )
        messages.error(request, refusal.message)
    if request.htmx:
        return HttpResponse(status=204)
    return redirect("interrupt_detail", interrupt_id=interrupt.pk)


@require_POST
@login_required
def interrupt_claim_view(request: HtmxRequest, interrupt_id: str) -> HttpResponse:
    interrupt = access.get_interrupt_for_user(request, interrupt_id, needs=roles.can_claim)
    return _claim_response(request, interrupt, interrupt_claim)


@require_POST
@login_required
def interrupt_unclaim_view(request: HtmxRequest, interrupt_id: str) -> HttpResponse:
    interrupt = access.get_interrupt_for_user(request, interrupt_id, needs=roles.can_claim)
    return _claim_response(request, interrupt, interrupt_unclaim)


urlpatterns = [
    path("interrupts/<str:interrupt_id>/", interrupt_detail, name="interrupt_detail"),
    path("interrupts/<str:interrupt_id>/decide", interrupt_decide, name="interrupt_decide"),
    path("interrupts/<str:interrupt_id>/catch-up", interrupt_catch_up, name="interrupt_catch_up"),
    path("interrupts/<str:interrupt_id>/claim", interrupt_claim_view, name="interrupt_claim"),
    path("interrupts/<str:interrupt_id>/unclaim", interrupt_unclaim_view, name="interrupt_unclaim"),
]
