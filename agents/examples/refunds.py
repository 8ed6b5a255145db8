"""Refunds need a person's yes: the tool itself asks, with a schema for the answer.

``issue_refund`` calls ``interrupt()`` before touching money. A reviewer approves, rejects
(with a reason), or approves a smaller amount: the schema caps an edit at the amount asked
for, and the tool checks it again (fail closed). The demo pauses on two threads, shows a
malformed answer being refused (the thread stays paused), then approves one refund and
rejects the other with a note. Run: ``python -m agents.examples.refunds``.
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
    ResponseGranularity,
    ResumeValidationError,
    interrupt,
    pending_interrupt,
)
from agents.examples import dollars
from agents.models import CallTool, ChatModel, Reply, RuleScript, ScriptedModel
from agents.tools import withdrawn_result

# What the portal shows of this agent (portal.runs.registry reads these): the chat picker's
# hint, the example message the chat offers (the README's story), and the conversation
# `seed_demo` starts so the queue is not empty; it differs from the example, so a
# newcomer following the README never meets a copy of their own request.
HINT = "Refunds for orders; a reviewer approves each payout."
EXAMPLE = "Refund $42.50 for order A-1001, it arrived broken."
DEMO = "Refund $18.00 for order B-2207, the wrong size was sent."

SYSTEM_PROMPT = [
    {
        "role": "system",
        "content": "You handle refund requests. Use issue_refund; a person approves each one.",
    }
]

# Refunds actually paid out, in order. The tool appends only after an approval.
ISSUED: list[dict[str, Any]] = []

# The demo shop's orders still on their way; every other order has been delivered. The
# request names the order's status, so a decision rule can read it (docs/rules.md).
IN_TRANSIT = {"C-3003", "C-3004"}


def order_status(order_id: str) -> str:
    """``"in_transit"`` or ``"delivered"``: where the demo shop's order is."""
    return "in_transit" if order_id in IN_TRANSIT else "delivered"


def refund_schema(amount: float) -> dict[str, Any]:
    """Approve or reject, with a note; an approval may pay less than asked (a partial
    refund), never more and never nothing."""
    return {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "note": {"type": "string"},
            "args": {
                "type": "object",
                "properties": {
                    "amount": {
                        "type": "number",
                        "title": "Amount",
                        "description": f"At most ${amount:,.2f}, the amount asked for.",
                        "exclusiveMinimum": 0,
                        "maximum": amount,
                        "default": amount,
                    }
                },
                "additionalProperties": False,
            },
        },
        "required": ["approved"],
    }


def _paid(decision: dict[str, Any], asked: float) -> float | None:
    """The amount to pay: as asked, or the reviewer's edit when it is a number above
    zero and at most what was asked; None (pay nothing) otherwise."""
    args = decision.get("args")
    if args is None:
        return asked
    edited = args.get("amount", asked) if isinstance(args, dict) else None
    if isinstance(edited, bool) or not isinstance(edited, int | float):
        return None
    return float(edited) if 0 < edited <= asked else None


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order. A person must approve it first.

    Args:
        order_id: The order to refund, like A-1001.
        amount: The amount in dollars.
    """
    # Everything above this call runs again on resume; the payout comes after it.
    decision = interrupt(
        {"order_id": order_id, "amount": amount, "order_status": order_status(order_id)},
        message=f"Approve a ${amount:,.2f} refund for order {order_id}?",
        reason="tool_approval",
        response_schema=refund_schema(amount),
        summary=f"Refund ${amount:,.2f} to order {order_id}",
    )
    if decision is None:  # withdrawn by whoever asked: nobody said no
        return withdrawn_result()
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        note = decision.get("note") if isinstance(decision, dict) else None
        return json.dumps({"status": "declined", "reason": note or "no reason given"})
    paid = _paid(decision, amount)
    if paid is None:  # the schema refuses this; a tool that pays money checks again
        reason = f"the approved amount was not between $0 and ${amount:,.2f}"
        return json.dumps({"status": "declined", "reason": reason})
    ISSUED.append({"order_id": order_id, "amount": paid})
    if paid != amount:
        return (
            f"Refund of ${paid:,.2f} issued for order {order_id} (the reviewer changed "
            f"amount: ${amount:,.2f} → ${paid:,.2f})."
        )
    return f"Refund of ${amount:,.2f} issued for order {order_id}."


def _refund(match: re.Match[str]) -> Reply:
    text = match.string
    order = re.search(r"\b[A-Z]-\d+\b", text)
    amount = dollars(text)
    if order is None or amount is None:
        return Reply("Which order should I refund, and how much? For example: $42.50 for A-1001.")
    return Reply(
        "I'll ask for approval of that refund.",
        CallTool("issue_refund", order_id=order[0], amount=amount),
    )


SCRIPT = RuleScript(
    [(r"\brefund", _refund)],
    fallback="I handle refunds: tell me the order number and the amount.",
)


def build_agent(model: ChatModel | None = None) -> ReactAgent:
    """The refund agent; offline (scripted) unless a model is given."""
    return ReactAgent(
        model=model or ScriptedModel(SCRIPT, name="scripted-refunds"),
        system_prompt=SYSTEM_PROMPT,
        tools=[issue_refund],
    )


async def run_case(graph: CompiledGraph, thread_id: str, decision: dict[str, Any]) -> None:
    config = {"thread_id": thread_id, "user_id": "support-agent-1"}
    result = await graph.ainvoke(
        {"messages": [Message.text_message("Refund $42.50 for order A-1001, it arrived broken.")]},
        config,
        response_granularity=ResponseGranularity.FULL,
    )
    request = pending_interrupt(result["state"])
    if request is None:
        print(f"[{thread_id}] no approval needed:", result["messages"][-1].text())
        return
    print(f"[{thread_id}] paused:", request.message)
    print(f"[{thread_id}] payload:", request.value, "| interrupt id:", request.id)

    try:
        await graph.ainvoke({"resume": {"approved": "yes"}}, config)
    except ResumeValidationError as exc:
        print(f"[{thread_id}] bad resume refused:", exc.context["errors"])

    final = await graph.ainvoke({"resume": decision, "resume_interrupt_id": request.id}, config)
    print(f"[{thread_id}] assistant:", final["messages"][-1].text())


async def main() -> None:
    ISSUED.clear()
    graph = build_agent().compile(checkpointer=InMemoryCheckpointer())
    async with graph:
        await run_case(graph, "refund-approve", {"approved": True, "note": "photo received"})
        await run_case(graph, "refund-reject", {"approved": False, "note": "outside return window"})
    print("refunds issued:", ISSUED)


if __name__ == "__main__":
    asyncio.run(main())
