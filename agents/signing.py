"""Signatures on webhooks the portal sends, and how a receiver checks them.

The portal signs ``"<timestamp>." + body`` with HMAC-SHA256 and the shared
secret, and sends ``Portal-Signature: t=<timestamp>,v1=<hex>``. A receiver
recomputes the signature over the exact bytes it received and refuses a
timestamp older than its tolerance, so a captured request cannot be replayed
later. During a secret rotation the header may carry several ``v1=`` values, and
the receiver may hold several secrets; any one pair that matches is enough.

This module is part of the runtime's leaf package: it imports nothing from
Django, so an agent running anywhere can verify what the portal sends.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

HEADER = "Portal-Signature"
DEFAULT_TOLERANCE = 300


class SignatureError(ValueError):
    """A webhook's signature is missing, malformed, stale or wrong; the message says which."""


def _digest(secret: str | bytes, timestamp: int, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, body: bytes, *, timestamp: int | None = None) -> str:
    """Return the value of the ``Portal-Signature`` header for ``body``."""
    if not secret:
        raise SignatureError("cannot sign with an empty secret")
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return f"t={ts},v1={_digest(secret, ts, body)}"


def verify(
    secret: str | bytes | Sequence[str | bytes],
    header: str | None,
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Check a ``Portal-Signature`` header against ``body``; return its timestamp.

    Raises :class:`SignatureError` naming what was wrong. ``body`` must be the
    raw bytes as received, before any JSON parsing. ``secret`` may be several while
    one replaces another (the new and the old): a match with any of them is enough.
    """
    secrets: list[str | bytes]
    if secret is None or isinstance(secret, str | bytes | bytearray):
        secrets = [secret] if secret else []
    else:
        secrets = [s for s in secret if s]
    if not secrets:
        raise SignatureError("no secret configured to verify with")
    if not header:
        raise SignatureError(f"the {HEADER} header is missing")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError(f"malformed {HEADER} part {part.strip()!r}; expected key=value")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise SignatureError(f"the timestamp {value!r} is not a whole number") from None
        elif key == "v1":
            # compare_digest takes str of ASCII only: anything else would be a TypeError.
            if not value.isascii():
                raise SignatureError(
                    f"the v1= signature {value!r} has characters outside ASCII; "
                    "expected a hex digest"
                )
            candidates.append(value)
    if timestamp is None:
        raise SignatureError(f"the {HEADER} header has no t= timestamp")
    if not candidates:
        raise SignatureError(f"the {HEADER} header has no v1= signature")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError(
            f"the timestamp is {int(current - timestamp)} s from now, outside the "
            f"{tolerance} s tolerance; refusing a possible replay"
        )
    expected = [_digest(one, timestamp, body) for one in secrets]
    if not any(hmac.compare_digest(e, c) for e in expected for c in candidates):
        which = "secret" if len(secrets) == 1 else f"any of the {len(secrets)} secrets"
        raise SignatureError(f"the signature does not match the body and {which}")
    return timestamp
