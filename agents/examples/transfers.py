"""Stream a money-transfer agent, pause it for approval, and stream the resumed run.

``transfer_funds`` pauses with reason ``transfer_approval``; ``check_balance`` is read-only
and never pauses. The demo streams tokens as they arrive (``astream``), reads the pause from
its ``interrupted`` update, then resumes one thread approved and one declined.
Run: ``python -m agents.examples.transfers``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from agents import (
    CompiledGraph,
    InMemoryCheckpointer,
    Message,
    ReactAgent,
    StreamEvent,
    interrupt,
)
from agents.examples import DECISION_SCHEMA, dollars
from agents.models import CallTool, ChatModel, Reply, RuleScript, ScriptedModel
from agents.tools import withdrawn_result

# What the portal shows of this agent (portal.runs.registry reads these): the chat picker's
# hint, the example message the chat offers (the README's story), and the conversation
# `seed_demo` starts so the queue is not empty; it differs from the example, so a
# newcomer following the README never meets a copy of their own request.
HINT = "Balances and money transfers; every transfer needs approval."
EXAMPLE = "Transfer $2,500 to Alice for the March invoice."
DEMO = "Transfer $900 to Bruno for the April rent."

SYSTEM_PROMPT = [
    {
        "role": "system",
        "content": (
            "You are a helpful financial advisor. Help users check their balance and "
            "transfer funds when requested."
        ),
    }
]

# Transfers actually made. The tool appends only after an approval.
TRANSFERS: list[dict[str, Any]] = []


def check_balance() -> str:
    """Check the account balance."""
    return "Current balance: $50,000"


def transfer_funds(amount: float, recipient: str) -> str:
    """Transfer funds to a recipient. A person approves it first.

    Args:
        amount: The amount in dollars.
        recipient: Who receives the money.
    """
    decision = interrupt(
        {"amount": amount, "recipient": recipient},
        message=f"Approve transfer of ${amount:,.2f} to {recipient}?",
        reason="transfer_approval",
        response_schema=DECISION_SCHEMA,
        summary=f"Send ${amount:,.2f} to {recipient}",
    )
    if decision is None:  # withdrawn by whoever asked: nobody said no
        return withdrawn_result()
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        note = decision.get("note") if isinstance(decision, dict) else None
        return json.dumps({"status": "declined", "reason": note or "no reason given"})
    TRANSFERS.append({"amount": amount, "recipient": recipient})
    return f"Transferred ${amount:,.2f} to {recipient}."


def _transfer(match: re.Match[str]) -> Reply | None:
    amount = dollars(match.string)
    if amount is None:
        return Reply("How much should I transfer, and to whom?")
    return Reply(
        "I'll set up that transfer for you.",
        CallTool("transfer_funds", amount=amount, recipient=match["recipient"]),
    )


SCRIPT = RuleScript(
    [
        (r"\b(?:transfer|send|pay)\b.*?\bto\s+(?P<recipient>[A-Z][\w'-]*)", _transfer),
        (r"\bbalance\b", lambda match: Reply("Let me check.", CallTool("check_balance"))),
    ],
    fallback="I can check your balance or transfer funds.",
)


def build_agent(model: ChatModel | None = None, *, delay: float = 0.0) -> ReactAgent:
    """The transfer agent; offline (scripted, ``delay`` s between words) unless a model
    is given."""
    return ReactAgent(
        model=model or ScriptedModel(SCRIPT, name="scripted-transfers", delay=delay),
        system_prompt=SYSTEM_PROMPT,
        tools=[check_balance, transfer_funds],
    )


async def stream(graph: CompiledGraph, input: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """Print assistant text as it streams; return the interrupt request, if the run paused."""
    request: dict[str, Any] = {}
    printing = False
    async for chunk in graph.astream(input, {"thread_id": thread_id, "user_id": "client-7"}):
        if chunk.event is StreamEvent.MESSAGE and "delta" in chunk.data:
            if not printing:
                print("Assistant: ", end="", flush=True)
                printing = True
            print(chunk.data["delta"], end="", flush=True)
        elif chunk.event is StreamEvent.MESSAGE and printing:
            print()
            printing = False
        elif chunk.event is StreamEvent.UPDATES and chunk.data.get("status") == "interrupted":
            request = chunk.data["interrupt"]
    if printing:
        print()
    return request


def _user(text: str) -> dict[str, Any]:
    return {"messages": [Message.text_message(text)]}


async def main(delay: float = 0.0) -> None:
    TRANSFERS.clear()
    graph = build_agent(delay=delay).compile(checkpointer=InMemoryCheckpointer())
    async with graph:
        print("=== What's my balance? ===")
        await stream(graph, _user("What's my balance?"), "balance-1")

        for thread_id, decision in [
            ("transfer-approve", {"approved": True}),
            ("transfer-decline", {"approved": False, "note": "over the daily limit"}),
        ]:
            print(f"\n=== [{thread_id}] Transfer $5,000 to Alice ===")
            request = await stream(graph, _user("Transfer $5,000 to Alice"), thread_id)
            if not request:
                print("The agent finished without asking for approval.")
                continue
            print(f"Paused: {request['message']}")
            print(f"Details: {request['value']}")
            print(f"=== [{thread_id}] Resuming with {decision} ===")
            await stream(
                graph, {"resume": decision, "resume_interrupt_id": request["id"]}, thread_id
            )
    print("\ntransfers made:", TRANSFERS)


if __name__ == "__main__":
    asyncio.run(main(delay=0.02))
