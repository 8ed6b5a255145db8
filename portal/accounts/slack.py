"""Which Slack user is which portal user: linked once, by the user, never by names.

A click from an unlinked Slack user is answered (only to them) with a link to their
profile that carries a signed, short-lived code naming their Slack identity, as Slack
vouched for it in a signed request. Signed in to the portal, they confirm the link on
their profile page; it holds until they unlink it there. A Slack identity is linked to one
portal user at most, and a user has one Slack identity (the database refuses a second).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.models import AuditEvent, SlackLink, SlackReplay, audit_record

# A code is good for this long: the time to open the link and confirm.
CODE_SECONDS = 15 * 60
_SALT = "portal.slack.link"


class LinkRefused(ValueError):
    """The link cannot be made; the message says why."""


def slack_link_code(*, team_id: str, slack_user_id: str) -> str:
    """The signed code a profile link carries for this Slack identity."""
    return signing.dumps({"team": team_id, "user": slack_user_id}, salt=_SALT, compress=True)


def slack_link_read(code: str) -> tuple[str, str]:
    """The (team id, Slack user id) a code names; ``LinkRefused`` if forged or old."""
    try:
        data = signing.loads(code, salt=_SALT, max_age=CODE_SECONDS)
    except signing.SignatureExpired:
        raise LinkRefused(
            "This link is older than 15 minutes. Click a button in Slack again for a new one."
        ) from None
    except signing.BadSignature:
        raise LinkRefused(
            "This link is not one the portal made. Click a button in Slack."
        ) from None
    return str(data["team"]), str(data["user"])


def slack_link_create(*, user: Any, code: str) -> SlackLink:
    """Link ``user`` to the Slack identity ``code`` names (``LinkRefused`` if ``user``
    has one already, or that identity is another user's); the link is in the audit trail."""
    team_id, slack_user_id = slack_link_read(code)
    if SlackLink.objects.filter(user=user).exists():
        raise LinkRefused("Your account is linked to Slack already; unlink it first.")
    try:
        with transaction.atomic():
            link = SlackLink.objects.create(user=user, team_id=team_id, slack_user_id=slack_user_id)
            audit_record(
                action=AuditEvent.Action.SLACK_LINK,
                actor=user,
                target=user,
                detail={"team": team_id, "slack_user": slack_user_id},
            )
            return link
    except IntegrityError:
        # The unique constraints are the last word when two confirmations race.
        raise LinkRefused(
            "That Slack user is linked to another portal account (or yours was just "
            "linked). Unlink it there first."
        ) from None


def slack_link_delete(*, user: Any) -> bool:
    """Unlink ``user`` from Slack, in the audit trail; False when there was no link."""
    with transaction.atomic():
        # Row lock: two unlink clicks at once would otherwise both record an unlinking.
        link = SlackLink.objects.select_for_update().filter(user=user).first()
        if link is None:
            return False
        link.delete()
        audit_record(
            action=AuditEvent.Action.SLACK_UNLINK,
            actor=user,
            target=user,
            detail={"team": link.team_id, "slack_user": link.slack_user_id},
        )
    return True


def slack_user(*, team_id: str, slack_user_id: str) -> Any | None:
    """The active portal user linked to this Slack identity, or None."""
    link = (
        SlackLink.objects.select_related("user")
        .filter(team_id=team_id, slack_user_id=slack_user_id, user__is_active=True)
        .first()
    )
    return link.user if link is not None else None


def slack_signature_take(signature: str, *, forget_after: float) -> bool:
    """Record that a signed Slack request was taken: False when it was taken before (a
    replay). Signatures older than ``forget_after`` seconds are forgotten, since the
    timestamp window refuses those requests anyway."""
    try:
        with transaction.atomic():
            SlackReplay.objects.filter(
                seen_at__lt=timezone.now() - timedelta(seconds=forget_after)
            ).delete()
            SlackReplay.objects.create(signature=signature[:80])
    except IntegrityError:
        return False
    return True
