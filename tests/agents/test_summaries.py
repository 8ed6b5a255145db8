"""A request's summary: what the agent wants in one plain line, beside its message. The
interrupt or the tool supplies it; otherwise the runtime words one."""

from __future__ import annotations

import pytest

from agents import (
    END,
    InvalidInterruptError,
    ReactAgent,
    ResponseGranularity,
    StateGraph,
    interrupt,
    pending_interrupt,
    tool,
)
from agents.examples.transfers import DECISION_SCHEMA
from agents.state import AgentState

from .conftest import FakeModel, call, say, user


async def _pause(graph, config):
    out = await graph.ainvoke(user("go"), config, ResponseGranularity.FULL)
    return pending_interrupt(out["state"])


def _refund_agent(**ask):
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        interrupt(
            {"order_id": order_id, "amount": amount},
            message=f"Approve a **${amount:.2f}** refund for order {order_id}?",
            response_schema=DECISION_SCHEMA,
            **ask,
        )
        return "refunded"

    model = FakeModel(call(("issue_refund", {"order_id": "1234", "amount": 120})), say("ok"))
    return ReactAgent(model, tools=[issue_refund])


async def test_an_interrupt_carries_the_summary_it_was_given(store, config):
    graph = _refund_agent(summary="Refund $120 to order #1234").compile(checkpointer=store)

    request = await _pause(graph, config)

    assert request.summary == "Refund $120 to order #1234"
    assert request.to_dict()["summary"] == "Refund $120 to order #1234"


async def test_a_high_risk_tool_summarises_its_approval_with_its_template(store, config):
    @tool(high_risk=True, summary="Refund ${amount:,.2f} to order #{order_id}")
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return "refunded"

    model = FakeModel(call(("refund", {"order_id": "1234", "amount": 120})), say("ok"))
    graph = ReactAgent(model, tools=[refund]).compile(checkpointer=store)

    request = await _pause(graph, config)

    assert request.summary == "Refund $120.00 to order #1234"
    assert request.message == "Approve refund (order id: 1234, amount: $120.00)?"


async def test_an_interrupt_inside_a_tool_without_a_summary_is_summarised_by_its_tool(
    store, config
):
    @tool(summary="Refund ${amount:,.2f} to order #{order_id}")
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        interrupt({"order_id": order_id}, message="Refund it?", response_schema=DECISION_SCHEMA)
        return "refunded"

    model = FakeModel(call(("issue_refund", {"order_id": "1234", "amount": 120})), say("ok"))
    graph = ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)

    assert (await _pause(graph, config)).summary == "Refund $120.00 to order #1234"


async def test_without_any_summary_the_call_is_named_in_words(store, config):
    graph = _refund_agent().compile(checkpointer=store)

    request = await _pause(graph, config)

    assert request.summary == "Issue refund (order id: 1234, amount: $120.00)"


async def test_outside_a_tool_the_summary_falls_back_to_the_message_without_markdown(store, config):
    async def ask(state: AgentState) -> None:
        interrupt("x", message="Send **$5** to [Alice](https://example.org)?\nDetails follow.")

    graph = StateGraph(AgentState)
    graph.add_node("ask", ask)
    graph.set_entry_point("ask")
    graph.add_edge("ask", END)
    request = await _pause(graph.compile(checkpointer=store), config)

    assert request.summary == "Send $5 to Alice?"


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        ("x" * 201, "summary is 201 characters on 1 line"),
        ("Refund\n$120", "summary is 11 characters on 2 line"),
        ("   ", "summary must be a non-empty string"),
    ],
)
async def test_a_summary_that_is_not_one_short_line_fails_the_run_saying_why(
    store, config, summary, problem
):
    graph = _refund_agent(summary=summary).compile(checkpointer=store)

    with pytest.raises(InvalidInterruptError, match=problem):
        await graph.ainvoke(user("go"), config)
