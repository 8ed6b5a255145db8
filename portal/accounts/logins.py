"""Who is logging in from where: the client address django-axes counts failures by, and
the audit trail of logins, logouts and failed logins.

A failed login is recorded with the client address and, only when it names an existing
account, that account: a username field that names no one may hold a password typed in
the wrong box, so nothing of it is kept. Attempts that django-axes refuses before checking
any password (the account or address is locked out) are not recorded one by one: their
number is the attacker's to choose, and axes keeps its own log of them. The attempt that
caused the lockout is recorded, marked ``locked_out``.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.models import AuditEvent, audit_record


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or with ``PORTAL_TRUSTED_PROXIES = N`` the address the outermost of our
    N proxies received the request from (the N-th entry of X-Forwarded-For from the right;
    entries further left are whatever the client chose to send)."""
    remote = str(request.META.get("REMOTE_ADDR", ""))
    proxies = settings.PORTAL_TRUSTED_PROXIES
    if proxies <= 0:
        return remote
    forwarded = [
        part.strip()
        for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
        if part.strip()
    ]
    if len(forwarded) < proxies:
        return forwarded[0] if forwarded else remote
    return forwarded[-proxies]


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """The answer to a login while its account or address is locked out: 429, saying for
    how long (django-axes calls this as ``AXES_LOCKOUT_CALLABLE``)."""
    minutes = max(1, math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    response = render(
        request,
        "registration/locked_out.html",
        {"minutes": minutes, "username": username},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response


def _address(request: HttpRequest | None) -> str:
    return client_ip(request) if request is not None else ""


@receiver(user_logged_in, dispatch_uid="portal.accounts.logins.record_login")
def record_login(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    audit_record(
        action=AuditEvent.Action.LOGIN, actor=user, target=user, detail={"ip": _address(request)}
    )


@receiver(user_logged_out, dispatch_uid="portal.accounts.logins.record_logout")
def record_logout(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    if user is not None:
        audit_record(
            action=AuditEvent.Action.LOGOUT,
            actor=user,
            target=user,
            detail={"ip": _address(request)},
        )


@receiver(user_login_failed, dispatch_uid="portal.accounts.logins.record_login_failure")
def record_login_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any
) -> None:
    # axes handles the signal first (its app is listed before ours) and leaves on the
    # request the failure count this attempt reached. Past the limit, the account or
    # address was already locked out and the password was never checked.
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is not None and failures > settings.AXES_FAILURE_LIMIT:
        return
    if failures is None and getattr(request, "axes_locked_out", False):
        return  # refused by a lockout and not even counted
    User = get_user_model()
    typed = credentials.get(User.USERNAME_FIELD) or credentials.get("username")
    account = None
    if isinstance(typed, str) and typed:
        account = User._default_manager.filter(**{User.USERNAME_FIELD: typed}).first()
    detail: dict[str, Any] = {"ip": _address(request), "known_account": account is not None}
    if account is not None:
        detail["username"] = account.get_username()
    if getattr(request, "axes_locked_out", False):
        detail["locked_out"] = True
    audit_record(
        action=AuditEvent.Action.LOGIN_FAILED,
        target=account,
        detail=detail,
    )
