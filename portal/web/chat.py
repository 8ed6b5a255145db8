"""The support chat: pick an agent, write, and watch the answer stream in.

Starting a conversation or sending a follow-up only queues a run (services write, a
worker runs the agent); the page then follows the thread over ``/ws/threads/<id>/``. A
reload rebuilds the transcript from the checkpoints, so nothing lives only in the browser.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST

from portal.accounts import access, roles
from portal.errors import InputError, InterruptNotPending, NotThreadOwner, ThreadNotRetryable
from portal.models import WITHDRAWN, Decision, Interrupt, Thread
from portal.reviews.threads import interrupt_withdraw, thread_message, thread_start
from portal.reviews.words import ending_words
from portal.runs.registry import UnknownAgentError, agent_info, agent_names, agents_info
from portal.web.threads import transcript_context

RECENT = 15
MAX_MESSAGE_CHARS = 4000


class ChatStartForm(forms.Form):
    agent = forms.ChoiceField(label="Agent")
    message = forms.CharField(
        label="Message",
        max_length=MAX_MESSAGE_CHARS,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "What does the customer need?"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent = self.fields["agent"]
        assert isinstance(agent, forms.ChoiceField)
        agent.choices = [(name, name) for name in agent_names()]


class ChatReplyForm(forms.Form):
    message = forms.CharField(
        label="Your message",
        max_length=MAX_MESSAGE_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
    )


def _require_starter(request: HttpRequest) -> None:
    if not roles.can_start(request.user):
        raise PermissionDenied("The support chat is for support staff.")


def _require_owner(request: HttpRequest, thread: Any) -> None:
    # A conversation's chat page is its owner's alone: anyone else who may read it does so
    # on the thread page, and nobody else's words may reach its agent.
    if thread.owner_id != request.user.pk:
        raise PermissionDenied(
            "Only the person who started this conversation can open it in the chat; "
            "read it on its thread page."
        )


def _recent(request: HttpRequest) -> list[Any]:
    threads = list(_recent_threads(request))
    for t in threads:
        t.ended = _ended(t)
    return threads


def _ended(thread: Any) -> dict[str, str] | None:
    """How a finished conversation's latest request ended, in the glossary's words, with
    the tag's colour; None while it runs or waits (its status says so)."""
    if thread.status != Thread.Status.DONE or not thread.last_outcome:
        return None
    withdrawn = thread.last_withdrawn
    words = ending_words(thread.last_outcome, thread.last_note, withdrawn=withdrawn)
    words = "Withdrawn by you" if withdrawn else words  # the list is the owner's own
    return {"outcome": thread.last_outcome, "words": words, "withdrawn": withdrawn}


def _recent_threads(request: HttpRequest) -> Any:
    # Each conversation with how its latest request ended, so the list can say approved,
    # rejected (and why), ignored or withdrawn rather than one "done" for all.
    latest = Decision.objects.filter(thread=OuterRef("pk")).order_by("-created_at", "-pk")
    return (
        access.visible_threads(request.user)
        .filter(owner_id=request.user.pk)
        .annotate(
            last_outcome=Subquery(latest.values("outcome")[:1]),
            last_note=Subquery(latest.values("note")[:1]),
            last_withdrawn=Subquery(latest.annotate(w=WITHDRAWN).values("w")[:1]),
        )
        .order_by("-updated_at")[:RECENT]
    )


def _agents() -> list[dict[str, str]]:
    return [{"name": a.name, "about": a.hint, "example": a.example} for a in agents_info()]


@require_http_methods(["GET", "POST"])
@login_required
def chat(request: HttpRequest) -> HttpResponse:
    """A new conversation: GET shows the form (``?agent=`` and ``?example=1`` prefill it),
    POST starts the thread and goes to it."""
    _require_starter(request)
    status = 200
    if request.method == "POST":
        form = ChatStartForm(request.POST)
        if form.is_valid():
            try:
                thread, _run = thread_start(
                    agent=form.cleaned_data["agent"],
                    input={"messages": [{"role": "user", "content": form.cleaned_data["message"]}]},
                    user=request.user,
                )
            except (InputError, UnknownAgentError) as exc:
                form.add_error(None, str(exc))
            else:
                return redirect("chat_thread", thread_id=thread.pk)
        status = 400
    else:
        agent = request.GET.get("agent", "")
        initial: dict[str, str] = {}
        if agent in settings.PORTAL_AGENTS:
            initial["agent"] = agent
            if request.GET.get("example"):
                initial["message"] = agent_info(agent).example
        if not initial and "refunds" in settings.PORTAL_AGENTS:
            initial["agent"] = "refunds"  # the demo's first stop
        form = ChatStartForm(initial=initial)
    context = {"form": form, "agents": _agents(), "recent": _recent(request)}
    return render(request, "portal/chat.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def chat_thread(request: HttpRequest, thread_id: str) -> HttpResponse:
    """One conversation, live, for its owner. POST sends a follow-up once the previous
    turn is done."""
    thread = access.get_thread_for_user(request, thread_id)
    _require_starter(request)
    _require_owner(request, thread)
    status = 200
    form = ChatReplyForm()
    if request.method == "POST":
        form = ChatReplyForm(request.POST)
        if form.is_valid():
            try:
                thread_message(thread=thread, text=form.cleaned_data["message"], user=request.user)
            except NotThreadOwner as exc:
                raise PermissionDenied(str(exc)) from None
            except (InputError, ThreadNotRetryable) as exc:
                form.add_error("message", str(exc))
            else:
                return redirect("chat_thread", thread_id=thread.pk)
        status = 400
    context = transcript_context(thread)
    context.update({"reply_form": form, "recent": _recent(request), "agents": _agents()})
    return render(request, "portal/chat.html", context, status=status)


@require_POST
@login_required
def chat_withdraw(request: HttpRequest, thread_id: str) -> HttpResponse:
    """The person who started the conversation withdraws the request waiting for approval.
    The agent resumes with a decline (fail closed) and tells the customer so in the chat;
    the withdrawal is recorded as a cancelled decision by its requester.

    A POST without ``confirm=yes`` withdraws nothing: it answers with a page that asks
    first (no script needed, so it works under the Content-Security-Policy and without
    JavaScript)."""
    thread = access.get_thread_for_user(request, thread_id)
    if thread.owner_id != request.user.pk:
        raise PermissionDenied(
            "Only the person who started this conversation can withdraw its request; "
            "reviewers reject it from the review queue instead."
        )
    pending = (
        Interrupt.objects.filter(thread=thread, status=Interrupt.Status.PENDING)
        .order_by("-created_at")
        .first()
    )
    if pending is None:
        messages.warning(request, "Nothing is waiting for approval here, so nothing was withdrawn.")
    elif request.POST.get("confirm") != "yes":
        return render(
            request, "portal/withdraw_confirm.html", {"thread": thread, "pending": pending}
        )
    else:
        try:
            interrupt_withdraw(interrupt=pending, user=request.user, door=Decision.Door.DASHBOARD)
        except InterruptNotPending as exc:  # a reviewer decided a moment earlier
            messages.warning(request, f"Not withdrawn: {exc}.")
        else:
            messages.success(request, "Request withdrawn. The agent will say it was not done.")
    return redirect("chat_thread", thread_id=thread.pk)


urlpatterns = [
    path("chat/", chat, name="chat"),
    path("chat/<str:thread_id>/", chat_thread, name="chat_thread"),
    path("chat/<str:thread_id>/withdraw", chat_withdraw, name="chat_withdraw"),
]
