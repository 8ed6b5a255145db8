"""Who is logging in from where: the client address django-axes counts failures by."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


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
