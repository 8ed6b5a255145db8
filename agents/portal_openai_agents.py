"""Approving an OpenAI Agents SDK run's tool calls in the portal (needs ``openai-agents``).

A run pauses on the tools declared with ``needs_approval``: its result's
``interruptions``. ``run_with_portal`` raises one portal request per such tool call,
waits for the answers (long-poll), applies ``state.approve(item)`` or
``state.reject(item, rejection_message=<the reviewer's reason>)`` and resumes the run,
until it finishes. ``save_state`` receives ``state.to_string()`` before anyone is asked:
store it, and after a restart pass ``RunState.from_string(agent, saved)`` back in. Each
request's idempotency key comes from the run's id and the tool call's id (kept in the
state), so asking again finds the same requests. With a webhook instead (``callback_url``
among ``ask_portal``'s fields), pass each signed POST to ``collect_webhook`` and, once it
says every call is answered, call ``apply_answers`` then ``Runner.run``.

The SDK's package is named ``agents`` too: this module imports nothing of it (the caller
passes its ``Runner``) and only relative siblings (docs/openai-agents.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .portal_client import PortalClient, Request

__all__ = [
    "SOURCE",
    "apply_answers",
    "ask_portal",
    "await_answers",
    "collect_webhook",
    "reason",
    "run_with_portal",
]

SOURCE = "openai-agents"
# A reviewer approves the call as it is, or refuses it saying why (the model reads it).
ANSWERS = ["accept", "response"]


def _arguments(item: Any) -> Any:
    raw = getattr(item, "arguments", None)
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def _key(run_id: str, item: Any) -> str:
    what = json.dumps([run_id, item.call_id, item.name, getattr(item, "arguments", None)])
    return "openai-agents-" + hashlib.sha256(what.encode()).hexdigest()[:48]


async def ask_portal(
    portal: PortalClient, interruptions: Iterable[Any], *, agent: str, run_id: str, **fields: Any
) -> dict[str, Request]:
    """Raise one request per pending tool call (``ToolApprovalItem``); returns them by
    the tool call's id. ``fields`` are ``raise_request``'s (expires_in, assign_to,
    callback_url...). Asking again for the same run and calls returns the same requests."""
    requests: dict[str, Request] = {}
    for item in interruptions:
        arguments = _arguments(item)
        who = getattr(getattr(item, "agent", None), "name", "") or agent
        shown = json.dumps(arguments, indent=2, sort_keys=True, default=str)
        requests[item.call_id] = await portal.araise_request(
            agent=agent,
            title=f"{item.name} for {who}"[:200],
            message=f"The agent **{who}** wants to call **{item.name}**.\n\n```json\n{shown}\n```",
            summary=f"Call {item.name}"[:200],
            payload={"tool": item.name, "arguments": arguments, "agent": who},
            reason="tool_approval",
            actions=ANSWERS,
            external_ref=run_id,
            idempotency_key=_key(run_id, item),
            source=SOURCE,
            **fields,
        )
    return requests


async def await_answers(
    portal: PortalClient, requests: Mapping[str, Request], *, wait_seconds: float | None = None
) -> dict[str, Request]:
    """Each request once answered (long-poll); TimeoutError naming one still pending
    after ``wait_seconds`` (the run stays paused: ask again later)."""
    answered: dict[str, Request] = {}
    for call_id, request in requests.items():
        done = request
        if request.pending:
            done = await portal.await_answer(request.id, timeout=wait_seconds)
        if done.pending:
            raise TimeoutError(f"portal request {done.id} is still pending")
        answered[call_id] = done
    return answered


def collect_webhook(
    portal: PortalClient,
    body: bytes,
    signature: str | None,
    asked: Mapping[str, str],
    answers: dict[str, Request],
) -> bool:
    """Take one signed webhook: verify it (``agents.signing.SignatureError`` naming what is
    wrong; nothing is taken), then file its answer in ``answers`` under the tool call it
    answers (``asked``: call id to request id, as ``ask_portal`` raised them). A webhook
    for another request is ignored. True once every asked call has its answer."""
    request = portal.verify_webhook(body, signature)
    for call_id, request_id in asked.items():
        if request_id == request.id and not request.pending:
            answers[call_id] = request
    return all(call_id in answers for call_id in asked)


def reason(request: Request) -> str:
    """What the model is told when the call is refused."""
    answer = request.answer
    if answer is None or answer.outcome == "expired":
        return (
            f"The reviewers did not approve {request.title or 'this call'} in time; it was not run."
        )
    said = answer.value.get("args") if isinstance(answer.value, dict) else None
    said = said if isinstance(said, str) and said else answer.note
    who = answer.decided_by or "the portal"
    return f"Refused by {who}" + (f": {said}" if said else ".")


def apply_answers(state: Any, answers: Mapping[str, Request]) -> None:
    """``state.approve`` each pending call whose answer goes ahead, ``state.reject`` the
    others with the reviewer's reason. Fails closed: a call with no answer raises
    ValueError before anything is applied."""
    items = list(state.get_interruptions())
    missing = [item.call_id for item in items if answers.get(item.call_id) is None]
    if missing or any(answers[item.call_id].pending for item in items):
        raise ValueError(f"no portal answer yet for the tool calls {missing or 'pending'}")
    for item in items:
        request = answers[item.call_id]
        if request.answer is not None and request.answer.goes_ahead:
            state.approve(item)
        else:
            state.reject(item, rejection_message=reason(request))


async def run_with_portal(
    runner: Any,
    agent: Any,
    input: Any,
    portal: PortalClient,
    *,
    agent_name: str,
    run_id: str,
    save_state: Callable[[str], None] | None = None,
    wait_seconds: float | None = None,
    **fields: Any,
) -> Any:
    """``runner.run(agent, input)``, each pause answered in the portal, to the end.

    ``input`` may be a ``RunState`` loaded from storage: its pending calls are asked
    (again: the same requests) before it is resumed. Returns the final ``RunResult``."""
    if hasattr(input, "get_interruptions") and input.get_interruptions():
        state = input
    else:
        result = await runner.run(agent, input)
        if not result.interruptions:
            return result
        state = result.to_state()
    while True:
        if save_state is not None:
            save_state(state.to_string())
        requests = await ask_portal(
            portal, state.get_interruptions(), agent=agent_name, run_id=run_id, **fields
        )
        apply_answers(state, await await_answers(portal, requests, wait_seconds=wait_seconds))
        result = await runner.run(agent, state)
        if not result.interruptions:
            return result
        state = result.to_state()
