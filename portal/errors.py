"""Refusals: what services raise when they will not do what was asked.

Each message says what was wrong and, where it helps, what to do instead; views show it
to the user as it is.
"""

from __future__ import annotations


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
