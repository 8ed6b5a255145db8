"""A small client for agents that run outside the portal: ask its reviewers, get the answer.

::

    from agents.portal_client import PortalClient

    portal = PortalClient("https://portal.example.com", token, webhook_secret=secret)
    request = portal.raise_request(
        agent="invoice-bot",
        title="Pay invoice 7",
        message="Pay **$120** to ACME?",
        payload={"invoice": 7, "amount": 120},
        actions=["accept", "ignore"],
        idempotency_key="invoice-7",
    )
    answer = portal.wait(request.id).answer  # long-polls until a reviewer decided
    if answer.goes_ahead:
        pay()

The answer comes back by long-poll (``wait``, ``get(wait=...)``) or, when the request
named a ``callback_url``, as a webhook the portal signs with the token's webhook secret:
``verify_webhook(body, signature)`` checks it (``agents.signing``) and returns the
request with its answer. Async code has ``araise_request``, ``aget`` and ``await_answer``
(the twin of ``wait``).

Only the standard library: no Django, no HTTP package. The token needs the ``request``
scope, and its user the ``raise_request`` permission (the ``agent`` role).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import quote, urlencode

# Relative, so these files can be copied into a package of another name (the OpenAI Agents
# SDK's own package is called ``agents``; see docs/openai-agents.md).
from . import signing

__all__ = ["Answer", "PortalClient", "PortalError", "Request"]

# Outcomes that let the agent go ahead; everything else (rejected, responded, ignored,
# expired, cancelled) leaves the action undone.
GO_AHEAD = frozenset({"approved", "edited"})


class PortalError(Exception):
    """The portal refused a call (``status`` and its ``detail``, one line per problem in
    ``errors``), answered with something the client cannot read (its ``status``, or 0),
    or could not be reached (``status`` 0)."""

    def __init__(self, status: int, detail: str, errors: list[str] | None = None) -> None:
        lines = "".join(f"\n  {line}" for line in errors or [])
        super().__init__(f"{status}: {detail}{lines}" if status else detail)
        self.status, self.detail, self.errors = status, detail, list(errors or [])


@dataclass(frozen=True)
class Answer:
    """What was decided: the validated ``value``, the ``outcome``, who and when, and the
    decision's hash in the portal's audit chain."""

    outcome: str
    value: Any
    note: str
    decided_by: str | None
    decided_at: str
    decision_id: int
    audit_hash: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        """The answer in ``data``, ignoring fields this client does not know (a newer
        portal may add some); ``PortalError`` when one it needs is missing."""
        known = {f.name for f in fields(cls)}
        missing = sorted(known - data.keys())
        if missing:
            raise PortalError(0, f"the portal's answer lacks {', '.join(missing)}: {data!r:.200}")
        return cls(**{name: data[name] for name in known})

    @property
    def goes_ahead(self) -> bool:
        """True only for an approval or an edit; and for a yes/no schema only when the
        value says ``approved: true`` (fail closed: anything else is a no)."""
        if self.outcome not in GO_AHEAD:
            return False
        if isinstance(self.value, dict) and "approved" in self.value:
            return self.value["approved"] is True
        return True


@dataclass(frozen=True)
class Request:
    """A request as the portal reports it; ``answer`` is None while it is pending."""

    id: str
    status: str  # pending, decided, expired or cancelled
    agent: str
    reason: str
    title: str
    external_ref: str
    thread_id: str
    created_at: str
    expires_at: str | None = None
    source: str = "client"  # the door that raised it: client, langgraph, mcp, openai-agents
    answer: Answer | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Request:
        """The request in ``data``; a field this client does not know is left in ``raw``
        (a newer portal may add some). ``PortalError`` when it is not a request."""
        answer = data.get("answer")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("status"), str):
            raise PortalError(0, f"the portal answered with something not a request: {data!r:.200}")
        if answer is not None and not isinstance(answer, dict):
            raise PortalError(
                0, f"the portal answered with an answer not an object: {answer!r:.200}"
            )
        return cls(
            id=data["id"],
            status=data["status"],
            agent=data.get("agent", ""),
            reason=data.get("reason", ""),
            title=data.get("title", ""),
            external_ref=data.get("external_ref", ""),
            thread_id=data.get("thread_id", ""),
            created_at=data.get("created_at", ""),
            expires_at=data.get("expires_at"),
            source=data.get("source", "client"),
            answer=Answer.from_json(answer) if answer is not None else None,
            raw=data,
        )


class PortalClient:
    """Raise approval requests in a reviewer portal and collect the answers.

    ``base_url`` is the portal's address, ``token`` an API token with the ``request``
    scope, ``webhook_secret`` the secret printed with it (needed only to verify webhooks).
    When a new token replaces one, an answer to a request raised with the old token is
    still signed with the old secret: pass both, ``[new, old]``, until those are answered.
    ``timeout`` bounds each HTTP call beyond any wait the call asks the portal for.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        webhook_secret: str | Sequence[str] | None = None,
        timeout: float = 30.0,
        poll_seconds: float = 25.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        # Several are kept as a tuple: an iterator would be spent by the first webhook.
        self.webhook_secret: str | tuple[str, ...] | None
        if webhook_secret is None or isinstance(webhook_secret, str):
            self.webhook_secret = webhook_secret
        else:
            self.webhook_secret = tuple(webhook_secret)
        self.timeout = timeout
        # The longest single long-poll; the portal refuses more than 30 s.
        self.poll_seconds = poll_seconds

    # --- HTTP ---------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, wait: float = 0
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (the caller's own portal URL)
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout + wait) as response:  # noqa: S310
                answer, status = response.read(), response.status
        except urllib.error.HTTPError as exc:
            try:
                problem = json.loads(exc.read() or b"{}")
            except ValueError:
                problem = {}
            detail = problem.get("detail") or exc.reason or "the portal refused the call"
            raise PortalError(exc.code, str(detail), problem.get("errors")) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PortalError(
                0, f"the portal at {self.base_url} cannot be reached: {reason}"
            ) from None
        return _json_object(status, answer)

    # --- raising ------------------------------------------------------------------------

    def raise_request(
        self,
        *,
        agent: str,
        title: str = "",
        message: str = "",
        summary: str = "",
        payload: Any = None,
        reason: str = "input_required",
        response_schema: dict[str, Any] | None = None,
        actions: list[str] | None = None,
        args: dict[str, Any] | None = None,
        args_schema: dict[str, Any] | None = None,
        expires_in: int | None = None,
        assign_to: dict[str, list[str]] | None = None,
        external_ref: str = "",
        callback_url: str = "",
        idempotency_key: str | None = None,
        source: str | None = None,
    ) -> Request:
        """Raise a request; returns it (pending). The same ``idempotency_key`` again
        returns the first request, so a call retried after a lost answer raises one
        request. Without a key, one is made for this call and its own retry: a dropped
        connection is retried once with it."""
        body: dict[str, Any] = {
            "agent": agent,
            "title": title,
            "message": message,
            "summary": summary,
            "payload": payload,
            "reason": reason,
            "external_ref": external_ref,
            "callback_url": callback_url,
            "idempotency_key": idempotency_key or f"client-{uuid.uuid4()}",
        }
        optional = {
            "response_schema": response_schema,
            "actions": actions,
            "args": args,
            "args_schema": args_schema,
            "expires_in": expires_in,
            "assign_to": assign_to,
            # Which door raised it: "langgraph", "mcp" or "openai-agents" (the adapters').
            "source": source,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        try:
            return Request.from_json(self._call("POST", "/api/requests", body))
        except PortalError as exc:
            if exc.status != 0:
                raise
            return Request.from_json(self._call("POST", "/api/requests", body))

    # --- reading ------------------------------------------------------------------------

    def get(self, request_id: str, *, wait: float = 0) -> Request:
        """The request now, or once decided within ``wait`` seconds (a long-poll)."""
        query = f"?{urlencode({'wait': wait})}" if wait else ""
        path = f"/api/requests/{quote(request_id, safe='')}{query}"
        return Request.from_json(self._call("GET", path, wait=wait))

    def wait(self, request_id: str, *, timeout: float | None = None) -> Request:
        """Long-poll until the request is no longer pending (decided, expired or
        cancelled), or ``timeout`` seconds passed (then it is returned still pending)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = self.poll_seconds if deadline is None else deadline - time.monotonic()
            request = self.get(request_id, wait=max(0.0, min(self.poll_seconds, left)))
            if not request.pending or (deadline is not None and time.monotonic() >= deadline):
                return request

    # --- webhooks -----------------------------------------------------------------------

    def verify_webhook(
        self, body: bytes, signature: str | None, *, tolerance: int = signing.DEFAULT_TOLERANCE
    ) -> Request:
        """Check a webhook's ``Portal-Signature`` against the raw ``body`` and return the
        request it carries. Raises ``agents.signing.SignatureError`` naming what is wrong
        (a missing or stale signature, another secret, a changed body)."""
        if not self.webhook_secret:
            raise signing.SignatureError(
                "no webhook secret: pass webhook_secret= (printed with the token)"
            )
        signing.verify(self.webhook_secret, signature, body, tolerance=tolerance)
        event = json.loads(body)
        data = event.get("data", event) if isinstance(event, dict) else event
        return Request.from_json(data)

    # --- async twins: the same calls in a worker thread, so an event loop never blocks --

    async def araise_request(self, **fields: Any) -> Request:
        return await asyncio.to_thread(lambda: self.raise_request(**fields))

    async def aget(self, request_id: str, *, wait: float = 0) -> Request:
        return await asyncio.to_thread(self.get, request_id, wait=wait)

    async def await_answer(
        self,
        request_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the same parameter as wait's)
    ) -> Request:
        """``wait`` for async code (``asyncio.timeout`` around it works as well)."""
        return await asyncio.to_thread(self.wait, request_id, timeout=timeout)


def _json_object(status: int, body: bytes) -> dict[str, Any]:
    # A proxy's HTML page, a truncated body or a list is not an answer the client can
    # read: it is the portal's failure to answer, said as a PortalError like any other.
    try:
        payload = json.loads(body)
    except ValueError:
        raise PortalError(
            status, f"the portal answered {status} with something not JSON: {body[:200]!r}"
        ) from None
    if not isinstance(payload, dict):
        raise PortalError(
            status, f"the portal answered {status} with JSON not an object: {payload!r:.200}"
        )
    return payload
