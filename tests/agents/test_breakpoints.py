import pytest

from agents import (
    InvalidInputError,
    ReactAgent,
    ResponseGranularity,
    ResumeValidationError,
    pending_interrupt,
    tool,
)

from .conftest import FakeModel, call, say, tool_results, user


def account_graph(store, ran, **breakpoints):
    def delete_account(user_id: str) -> str:
        """Permanently delete a user account."""
        ran.append(user_id)
        return f"Account {user_id} deleted."

    model = FakeModel(call(("delete_account", {"user_id": "u-381"})), say("Done."))
    return ReactAgent(model, tools=[delete_account]).compile(checkpointer=store, **breakpoints)


async def test_interrupt_before_pauses_before_the_tool_node_and_continues_with_no_messages(
    store, config
):
    ran: list[str] = []
    graph = account_graph(store, ran, interrupt_before=["TOOL"])
    paused = await graph.ainvoke(user("delete u-381"), config, ResponseGranularity.FULL)
    state = paused["state"]
    assert state.execution_meta.interrupted_node == "TOOL"
    assert state.execution_meta.breakpoint == "before"
    request = pending_interrupt(state)
    assert request.reason == "breakpoint" and request.node == "TOOL"
    assert request.value == {
        "tool_calls": [
            {"id": "call_1", "name": "delete_account", "arguments": {"user_id": "u-381"}}
        ]
    }
    assert request.response_schema["required"] == ["type"]  # a typed answer (agents.inbox)
    # The reviewer reads what is at stake, not the graph's plumbing.
    assert request.message == "Approve delete account (user id: u-381)?"
    assert state.context[-1].tools_calls[0]["function"]["name"] == "delete_account"
    assert ran == []

    final = await graph.ainvoke({"messages": []}, config, ResponseGranularity.FULL)
    assert ran == ["u-381"]
    assert final["messages"][-1].text() == "Done."
    assert final["state"].execution_meta.interrupted_node is None
    assert final["state"].interrupt is None


async def test_a_breakpoint_can_be_approved_through_resume(store, config):
    ran: list[str] = []
    graph = account_graph(store, ran, interrupt_before=["TOOL"])
    request = pending_interrupt(
        (await graph.ainvoke(user("x"), config, ResponseGranularity.FULL))["state"]
    )
    with pytest.raises(ResumeValidationError):
        await graph.ainvoke({"resume": {"approved": "sure"}}, config)
    await graph.ainvoke({"resume": {"approved": True}, "resume_interrupt_id": request.id}, config)
    assert ran == ["u-381"]


@pytest.mark.parametrize("decision", [None, {"approved": False, "note": "not this account"}])
async def test_declining_a_tool_breakpoint_gives_every_call_a_declined_result_and_goes_on(
    store, config, decision
):
    ran: list[str] = []
    graph = account_graph(store, ran, interrupt_before=["TOOL"])
    await graph.ainvoke(user("delete u-381"), config)
    out = await graph.ainvoke({"resume": decision}, config)
    assert ran == []
    reason = decision["note"] if decision else "No approval was given."
    assert tool_results(out["messages"]) == {"call_1": {"status": "declined", "reason": reason}}
    assert out["messages"][-1].text() == "Done."  # the model saw the refusal and answered


async def test_declining_a_breakpoint_before_another_node_ends_the_run_without_running_it(
    store, config
):
    model = FakeModel(say("should not be generated"))
    graph = ReactAgent(model, tools=[]).compile(checkpointer=store, interrupt_before=["MAIN"])
    await graph.ainvoke(user("hi"), config)
    out = await graph.ainvoke({"resume": {"approved": False}}, config)
    assert model.seen == []
    assert [m.role for m in out["messages"]] == ["user"]
    assert (await store.aget("t-1")).status == "done"


async def test_interrupt_after_pauses_once_the_node_ran_and_continues_to_the_next(store, config):
    ran: list[str] = []
    graph = account_graph(store, ran, interrupt_after=["TOOL"])
    paused = await graph.ainvoke(user("delete u-381"), config, ResponseGranularity.FULL)
    assert ran == ["u-381"]
    meta = paused["state"].execution_meta
    assert (meta.interrupted_node, meta.breakpoint) == ("TOOL", "after")
    assert (await store.aget("t-1")).next_node == "MAIN"
    with pytest.raises(InvalidInputError, match=r"continue it with \{'messages': \[\]\}"):
        await graph.ainvoke(user("another message"), config)
    final = await graph.ainvoke({"messages": []}, config)
    assert ran == ["u-381"]
    assert final["messages"][-1].text() == "Done."


async def test_an_approved_breakpoint_is_not_asked_again_after_a_crash_inside_the_node(
    store, config
):
    class ProcessDied(BaseException):
        pass

    ran: list[str] = []

    def first(n: int) -> str:
        ran.append("first")
        return "one"

    # Safe to run again, so the call the crash cut short is re-run without a question.
    @tool(idempotent=True)
    def second(n: int) -> str:
        """The second step."""
        ran.append("second")
        if ran.count("second") == 1:
            raise ProcessDied
        return "two"

    turns = (call(("first", {"n": 1}), ("second", {"n": 2})), say("ok"))
    graph = ReactAgent(FakeModel(*turns), tools=[first, second]).compile(
        checkpointer=store, interrupt_before=["TOOL"]
    )
    await graph.ainvoke(user("go"), config)
    with pytest.raises(ProcessDied):
        await graph.ainvoke({"messages": []}, config)
    restarted = ReactAgent(FakeModel(say("ok")), tools=[first, second]).compile(
        checkpointer=store, interrupt_before=["TOOL"]
    )
    out = await restarted.ainvoke({"messages": []}, config, ResponseGranularity.PARTIAL)
    assert out["interrupt"] is None
    assert ran == ["first", "second", "second"]
    assert out["messages"][-1].text() == "ok"
