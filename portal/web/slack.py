"""The Slack door: Slack's interactivity requests (a click on Approve or Reject), and the
profile page where a user links their Slack identity.

A click counts only when Slack signed it (``PORTAL_SLACK_SIGNING_SECRET``), within five
minutes, once (``SlackReplay``), from a Slack user linked to a portal user
(``portal.accounts.slack``). It is recorded by ``decision_submit`` like any other, with
the same permission, separation of duties, quorum and claim rules. The message is then
replaced with the outcome through the click's ``response_url`` (an outbox delivery, in
the decision's transaction); a refusal is told to the clicking user alone.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from slack_sdk.signature import SignatureVerifier

from portal.accounts import roles
from portal.accounts import slack as links
from portal.errors import DecisionRefused
from portal.models import Approval, Decision, Interrupt, SlackLink
from portal.notify import outbox
from portal.notify import slack as messages_slack
from portal.notify.delivery import post
from portal.reviews.decisions import decision_submit

log = logging.getLogger(__name__)

# Slack's own advice: refuse a request whose timestamp is further than this from now.
WINDOW_SECONDS = 5 * 60
_ANSWERS = {messages_slack.APPROVE: True, messages_slack.REJECT: False}


def _refuse(status: int, message: str) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def _checked(request: HttpRequest) -> HttpResponse | None:
    """None when Slack signed this request just now and it was not seen before."""
    secret = settings.PORTAL_SLACK_SIGNING_SECRET
    if not secret:
        return _refuse(404, "Slack is not set up here (PORTAL_SLACK_SIGNING_SECRET).")
    stamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > WINDOW_SECONDS:
        return _refuse(401, "The request's timestamp is missing or over five minutes old.")
    if not SignatureVerifier(secret).is_valid(request.body, stamp, signature):
        return _refuse(401, "The request's X-Slack-Signature does not match its body.")
    if not links.slack_signature_take(signature, forget_after=2 * WINDOW_SECONDS):
        return _refuse(409, "This request was taken already: a replay is refused.")
    return None


def _reply(response_url: str, text: str) -> None:
    # Only the clicking user sees it; best effort within Slack's three seconds, since
    # nothing was recorded that it would have to report.
    try:
        raw = json.dumps(messages_slack.ephemeral(text)).encode()
        post(response_url, raw, {"Content-Type": "application/json"}, seconds=2)
    except (outbox.SendError, outbox.TargetError) as exc:
        log.warning("Slack reply not sent: %s", exc)


def _link_text(team_id: str, slack_user_id: str) -> str:
    code = links.slack_link_code(team_id=team_id, slack_user_id=slack_user_id)
    url = f"{settings.PORTAL_BASE_URL}{reverse('profile')}?slack={code}"
    return (
        "Your Slack account is not linked to a portal account, so nothing was recorded. "
        f"Sign in to the portal and link it from your profile: <{url}|link your account>."
    )


@csrf_exempt  # Slack signs it instead (checked first)
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    """Slack's interactivity request URL: a click on a request's button."""
    refused = _checked(request)
    if refused is not None:
        return refused
    try:
        payload = json.loads(request.POST.get("payload", ""))
        user, team = payload["user"], payload.get("team") or {}
        team_id = str(team.get("id") or user.get("team_id") or "")
        slack_user_id = str(user["id"])
        response_url = str(payload["response_url"])
        [action] = payload["actions"]
        action_id, interrupt_id = str(action["action_id"]), str(action.get("value") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return _refuse(400, "Not a block_actions payload with one action and a response_url.")
    if action_id not in _ANSWERS:
        return HttpResponse(status=200)  # the link button: nothing to record
    try:
        outbox.Target.slack_reply(response_url).check()  # the address rule, before a write
    except outbox.TargetError as exc:
        return _refuse(400, f"The response_url cannot be posted to: {exc}")
    reviewer = links.slack_user(team_id=team_id, slack_user_id=slack_user_id)
    if reviewer is None:
        _reply(response_url, _link_text(team_id, slack_user_id))
        return HttpResponse(status=200)
    if not roles.can_decide(reviewer):
        _reply(response_url, "Your portal account cannot decide requests; nothing was recorded.")
        return HttpResponse(status=200)
    return _decide(reviewer, interrupt_id, _ANSWERS[action_id], response_url)


def _decide(reviewer: Any, interrupt_id: str, approved: bool, response_url: str) -> HttpResponse:
    interrupt = Interrupt.objects.filter(pk=interrupt_id).first()
    if interrupt is None or not messages_slack.offers_buttons(interrupt.response_schema):
        _reply(response_url, "This request cannot be answered from Slack; open it in the portal.")
        return HttpResponse(status=200)
    try:
        # One transaction: the reply that reports the decision is written with it.
        with transaction.atomic():
            recorded = decision_submit(
                interrupt=interrupt,
                reviewer=reviewer,
                value={"approved": approved},
                resume_interrupt_id=interrupt.pk,
                door=Decision.Door.SLACK,
            )
            who = reviewer.get_username()
            if isinstance(recorded, Approval):
                words = f"{who} voted to {'approve' if approved else 'reject'}; " + (
                    getattr(recorded, "needed", "") or "waiting for more votes"
                )
                message = {"response_type": "in_channel", "replace_original": False}
                message["text"] = words
            else:
                words = f"{recorded.get_outcome_display()} by {who} in Slack"
                message = messages_slack.outcome_message(words, request_text=interrupt.summary)
            outbox.outbox_enqueue(
                kind=outbox.SLACK_REPLY,
                payload={"message": message},
                interrupt=interrupt,
                to=outbox.Target.slack_reply(response_url),
            )
    except DecisionRefused as refusal:
        # A button carries no note: a refusal that needs one is given on the request's page.
        page = f"{settings.PORTAL_BASE_URL}{reverse('interrupt_detail', args=[interrupt.pk])}"
        _reply(response_url, f"Nothing was recorded: {refusal.message} (<{page}|open it>).")
    return HttpResponse(status=200)


# --- the profile page and the link --------------------------------------------------


@require_GET
@login_required
def profile(request: HttpRequest) -> HttpResponse:
    """The user's profile: their Slack link, and the confirmation of a new one."""
    link = SlackLink.objects.filter(user_id=request.user.pk or 0).first()
    code = request.GET.get("slack", "")
    pending: tuple[str, str] | None = None
    error = ""
    if code and link is None:
        try:
            pending = links.slack_link_read(code)
        except links.LinkRefused as exc:
            error = str(exc)
    context = {"link": link, "pending": pending, "code": code, "error": error}
    return render(request, "portal/profile.html", context)


@require_POST
@login_required
def slack_link(request: HttpRequest) -> HttpResponse:
    try:
        links.slack_link_create(user=request.user, code=request.POST.get("code", ""))
    except links.LinkRefused as exc:
        return render(request, "portal/profile.html", {"error": str(exc)}, status=400)
    return redirect("profile")


@require_POST
@login_required
def slack_unlink(request: HttpRequest) -> HttpResponse:
    links.slack_link_delete(user=request.user)
    return redirect("profile")


urlpatterns = [
    path("integrations/slack/interactions", slack_interactions, name="slack_interactions"),
    path("profile/", profile, name="profile"),
    path("profile/slack/link", slack_link, name="slack_link"),
    path("profile/slack/unlink", slack_unlink, name="slack_unlink"),
]
