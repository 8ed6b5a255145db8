"""API tokens: making one for a user (``api_token_create``) and the hash it is found by.

Only a token's SHA-256 is stored; the token itself is shown once, when it is made
(``manage.py create_api_token``); the JSON API finds a token by that hash.
"""

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction

from portal.models import ApiToken, AuditEvent, audit_record, password_fingerprint

TOKEN_PREFIX = "prt_"
WEBHOOK_SECRET_PREFIX = "whsec_"
ALL_SCOPES = tuple(ApiToken.Scope.values)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(
    *,
    user: Any,
    name: str = "",
    scopes: Iterable[str] = ALL_SCOPES,
    expires_at: datetime | None = None,
    by: Any = None,
) -> tuple[ApiToken, str]:
    """A new token for ``user``: (the stored row, the token itself). The token is not
    stored, so this is the only time it can be shown. ``scopes`` defaults to all of them;
    the token never does more than its user may. A token with the ``request`` scope gets
    a webhook secret (``row.webhook_secret``) that signs the answers sent to its
    requests' callback URLs. ``by``: who created it (None: an operator at the command
    line), for the audit trail."""
    scopes = sorted(set(scopes))
    unknown = set(scopes) - set(ALL_SCOPES)
    if unknown:
        raise ValueError(f"unknown scopes {sorted(unknown)}; choose from {list(ALL_SCOPES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    # The key the answers to this token's requests are signed with, shown once with it.
    secret = WEBHOOK_SECRET_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        row = ApiToken.objects.create(
            user=user,
            name=name,
            token_hash=hash_token(token),
            scopes=scopes,
            expires_at=expires_at,
            password_fingerprint=password_fingerprint(user),
            webhook_secret=secret if ApiToken.Scope.REQUEST in scopes else "",
        )
        audit_record(
            action=AuditEvent.Action.TOKEN_CREATE,
            actor=by,
            target=row,
            detail={
                "user": user.get_username(),
                "name": name,
                "scopes": scopes,
                "expires_at": expires_at,
            },
        )
    return row, token
