"""Agents for the portal's worker tests, registered through PORTAL_AGENTS_EXTRA.

Their side effects go to files under ``$PORTAL_TEST_EFFECTS`` (one line per execution,
appended with O_APPEND so lines from several processes never interleave), so a test can
count executions across processes that share nothing else.

- ``approve``: "pay N" calls ``pay(amount)``, which asks a person first; the payment is
  written to ``pay.log`` only after ``{"approved": true}``.
- ``crash``: "crash" calls ``fast_step`` then ``slow_step`` in one turn. The slow one
  (idempotent) writes ``slow_started.log``, then waits for the file ``release`` before
  finishing.
- ``marker``: a one-node graph that appends the thread id to ``marker.log``.
- ``asker``: a one-node graph that pauses with the ``response_schema`` and ``reason``
  given as JSON in the user's message (for the checks on what agents ask with).
- ``echo``: answers "You said: ..." (scripted), or uses the given model with fast
  retries, for the model-failure test.
- ``inbox``: "give N" calls ``give(amount)``, whose ``interrupt()`` declares every Agent
  Inbox answer; it pays (to ``give.log``) only on accept or edit, with the edited amount.
- ``refunds``: "refund X" calls ``refund`` (not idempotent: each call pays, to
  ``refund.log``); "refund X once" calls ``refund_once`` (idempotent: it pays through
  ``ledger``, which acts once per idempotency key, to ``ledger.log``); "refund X fenced"
  calls ``refund_fenced`` (not idempotent: it pays through ``fenced``, which refuses an
  attempt whose fencing token is lower than one it has seen for the key, to ``fenced.log``,
  or ``fenced_refused.log``). Each notes every call in ``<tool>_calls.log``, and stops at
  marked points when the test asks it to (``hold``): ``turn`` as the model is about to ask
  for the call, ``before`` and ``after`` the payment, and ``saved`` once its result is in
  the thread (the model's next turn).
- ``ruled``: "pay N" calls ``pay_once(amount)`` (idempotent), which asks for a yes/no
  approval, then stops at ``approved`` when the test asks it to (``hold``), then pays
  through ``ledger`` (once per idempotency key), for the decision rules' crash test.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from agents import (
    END,
    AgentState,
    Message,
    ReactAgent,
    StateGraph,
    current_run,
    fencing_token,
    goes_ahead,
    idempotency_key,
    interrupt,
    tool,
)
from agents.models import CallTool, ChatModel, OpenAIChatModel, Reply, RuleScript, ScriptedModel
from agents.models.scripted import echo_script, trailing_tool_results

AGENTS = {
    "approve": "tests.testagents.build_approve",
    "crash": "tests.testagents.build_crash",
    "marker": "tests.testagents.build_marker",
    "echo": "tests.testagents.build_echo",
    "asker": "tests.testagents.build_asker",
    "refunds": "tests.testagents.build_refunds",
    "inbox": "tests.testagents.build_inbox",
    "ruled": "tests.testagents.build_ruled",
}

APPROVAL = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


def effects_dir() -> Path:
    path = Path(os.environ.get("PORTAL_TEST_EFFECTS") or "/tmp/portal-test-effects")
    path.mkdir(parents=True, exist_ok=True)
    return path


def record(name: str, line: str) -> None:
    fd = os.open(effects_dir() / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_effects(directory: Path, name: str) -> list[str]:
    path = directory / f"{name}.log"
    return path.read_text().splitlines() if path.exists() else []


# --- approve ----------------------------------------------------------------------------


def pay(amount: float) -> str:
    """Pay out an amount once a person approves.

    Args:
        amount: Dollars to pay.
    """
    decision = interrupt(
        {"amount": amount},
        message=f"Approve paying ${amount:.2f}?",
        reason="tool_approval",
        response_schema=APPROVAL,
    )
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        return json.dumps({"status": "declined", "reason": "not approved"})
    record("pay", f"{current_run().thread_id} {amount}")
    return f"Paid ${amount:.2f}."


def _pay(match: Any) -> Reply:
    return Reply("Asking for approval.", CallTool("pay", amount=float(match[1])))


def build_approve(model: ChatModel | None = None) -> ReactAgent:
    script = RuleScript([(r"pay (\d+)", _pay)])
    return ReactAgent(model=model or ScriptedModel(script, name="scripted-approve"), tools=[pay])


# --- inbox ------------------------------------------------------------------------------


def give(amount: float) -> str:
    """Give an amount once a person accepts, or edits it.

    Args:
        amount: Dollars to give.
    """
    answer = interrupt(
        {"amount": amount},
        message=f"Give **${amount:.2f}**?",
        reason="give",
        actions=["accept", "edit", "response", "ignore"],
    )
    if not goes_ahead(answer):
        kind = answer["type"] if answer else "no answer"
        return json.dumps(
            {"status": "not given", "answer": kind, "text": answer and answer.get("args")}
        )
    paid = answer["args"]["amount"] if answer["type"] == "edit" else amount
    record("give", f"{current_run().thread_id} {paid}")
    return f"Gave ${paid:.2f}."


def build_inbox(model: ChatModel | None = None) -> ReactAgent:
    script = RuleScript(
        [(r"give (\d+)", lambda m: Reply("Asking.", CallTool("give", amount=float(m[1]))))]
    )
    return ReactAgent(model=model or ScriptedModel(script, name="scripted-inbox"), tools=[give])


# --- crash ------------------------------------------------------------------------------


def fast_step() -> str:
    """A quick step that must run exactly once."""
    record("fast", current_run().thread_id)
    return "fast done"


@tool(idempotent=True)  # cut short by a kill, it is simply run again
async def slow_step() -> str:
    """A slow step: waits until the test releases it."""
    record("slow_started", current_run().thread_id)
    release = effects_dir() / "release"
    for _ in range(600):  # at most 30 s
        if release.exists():
            break
        await asyncio.sleep(0.05)
    record("slow_finished", current_run().thread_id)
    return "slow done"


def build_crash(model: ChatModel | None = None) -> ReactAgent:
    script = RuleScript(
        [(r"crash", lambda m: Reply("", CallTool("fast_step"), CallTool("slow_step")))]
    )
    return ReactAgent(
        model=model or ScriptedModel(script, name="scripted-crash"), tools=[fast_step, slow_step]
    )


# --- marker -----------------------------------------------------------------------------


def _mark(state: AgentState) -> Message:
    record("marker", current_run().thread_id)
    return Message(role="assistant", content="marked")


def build_marker(model: ChatModel | None = None) -> StateGraph:
    graph = StateGraph(AgentState)
    graph.add_node("MARK", _mark)
    graph.add_edge("MARK", END)
    graph.set_entry_point("MARK")
    return graph


# --- asker ----------------------------------------------------------------------------


def _ask(state: AgentState) -> Message:
    spec = json.loads(state.context[-1].text())
    answer = interrupt(
        {"asked": True},
        message="Answer, please.",
        reason=spec.get("reason", "input_required"),
        response_schema=spec.get("schema"),
    )
    return Message(role="assistant", content=f"got {answer!r}")


def build_asker(model: ChatModel | None = None) -> StateGraph:
    graph = StateGraph(AgentState)
    graph.add_node("ASK", _ask)
    graph.add_edge("ASK", END)
    graph.set_entry_point("ASK")
    return graph


# --- echo -------------------------------------------------------------------------------


def build_echo(model: ChatModel | None = None) -> ReactAgent:
    if isinstance(model, OpenAIChatModel):
        # Fail fast in tests: two attempts, almost no backoff.
        model.max_retries, model.backoff, model.backoff_max = 1, 0.01, 0.02
    return ReactAgent(model=model or ScriptedModel(echo_script, name="scripted-echo"))


# --- refunds ----------------------------------------------------------------------------


def hold(point: str) -> None:
    """Note that this point was reached; then, if the test asked (the file
    ``hold_<point>``), wait there, until the test kills the process or lets go."""
    record(f"reached_{point}", current_run().thread_id)
    asked = effects_dir() / f"hold_{point}"
    deadline = time.monotonic() + 60
    while asked.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def ledger(key: str, line: str) -> bool:
    """A payment system that deduplicates: acts once per key (across processes, under a
    file lock). True if it acted."""
    with (effects_dir() / "ledger.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if any(entry.split(" ", 1)[0] == key for entry in read_effects(effects_dir(), "ledger")):
            return False
        record("ledger", f"{key} {line}")
        return True


def fenced(key: str, token: int, line: str) -> bool:
    """A payment system that fences: it remembers the highest token seen for each key and
    refuses an attempt with a lower one (across processes, under a file lock). True if it
    acted."""
    with (effects_dir() / "fenced.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        seen = [
            int(entry.split(" ")[1])
            for entry in read_effects(effects_dir(), "fenced")
            if entry.split(" ", 1)[0] == key
        ]
        if seen and token < max(seen):
            record("fenced_refused", f"{key} {token}")
            return False
        record("fenced", f"{key} {token} {line}")
        return True


def refund(order_id: str) -> str:
    """Refund an order (each call pays).

    Args:
        order_id: The order to refund.
    """
    key = idempotency_key()  # taken once, as a payment API call is built before it is sent
    record("refund_calls", key)
    hold("before")
    record("refund", f"{current_run().thread_id} {order_id} {key}")
    hold("after")
    return f"Refunded {order_id}."


@tool(idempotent=True)
def refund_once(order_id: str) -> str:
    """Refund an order through a ledger that pays once per idempotency key.

    Args:
        order_id: The order to refund.
    """
    key = idempotency_key()
    record("refund_once_calls", key)
    hold("before")
    ledger(key, f"{current_run().thread_id} {order_id}")
    hold("after")
    return f"Refunded {order_id}."


def refund_fenced(order_id: str) -> str:
    """Refund an order (each call pays, unless a later attempt at it came first).

    Args:
        order_id: The order to refund.
    """
    key, token = idempotency_key(), fencing_token()  # taken before the call is sent
    record("refund_fenced_calls", f"{key} {token}")
    hold("before")
    if not fenced(key, token, f"{current_run().thread_id} {order_id}"):
        raise RuntimeError("refused: a later attempt at this refund was made")
    return f"Refunded {order_id}."


def _refund(match: Any) -> Reply:
    name = {" once": "refund_once", " fenced": "refund_fenced"}.get(match[2], "refund")
    return Reply("Refunding.", CallTool(name, order_id=match[1]))


class _HoldingModel(ScriptedModel):
    async def agenerate(self, messages: list[Message], tools: Any, **kwargs: Any) -> Message:
        if trailing_tool_results(messages):
            # The tool's result and its node's end are in the thread by now.
            await asyncio.to_thread(hold, "saved")
        else:
            # About to answer with a tool call: the worker holds the run, nothing of the
            # call is recorded yet.
            await asyncio.to_thread(hold, "turn")
        return await super().agenerate(messages, tools, **kwargs)


def build_refunds(model: ChatModel | None = None) -> ReactAgent:
    script = RuleScript([(r"refund (\S+)( once| fenced)?", _refund)])
    return ReactAgent(
        model=model or _HoldingModel(script, name="scripted-refunds"),
        tools=[refund, refund_once, refund_fenced],
    )


# --- ruled ------------------------------------------------------------------------------


@tool(idempotent=True)
def pay_once(amount: float) -> str:
    """Pay out an amount once it is approved, through a ledger that pays once per key.

    Args:
        amount: Dollars to pay.
    """
    decision = interrupt(
        {"amount": amount},
        message=f"Approve paying ${amount:.2f}?",
        reason="tool_approval",
        response_schema=APPROVAL,
    )
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        return json.dumps({"status": "declined", "reason": decision and decision.get("note")})
    key = idempotency_key()
    hold("approved")
    ledger(key, f"{current_run().thread_id} {amount}")
    return f"Paid ${amount:.2f}."


def _pay_once(match: Any) -> Reply:
    return Reply("Asking for approval.", CallTool("pay_once", amount=float(match[1])))


def build_ruled(model: ChatModel | None = None) -> ReactAgent:
    script = RuleScript([(r"pay (\d+)", _pay_once)])
    return ReactAgent(model=model or ScriptedModel(script, name="scripted-ruled"), tools=[pay_once])
