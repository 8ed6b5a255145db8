from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from portal.accounts import roles


def _landing_page(user: roles.User) -> str | None:
    # Each role starts where its work is; a page missing from this build is skipped.
    choices: list[str] = []
    if user.is_staff:
        choices.append("admin:index")
    if roles.can_decide(user):
        choices.append("queue")
    if roles.can_start(user):
        choices.append("chat")
    if roles.can_view_history(user):
        choices += ["history", "threads"]
    for name in choices:
        try:
            return reverse(name)
        except NoReverseMatch:
            continue
    return None


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    target = _landing_page(request.user)
    if target is not None:
        return redirect(target)
    return render(request, "portal/home.html", {"role_names": roles.role_names(request.user)})
