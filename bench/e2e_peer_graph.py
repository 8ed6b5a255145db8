"""The peer's refund graph for ``bench.e2e``: LangGraph's own ReAct shape (a model node, a
tool node, back to the model), the refund tool calling ``interrupt()`` before it pays, and a
deterministic model node in place of a chat model, so neither side waits on a model. With
``BENCH_E2E_MODEL_URL`` set (``BENCH_E2E_MODEL=openai``), the model node asks the fake
OpenAI-compatible server there instead, through one ``openai`` client built as this module
loads, as a LangGraph user's node would hold it.

LangGraph's agent server loads ``graph`` from this file (``LANGSERVE_GRAPHS``) and gives it
its own PostgreSQL checkpointer."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import openai
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
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


_URL = os.environ.get("BENCH_E2E_MODEL_URL")
_CLIENT = openai.OpenAI(base_url=_URL, api_key="bench", max_retries=0) if _URL else None
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": "Refund an order. A person must approve it first.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    }
]


def _as_openai(message: BaseMessage) -> dict[str, Any]:
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if isinstance(message, AIMessage):
        calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
            }
            for call in message.tool_calls
        ]
        return {
            "role": "assistant",
            "content": message.content,
            **({"tool_calls": calls} if calls else {}),
        }
    return {"role": "user", "content": message.content}


def model_over_http(state: MessagesState) -> dict[str, Any]:
    """The model node asking the fake OpenAI-compatible server (one request, not streamed)."""
    assert _CLIENT is not None
    answer = _CLIENT.chat.completions.create(
        model="gpt-bench",
        messages=[{"role": "system", "content": SYSTEM}, *map(_as_openai, state["messages"])],  # type: ignore[list-item]
        tools=_TOOLS,  # type: ignore[arg-type]
    )
    said = answer.choices[0].message
    calls = [
        {
            "name": c.function.name,
            "args": json.loads(c.function.arguments),
            "id": c.id,
            "type": "tool_call",
        }
        for c in said.tool_calls or []
        if c.type == "function"
    ]
    return {"messages": [AIMessage(content=said.content or "", tool_calls=calls)]}


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
builder.add_node("model", model_over_http if _CLIENT is not None else model)
builder.add_node("tools", tools)
builder.add_edge(START, "model")
builder.add_conditional_edges("model", route, ["tools", END])
builder.add_edge("tools", "model")
graph = builder.compile()
