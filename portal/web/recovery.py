"""Recovering a thread from its page: retry a failed one from its last checkpoint, or
cancel one for good. Both go through the services the API and the admin's bulk actions
use (``threads.thread_retry`` and ``threads.thread_cancel``); the owner may act on their
own thread, others need ``retry_thread`` or ``cancel_thread``. (Not in ``threads.py``:
``portal.web.live`` renders from that module.)"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from portal.accounts import access, roles
from portal.errors import ThreadActionForbidden, ThreadNotCancellable, ThreadNotRetryable
from portal.models import Decision, Thread
from portal.reviews.threads import thread_cancel, thread_retry


def _back(request: HttpRequest, thread: Thread) -> str:
    # The owner's chat page posts back="chat" so they land where they were.
    if request.POST.get("back") == "chat" and thread.owner_id == request.user.pk:
        return reverse("chat_thread", args=[thread.pk])
    return reverse("thread_detail", args=[thread.pk])


@require_POST
@login_required
def thread_retry_view(request: HttpRequest, thread_id: str) -> HttpResponse:
    """Retry a failed thread from its last checkpoint (its owner, or ``retry_thread``)."""
    thread = access.get_thread_for_user(request, thread_id)
    if not roles.may_retry(request.user, thread):
        raise PermissionDenied(
            "Only the person who started this conversation, or someone allowed to retry any "
            "thread, can retry it."
        )
    try:
        thread_retry(thread=thread, user=request.user)
    except (ThreadNotRetryable, ThreadActionForbidden) as exc:
        messages.warning(request, f"Not retried: {exc}.")
    else:
        messages.success(request, "Retrying from the last checkpoint; the agent continues.")
    return redirect(_back(request, thread))


@require_POST
@login_required
def thread_cancel_view(request: HttpRequest, thread_id: str) -> HttpResponse:
    """Cancel a thread for good (its owner, or ``cancel_thread``). A POST without
    ``confirm=yes`` cancels nothing: it answers with a page that asks first."""
    thread = access.get_thread_for_user(request, thread_id)
    if not roles.may_cancel(request.user, thread):
        raise PermissionDenied(
            "Only the person who started this conversation, or someone allowed to cancel any "
            "thread, can cancel it."
        )
    back = _back(request, thread)
    if request.POST.get("confirm") != "yes":
        context = {"thread": thread, "back": request.POST.get("back", ""), "back_url": back}
        return render(request, "portal/thread_cancel_confirm.html", context)
    try:
        thread_cancel(thread=thread, user=request.user, door=Decision.Door.DASHBOARD)
    except (ThreadNotCancellable, ThreadActionForbidden) as exc:
        messages.warning(request, f"Not cancelled: {exc}.")
    else:
        messages.success(request, "Cancelled. Nothing more runs in this conversation.")
    return redirect(back)


urlpatterns = [
    path("threads/<str:thread_id>/retry", thread_retry_view, name="thread_retry"),
    path("threads/<str:thread_id>/cancel", thread_cancel_view, name="thread_cancel"),
]
