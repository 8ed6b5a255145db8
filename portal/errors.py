"""Refusals: what services raise when they will not do what was asked.

Each message says what was wrong and, where it helps, what to do instead; views show it
to the user as it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


class Refused(Exception):
    """Base class: the request was understood and refused; nothing was written."""


class InputError(Refused, ValueError):
    """The input to start or resume a thread is malformed or too large."""


class InterruptNotPending(Refused):
    """The interrupt was already decided, cancelled or expired."""


class ThreadNotRetryable(Refused):
    """``thread_continue`` on a thread that has not failed, or already has work queued."""


class ThreadNotCancellable(Refused):
    """``thread_cancel`` on a thread that already finished or was cancelled."""


class ThreadActionForbidden(Refused):
    """Retrying or cancelling a thread the user neither owns nor may act on."""


class NotThreadOwner(Refused):
    """A follow-up from someone other than the person who started the thread."""


class DecisionRefused(Refused):
    """A decision (or claim) was refused; nothing was written."""

    status_code = 400

    def __init__(self, message: str, *, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors: list[str] = list(errors or [])


class AlreadyDecided(DecisionRefused):
    status_code = 409


class AlreadyVoted(DecisionRefused):
    """This reviewer already answered a request that needs several reviewers."""

    status_code = 409


class StaleDecision(DecisionRefused):
    """The form answers a request the thread no longer waits on."""

    status_code = 409


class ThreadNotPaused(DecisionRefused):
    status_code = 404


class DecisionForbidden(DecisionRefused):
    """Role, claim or policy: this user may not decide this request."""

    status_code = 403


class ClaimConflict(DecisionRefused):
    status_code = 409


class InvalidDecision(DecisionRefused):
    """The answer breaks the request's schema (or the note/size limits); see ``errors``."""

    status_code = 422


def when(moment: datetime | None) -> str:
    """A time as refusals and notes say it: ``2025-01-31 12:00:00 UTC``."""
    if moment is None:
        return "an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def who(user: Any) -> str:
    """A person as refusals and notes name them; None is the system."""
    return user.get_username() if user is not None else "the system"
