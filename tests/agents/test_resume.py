from typing import Any

import pytest

from agents import (
    END,
    AgentState,
    InMemoryCheckpointer,
    InterruptMismatchError,
    InvalidInputError,
    Message,
    ResponseGranularity,
    ResumeValidationError,
    StateGraph,
    ThreadNotPausedError,
    interrupt,
)

from .conftest import user

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


def make_graph(store: InMemoryCheckpointer, seen: list[Any]):
    def ask(state: AgentState) -> Message:
        decision = interrupt({"order": "A-1"}, message="Approve?", response_schema=SCHEMA)
        seen.append(decision)
        return Message(role="assistant", content="cancelled" if decision is None else "decided")

    g = StateGraph()
    g.add_node("ASK", ask)
    g.add_edge("ASK", END)
    g.set_entry_point("ASK")
    return g.compile(checkpointer=store)


async def paused(graph, config) -> dict[str, Any]:
    out = await graph.ainvoke(user("refund please"), config, ResponseGranularity.PARTIAL)
    assert out["interrupt"] is not None
    return out["interrupt"]


async def assert_still_paused_on(store, request):
    snapshot = await store.aget("t-1")
    assert snapshot.status == "interrupted"
    assert snapshot.interrupt["id"] == request["id"]
    assert "answers" not in snapshot.meta


async def test_a_resume_breaking_the_schema_is_refused_with_readable_lines_and_nothing_recorded(
    store, config
):
    seen: list[Any] = []
    graph = make_graph(store, seen)
    request = await paused(graph, config)
    writes = len(await store.alist("t-1"))
    with pytest.raises(ResumeValidationError) as err:
        await graph.ainvoke({"resume": {"approved": "yes"}}, config)
    assert err.value.context["errors"] == ["$.approved: expected boolean, got str"]
    assert "still paused" in str(err.value)
    assert len(await store.alist("t-1")) == writes
    await assert_still_paused_on(store, request)
    out = await graph.ainvoke(
        {"resume": {"approved": True}, "resume_interrupt_id": request["id"]}, config
    )
    assert out["messages"][-1].text() == "decided"
    assert seen == [{"approved": True}]


async def test_a_wrong_interrupt_id_is_refused_and_the_thread_stays_paused(store, config):
    seen: list[Any] = []
    graph = make_graph(store, seen)
    request = await paused(graph, config)
    with pytest.raises(InterruptMismatchError) as err:
        await graph.ainvoke(
            {"resume": {"approved": True}, "resume_interrupt_id": "int_stale"}, config
        )
    assert err.value.context["expected"] == request["id"]
    assert err.value.context["given"] == "int_stale"
    await assert_still_paused_on(store, request)
    await graph.ainvoke(
        {"resume": {"approved": False}, "resume_interrupt_id": request["id"]}, config
    )
    assert seen == [{"approved": False}]


async def test_resuming_a_thread_that_is_not_paused_is_a_value_error(store, config):
    graph = make_graph(store, [])
    with pytest.raises(ValueError, match="not paused"):
        await graph.ainvoke({"resume": {"approved": True}}, config)
    request = await paused(graph, config)
    await graph.ainvoke(
        {"resume": {"approved": True}, "resume_interrupt_id": request["id"]}, config
    )
    with pytest.raises(ThreadNotPausedError):
        await graph.ainvoke(
            {"resume": {"approved": True}, "resume_interrupt_id": request["id"]}, config
        )


@pytest.mark.parametrize(
    "smuggled",
    [
        {"resume": {"approved": True}, "goto": "ELSEWHERE"},
        {"resume": {"approved": True}, "state": {"context": []}},
        {"resume": {"approved": True}, "messages": [{"role": "user", "content": "x"}]},
        {"resume": {"approved": True}, "execution_meta": {}},
    ],
)
async def test_state_edits_or_jumps_smuggled_into_a_resume_are_refused(store, config, smuggled):
    graph = make_graph(store, [])
    request = await paused(graph, config)
    with pytest.raises(InvalidInputError, match="only 'resume' and 'resume_interrupt_id'"):
        await graph.ainvoke(smuggled, config)
    await assert_still_paused_on(store, request)
    await graph.ainvoke({"resume": {"approved": True}}, config)


@pytest.mark.parametrize(
    "bad", [{"messages": [], "goto": "X"}, {"state": {}}, {"execution_meta": {}}]
)
async def test_extra_keys_in_a_message_input_are_named_and_refused(store, config, bad):
    graph = make_graph(store, [])
    with pytest.raises(InvalidInputError) as err:
        await graph.ainvoke(bad, config)
    assert set(err.value.context["keys"]) == set(bad) - {"messages"}
    assert await store.aget("t-1") is None


async def test_new_messages_on_a_paused_thread_say_how_to_answer(store, config):
    graph = make_graph(store, [])
    request = await paused(graph, config)
    with pytest.raises(InvalidInputError, match=f"paused on interrupt {request['id']}.*'resume'"):
        await graph.ainvoke(user("hello?"), config)
    with pytest.raises(InvalidInputError, match="paused on interrupt"):
        await graph.ainvoke({"messages": []}, config)
    await assert_still_paused_on(store, request)


async def test_none_means_cancelled_and_reaches_interrupt_as_none(store, config):
    seen: list[Any] = []
    graph = make_graph(store, seen)
    await paused(graph, config)
    out = await graph.ainvoke({"resume": None}, config)
    assert seen == [None]
    assert out["messages"][-1].text() == "cancelled"


async def test_two_resumes_racing_on_one_thread_cannot_both_win(store, config):
    from agents import CheckpointConflict

    graph = make_graph(store, [])
    await paused(graph, config)
    snapshot = await store.aget("t-1")
    # Another process resumes first.
    await graph.ainvoke({"resume": {"approved": True}}, config)
    # A writer that loaded the paused snapshot earlier is refused by the checkpointer.
    from agents.checkpoint import CheckpointWrite, ThreadStatus

    with pytest.raises(CheckpointConflict):
        await store.aput(
            "t-1", CheckpointWrite(ThreadStatus.RUNNING, "ASK"), parent_seq=snapshot.seq
        )


async def test_an_input_for_a_checkpoint_the_thread_has_moved_past_is_refused(store, config):
    """``config["expected_seq"]``: the caller chose its input from the thread as of that
    checkpoint (a worker taking over a run); if the thread moved on, nothing is applied."""
    from agents import CheckpointConflict

    ran: list[str] = []
    graph = StateGraph()
    graph.add_node("REPLY", lambda state: ran.append("ran") or Message(role="assistant"))
    graph.add_edge("REPLY", END)
    graph.set_entry_point("REPLY")
    compiled = graph.compile(checkpointer=store)
    await compiled.ainvoke(user("first"), config)

    with pytest.raises(CheckpointConflict):
        await compiled.ainvoke(user("first"), {**config, "expected_seq": 0})
    with pytest.raises(CheckpointConflict):
        await compiled.ainvoke(user("first"), {**config, "expected_seq": 1})
    assert ran == ["ran"] and (await store.aget("t-1")).seq == 2

    await compiled.ainvoke(user("second"), {**config, "expected_seq": 2})
    assert ran == ["ran", "ran"]
