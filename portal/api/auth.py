"""Who is calling: ``Authorization: Bearer <token>``, checked for the endpoint's scope.

``BearerToken(scope)`` is an endpoint's ``auth``; ``token_user`` is the user it found.
Tokens are made and hashed in ``portal.accounts.tokens``.
"""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from portal.accounts.tokens import api_token_used, hash_token, token_found
from portal.api.errors import ApiProblem
from portal.models import ApiToken

# How precisely a token's last_used_at is kept: it is written when older than this.


class ApiDisabled(HttpError):
    def __init__(self) -> None:
        super().__init__(
            403, "The JSON API is turned off on this server (PORTAL_API_ENABLED is false)."
        )


class BearerToken(HttpBearer):
    """A valid token carrying ``scope``: checked before the body is read, so a token
    without the scope gets 403 naming it whatever it sends."""

    def __init__(self, scope: str = ApiToken.Scope.READ) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> Any:
        # Checked before the token, so a disabled API says so even to a bad token.
        if not settings.PORTAL_API_ENABLED:
            raise ApiDisabled()
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        if not token:
            return None
        row = token_found(hash_token(token.strip()))
        if row is None:
            return None
        refusal = row.refusal()
        if refusal is not None:
            raise ApiProblem(401, refusal)
        if self.scope not in (row.scopes or []):
            raise ApiProblem(
                403,
                f"This token lacks the '{self.scope}' scope; create one with "
                f"manage.py create_api_token USER --scope {self.scope}.",
            )
        api_token_used(row)
        request.user = row.user
        request.api_token = row  # type: ignore[attr-defined]
        return row.user


def token_user(request: HttpRequest) -> Any:
    """The token's user (ninja puts what the auth returned on ``request.auth``)."""
    return getattr(request, "auth", None)
