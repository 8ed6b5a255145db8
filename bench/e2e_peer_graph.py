"""The peer's refund graph for ``bench.e2e``: LangGraph's own ReAct shape (a model node, a
tool node, back to the model), the refund tool calling ``interrupt()`` before it pays, and a
deterministic model node in place of a chat model, so neither side waits on a model.

LangGraph's agent server loads ``graph`` from this file (``LANGSERVE_GRAPHS``) and gives it
its own PostgreSQL checkpointer."""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

SYSTEM = "You handle refund requests. Use issue_refund; a person approves each one."
ORDER = re.compile(r"\b[A-Z]-\d+\b")
AMOUNT = re.compile(r"\$(\d+(?:\.\d+)?)")


def issue_refund(order_id: str, amount: float) -> str:
    decision = interrupt(
        {
            "value": {"order_id": order_id, "amount": amount},
            "message": f"Approve a ${amount:.2f} refund for order {order_id}?",
            "reason": "tool_approval",
        }
    )
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        note = decision.get("note") if isinstance(decision, dict) else None
        return json.dumps({"status": "declined", "reason": note or "no reason given"})
    return f"Refund of ${amount:.2f} issued for order {order_id}."


def model(state: MessagesState) -> dict[str, Any]:
    """The scripted model: a refund request becomes a tool call; a tool result, a reply."""
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(content=str(last.content))]}
    text = str(last.content)
    order, amount = ORDER.search(text), AMOUNT.search(text)
    if order is None or amount is None:
        return {"messages": [AIMessage(content="Which order, and how much?")]}
    call = {
        "name": "issue_refund",
        "args": {"order_id": order[0], "amount": float(amount[1])},
        "id": f"call_{order[0]}",
        "type": "tool_call",
    }
    return {"messages": [AIMessage(content="I'll ask for approval.", tool_calls=[call])]}


def tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    out = [
        ToolMessage(content=issue_refund(**call["args"]), tool_call_id=call["id"])
        for call in last.tool_calls  # type: ignore[attr-defined]
    ]
    return {"messages": out}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if getattr(last, "tool_calls", None) else END


builder = StateGraph(MessagesState)
builder.add_node("model", model)
builder.add_node("tools", tools)
builder.add_edge(START, "model")
builder.add_conditional_edges("model", route, ["tools", END])
builder.add_edge("tools", "model")
graph = builder.compile()
