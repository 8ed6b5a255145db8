import json
from typing import Any, Literal

import pytest

from agents import (
    InMemoryCheckpointer,
    ReactAgent,
    ResponseGranularity,
    StreamEvent,
    Tool,
    ToolNode,
    interrupt,
    tool,
)

from .conftest import FakeModel, call, say, tool_results, user


def test_the_parameter_schema_comes_from_signature_hints_defaults_and_docstring():
    def search(
        query: str,
        limit: int = 5,
        ratio: float | None = None,
        tags: list[str] | None = None,
        mode: Literal["fast", "exact"] = "fast",
        strict: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Search the knowledge base.

        Longer text that is not the description.

        Args:
            query: What to look for.
            limit (int): How many hits
                to return at most.
            mode: Speed or precision.

        Returns:
            The hits.
        """
        return ""

    t = Tool.from_function(search)
    assert t.name == "search"
    assert t.description == "Search the knowledge base."
    props = t.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "description": "How many hits to return at most."}
    assert props["ratio"] == {"type": "number"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"] == {
        "enum": ["fast", "exact"],
        "type": "string",
        "description": "Speed or precision.",
    }
    assert props["strict"] == {"type": "boolean"}
    assert props["extra"] == {"type": "object"}
    assert t.parameters["required"] == ["query"]
    assert t.spec() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the knowledge base.",
            "parameters": t.parameters,
        },
    }


def test_the_tool_decorator_keeps_the_function_callable_and_flags_risk():
    @tool(high_risk=True, name="refund")
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    assert isinstance(issue_refund, Tool)
    assert issue_refund.high_risk and issue_refund.name == "refund"
    assert issue_refund("A-1", 1.0) == "refunded A-1"

    @tool
    def plain(x: int) -> int:
        return x

    assert plain.high_risk is False and plain.parameters["required"] == ["x"]


async def run_tools(tools, *calls, store=None, config=None):
    model = FakeModel(call(*calls), say("finished"))
    graph = ReactAgent(model, tools=tools).compile(checkpointer=store)
    return await graph.ainvoke(user("go"), config)


async def test_sync_and_async_tools_run_in_order_and_results_reach_the_model():
    order = []

    def add(a: int, b: int) -> int:
        order.append("add")
        return a + b

    async def shout(text: str) -> str:
        order.append("shout")
        return text.upper()

    out = await run_tools([add, shout], ("add", {"a": 2, "b": 3}), ("shout", {"text": "hi"}))
    assert order == ["add", "shout"]
    results = tool_results(out["messages"])
    assert results == {"call_1": 5, "call_2": "HI"}
    tool_messages = [m for m in out["messages"] if m.role == "tool"]
    assert [m.name for m in tool_messages] == ["add", "shout"]
    assert out["messages"][-1].text() == "finished"


async def test_a_tool_exception_becomes_an_error_result_for_the_model():
    def broken(x: int) -> str:
        raise KeyError("no such record")

    out = await run_tools([broken], ("broken", {"x": 1}))
    assert tool_results(out["messages"])["call_1"] == {
        "status": "error",
        "error": "KeyError: 'no such record'",
    }
    assert out["messages"][-1].text() == "finished"


async def test_malformed_arguments_and_unknown_tools_become_error_results_not_crashes():
    def known(x: int) -> int:
        return x

    out = await run_tools(
        [known],
        ("known", "{not json"),
        ("known", "[1, 2]"),
        ("missing_tool", {"x": 1}),
        ("known", {"wrong": 1}),
    )
    results = tool_results(out["messages"])
    assert results["call_1"]["status"] == "error" and "not valid JSON" in results["call_1"]["error"]
    assert "must be a JSON object, got list" in results["call_2"]["error"]
    assert results["call_3"]["error"] == "unknown tool 'missing_tool'; known tools: known"
    assert results["call_4"]["error"].startswith("TypeError:")


async def test_the_agent_offers_the_tool_specs_to_the_model():
    def lookup(key: str) -> str:
        """Look something up."""
        return key

    model = FakeModel(say("no tools needed"))
    await ReactAgent(model, system_prompt="Be brief.", tools=[lookup]).compile().ainvoke(user("hi"))
    assert model.tools_seen[0][0]["function"]["name"] == "lookup"
    assert [m.role for m in model.seen[0]] == ["system", "user"]
    assert model.seen[0][0].content == "Be brief."


def counting_tools(counts, ask_in_second=True):
    def first(n: int) -> str:
        counts["first"] += 1
        return "first done"

    def second(n: int) -> str:
        counts["second_before"] += 1
        answer = interrupt("ok?") if ask_in_second else "skip"
        counts["second_after"] += 1
        return f"second got {answer}"

    return [first, second]


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_finished_call_never_runs_again_when_a_later_call_pauses(streaming, store, config):
    counts = {"first": 0, "second_before": 0, "second_after": 0}
    model = FakeModel(call(("first", {"n": 1}), ("second", {"n": 2})), say("all done"))
    graph = ReactAgent(model, tools=counting_tools(counts)).compile(checkpointer=store)

    async def drive(input_):
        if not streaming:
            return (await graph.ainvoke(input_, config, ResponseGranularity.PARTIAL))["interrupt"]
        request = None
        async for chunk in graph.astream(input_, config):
            if chunk.event == StreamEvent.UPDATES and chunk.data.get("status") == "interrupted":
                request = chunk.data["interrupt"]
        return request

    request = await drive(user("go"))
    assert request["tool_call_id"] == "call_2" and request["key"] == "TOOL:call_2:0"
    assert counts == {"first": 1, "second_before": 1, "second_after": 0}
    # The first result was checkpointed before the pause.
    snapshot = await store.aget("t-1")
    assert [m["tool_call_id"] for m in snapshot.messages if m["role"] == "tool"] == ["call_1"]

    assert await drive({"resume": "yes", "resume_interrupt_id": request["id"]}) is None
    assert counts == {"first": 1, "second_before": 2, "second_after": 1}
    state = await graph.aget_state("t-1")
    assert tool_results(state.context) == {"call_1": "first done", "call_2": "second got yes"}
    assert state.context[-1].text() == "all done"


class ProcessDied(BaseException):
    """Stands in for the process being killed: nothing inside the graph can catch it."""


async def test_a_finished_call_never_runs_again_after_the_process_died_mid_node(config):
    store = InMemoryCheckpointer()
    counts = {"first": 0, "second": 0}

    def first(n: int) -> str:
        counts["first"] += 1
        return "first done"

    @tool(idempotent=True)  # so the call the crash cut short is simply run again
    def second(n: int) -> str:
        """The second step."""
        counts["second"] += 1
        if counts["second"] == 1:
            raise ProcessDied
        return "second done"

    turns = (call(("first", {"n": 1}), ("second", {"n": 2})), say("all done"))
    graph = ReactAgent(FakeModel(*turns), tools=[first, second]).compile(checkpointer=store)
    with pytest.raises(ProcessDied):
        await graph.ainvoke(user("go"), config)
    snapshot = await store.aget("t-1")
    assert (snapshot.status, snapshot.next_node) == ("running", "TOOL")

    # A fresh process: a new graph over the same store continues the thread.
    restarted = ReactAgent(FakeModel(say("all done")), tools=[first, second]).compile(
        checkpointer=store
    )
    out = await restarted.ainvoke({"messages": []}, config)
    assert counts == {"first": 1, "second": 2}
    assert tool_results(out["messages"]) == {"call_1": "first done", "call_2": "second done"}
    assert out["messages"][-1].text() == "all done"


async def test_a_tool_result_that_is_not_text_is_sent_as_json():
    def data() -> dict:
        return {"balance": 50000, "currency": "USD"}

    out = await run_tools([data], ("data", {}))
    tool_message = next(m for m in out["messages"] if m.role == "tool")
    assert json.loads(tool_message.content) == {"balance": 50000, "currency": "USD"}


def test_a_tool_node_accepts_plain_functions_and_tools_alike():
    @tool
    def a(x: int) -> int:
        return x

    def b(y: str) -> str:
        return y

    assert [s["function"]["name"] for s in ToolNode([a, b]).specs()] == ["a", "b"]


async def test_a_slow_sync_tool_does_not_stall_the_event_loop(store, config):
    import asyncio
    import time

    def slow_lookup(order_id: str) -> str:
        """Look an order up in a slow back office."""
        time.sleep(0.3)
        return f"order {order_id} found"

    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    agent = ReactAgent(
        model=FakeModel(call(("slow_lookup", {"order_id": "A-1"})), say("ok")),
        tools=[slow_lookup],
    )
    graph = agent.compile(checkpointer=store)
    beat = asyncio.create_task(heartbeat())
    try:
        result = await graph.ainvoke(user("look up A-1"), config)
    finally:
        beat.cancel()
    assert tool_results(result["messages"]) == {"call_1": "order A-1 found"}
    # Had the tool run on the loop, the heartbeat would have been frozen for 300 ms.
    assert ticks >= 10, f"the event loop was blocked while the tool ran ({ticks} ticks)"
