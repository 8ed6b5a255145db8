"""API tokens: making one (``api_token_create``) and the hash it is found by, revoking a
user's tokens, deleting one in the admin, and the receivers that revoke them when their
user is deactivated or changes password (connected by ``PortalConfig.ready``).

Only a token's SHA-256 is stored; the token itself is shown once, when it is made
(``manage.py create_api_token``); the JSON API finds a token by that hash.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from portal.accounts import roles, sql
from portal.models import ApiToken, AuditEvent, audit_record, password_fingerprint, rows
from portal.models.db import prepared_cursor

TOKEN_PREFIX = "prt_"
WEBHOOK_SECRET_PREFIX = "whsec_"
ALL_SCOPES = tuple(ApiToken.Scope.values)
# How exactly a token's last use is kept: at most one durable write per token and this
# long, not one per request (reads would otherwise each wait for the disk).
TOKEN_LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_found(token_hash: str) -> ApiToken | None:
    """The token with this hash, with its user and the user's permissions, in one query
    (an API request reads all three; each used to be a round trip of its own)."""
    with prepared_cursor() as cursor:
        cursor.execute(_token_found_sql(connection.vendor), [token_hash])
        found = cursor.fetchone()
    if found is None:
        return None
    split = rows.width(ApiToken)
    token = rows.loaded(ApiToken, found[:split])
    user = rows.loaded(get_user_model(), found[split:-1])
    ApiToken.user.field.set_cached_value(token, user)  # as select_related("user") does
    roles.permissions_known(user, found[-1])
    return token


@cache
def _token_found_sql(vendor: str) -> str:
    user = get_user_model()
    return sql.TOKEN_FOUND.format(
        token=rows.columns(ApiToken, "t"),
        user=rows.columns(user, "u"),
        permissions=roles.permissions_column("t.user_id"),
        token_table=ApiToken._meta.db_table,
        user_table=user._meta.db_table,
    )


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


def api_token_used(token: ApiToken) -> None:
    """Note that ``token`` was used now, to within ``TOKEN_LAST_USED_RESOLUTION``."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= TOKEN_LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


def api_tokens_revoke(*, user: Any, reason: str, by: Any = None) -> int:
    """Revoke every live token of ``user`` for good, recording each in the audit trail
    (``by``: who did it; None for the system); returns how many."""
    with transaction.atomic():
        # Row locks: two revocations at once (a deactivation and a password change saved
        # together) would otherwise both record the same token as revoked by them.
        live = list(
            ApiToken.objects.select_for_update()
            .filter(user=user, revoked_at__isnull=True)
            .values_list("pk", "name")
        )
        if not live:
            return 0
        ApiToken.objects.filter(pk__in=[pk for pk, _ in live]).update(
            revoked_at=timezone.now(), revoked_reason=reason
        )
        for pk, name in live:
            audit_record(
                action=AuditEvent.Action.TOKEN_REVOKE,
                actor=by,
                target=("apitoken", pk),
                detail={"user": user.get_username(), "name": name, "reason": reason},
            )
    return len(live)


def api_token_delete(*, token: ApiToken, by: Any) -> None:
    """Delete a token (the admin's way to revoke one), recording who did it."""
    with transaction.atomic():
        audit_record(
            action=AuditEvent.Action.TOKEN_REVOKE,
            actor=by,
            target=token,
            detail={
                "user": token.user.get_username(),
                "name": token.name,
                "reason": "deleted in the admin",
            },
        )
        token.delete()


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def _note_password_rehash(sender: Any, instance: Any, update_fields: Any = None, **_: Any) -> None:
    # Django re-hashes a password on login when its hasher settings changed (set_password,
    # then _password cleared, then save(update_fields=["password"])): the same password, so
    # tokens made under the old hash stay valid. Only those: remember the old hash.
    if update_fields and "password" in update_fields and getattr(instance, "_password", 0) is None:
        old = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
        instance._portal_rehashed_from = old


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def _revoke_tokens_on_user_change(sender: Any, instance: Any, **_: Any) -> None:
    if not instance.is_active:
        api_tokens_revoke(user=instance, reason="its user was deactivated")
    elif getattr(instance, "_password", None) is not None:  # set_password(), then save()
        api_tokens_revoke(user=instance, reason="its user's password changed")
    else:
        old = instance.__dict__.pop("_portal_rehashed_from", None)
        if old is not None and old != instance.password:
            before = password_fingerprint(type(instance)(password=old))
            ApiToken.objects.filter(user=instance, password_fingerprint=before).update(
                password_fingerprint=password_fingerprint(instance)
            )
