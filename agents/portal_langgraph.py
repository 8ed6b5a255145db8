"""Reviewing a LangGraph graph's decisions in the portal (optional: needs ``langgraph``).

A node calls ``ask_portal(...)`` where it would call LangGraph's ``interrupt()``. The
first time, it raises the request in the portal and pauses the graph with LangGraph's own
``interrupt()`` (so the graph's checkpointer keeps its state, as usual). The graph is then
resumed with the portal's answer, either way:

- by the long-poll: ``invoke_until_answered(graph, input, config, portal)`` runs the
  graph and, at each pause on a portal request, waits for the answer and resumes;
- by the webhook: the receiver checks the body with ``portal.verify_webhook`` and calls
  ``graph.invoke(resume_with(request), {"configurable": {"thread_id":
  request.external_ref}})`` (``ask_portal`` puts the graph's thread id there).

On resume the node runs again from its top (LangGraph's rule): ``ask_portal`` raises the
same request again, which the portal recognises by its idempotency key (the graph's
thread, the node's task and the request's fields) and answers with the first one, and
LangGraph's ``interrupt()`` returns the answer. ``ask_portal`` returns an
``agents.portal_client.Answer``: act only when ``answer.goes_ahead``.

LangGraph is a benchmark dependency of this project, not a runtime one: import this
module only where it is installed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langgraph.config import get_config
from langgraph.types import Command, interrupt

from agents.portal_client import Answer, PortalClient, Request

__all__ = ["PORTAL_REQUEST", "ask_portal", "invoke_until_answered", "portal_request", "resume_with"]

# The key of the value a paused graph's LangGraph interrupt carries.
PORTAL_REQUEST = "portal_request"


def _key(config: Mapping[str, Any], fields: dict[str, Any]) -> str:
    configurable = config.get("configurable") or {}
    where = [str(configurable.get("thread_id")), str(configurable.get("checkpoint_ns"))]
    what = json.dumps(fields, sort_keys=True, default=str)
    return "langgraph-" + hashlib.sha256("\n".join([*where, what]).encode()).hexdigest()[:48]


def ask_portal(portal: PortalClient, *, agent: str, key: str = "", **fields: Any) -> Answer:
    """Ask the portal's reviewers from inside a LangGraph node and return their answer.

    ``fields`` are those of ``PortalClient.raise_request`` (title, message, payload,
    response_schema or actions, expires_in, callback_url...). ``key`` tells apart two
    otherwise identical asks in one node. The graph needs a checkpointer, as for
    ``interrupt()``.
    """
    config = get_config()
    thread_id = str((config.get("configurable") or {}).get("thread_id") or "")
    fields.setdefault("external_ref", thread_id)
    idempotency_key = _key(config, {"agent": agent, "key": key, **fields})
    # The source is left out of the key, so graphs paused before it was sent keep theirs.
    fields.setdefault("source", "langgraph")
    request = portal.raise_request(agent=agent, idempotency_key=idempotency_key, **fields)
    value = interrupt({PORTAL_REQUEST: request.id, "title": request.title})
    answered = Request.from_json(value) if isinstance(value, dict) and "id" in value else None
    if answered is None or answered.id != request.id or answered.answer is None:
        # Fail closed: a resume that is not this request's answer is never taken as one.
        raise ValueError(
            f"the graph was resumed with something other than the answer to portal request "
            f"{request.id}; resume it with resume_with(portal.wait({request.id!r}))"
        )
    return answered.answer


def portal_request(result: dict[str, Any]) -> str | None:
    """The portal request a graph paused on, from ``graph.invoke``'s result, or None."""
    for pause in result.get("__interrupt__") or []:
        value = getattr(pause, "value", None)
        found = value.get(PORTAL_REQUEST) if isinstance(value, dict) else None
        if isinstance(found, str):
            return found
    return None


def resume_with(request: Request) -> Command[Any]:
    """The ``Command`` that resumes a graph with ``request``'s answer."""
    return Command(resume=request.raw)


def invoke_until_answered(
    graph: Any,
    input: Any,
    config: dict[str, Any],
    portal: PortalClient,
    *,
    timeout: float | None = None,
) -> dict[str, Any]:
    """``graph.invoke(input, config)``, resumed with the portal's answer (by long-poll)
    each time it pauses on a portal request, until it finishes or pauses on something
    else. ``timeout`` bounds each wait; a request still pending then raises TimeoutError
    (the graph stays paused, to be resumed later)."""
    result: dict[str, Any] = graph.invoke(input, config)
    while (request_id := portal_request(result)) is not None:
        request = portal.wait(request_id, timeout=timeout)
        if request.pending:
            raise TimeoutError(f"portal request {request_id} is still pending")
        result = graph.invoke(resume_with(request), config)
    return result
