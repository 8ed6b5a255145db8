import pytest

from agents import (
    AgentState,
    CheckpointWrite,
    InMemoryCheckpointer,
    Message,
    ModelError,
    ReactAgent,
    ResponseGranularity,
    StreamEvent,
    ThreadStatus,
    interrupt,
)

from .conftest import FakeModel, call, say, user


def approval_tool(counts):
    def transfer_funds(amount: float, recipient: str) -> str:
        """Transfer funds. Asks a human first."""
        decision = interrupt(
            {"amount": amount, "recipient": recipient}, message=f"Approve {amount} to {recipient}?"
        )
        counts["transfers"] += 1
        return "sent" if decision and decision.get("approved") else "cancelled"

    return transfer_funds


async def collect(stream):
    return [chunk async for chunk in stream]


def updates(chunks):
    return [c.data for c in chunks if c.event == StreamEvent.UPDATES]


async def test_model_text_streams_as_deltas_sharing_the_final_message_id(store, config):
    graph = ReactAgent(FakeModel(say("Hello there, friend")), tools=[]).compile(checkpointer=store)
    chunks = await collect(graph.astream(user("hi"), config, ResponseGranularity.FULL))
    deltas = [c for c in chunks if c.event == StreamEvent.MESSAGE and "delta" in c.data]
    assert "".join(c.data["delta"] for c in deltas) == "Hello there, friend"
    assert deltas[-1].message.text() == "Hello there, friend"
    complete = [
        c.message for c in chunks if c.event == StreamEvent.MESSAGE and c.data.get("complete")
    ]
    assert [m.role for m in complete] == ["user", "assistant"]
    assert {c.message.id for c in deltas} == {complete[-1].id}
    assert updates(chunks) == [
        {"status": "node_start", "node": "MAIN"},
        {"status": "node_end", "node": "MAIN"},
        {"status": "done"},
    ]
    assert chunks[-1].event == StreamEvent.STATE
    assert chunks[-1].state.context[-1].text() == "Hello there, friend"
    assert all(c.thread_id == "t-1" and c.run_id == chunks[0].run_id for c in chunks)
    assert chunks[0].run_id.startswith("run_")


@pytest.mark.parametrize("granularity", list(ResponseGranularity))
async def test_a_pause_is_one_interrupted_update_and_then_the_stream_ends(
    store, config, granularity
):
    counts = {"transfers": 0}
    model = FakeModel(
        call(("transfer_funds", {"amount": 5000, "recipient": "Alice"})), say("Sent.")
    )
    graph = ReactAgent(model, tools=[approval_tool(counts)]).compile(checkpointer=store)
    chunks = await collect(graph.astream(user("send"), {**config, "run_id": "run-42"}, granularity))
    last = chunks[-1]
    assert last.event == StreamEvent.UPDATES and last.data["status"] == "interrupted"
    assert [u for u in updates(chunks) if u["status"] == "interrupted"] == [last.data]
    assert not any(c.event == StreamEvent.STATE for c in chunks)
    request = last.data["interrupt"]
    assert set(request) == {
        "id",
        "key",
        "node",
        "value",
        "message",
        "reason",
        "response_schema",
        "tool_call_id",
        "tool",
        "summary",
    }
    assert request["message"] == "Approve 5000 to Alice?"
    assert request["summary"] == "Transfer funds (amount: $5,000.00, recipient: Alice)"
    assert request["tool"] == "transfer_funds"  # it asks from inside the tool
    assert {c.run_id for c in chunks} == {"run-42"}

    rest = await collect(graph.astream({"resume": {"approved": True}}, config))
    assert counts["transfers"] == 1
    texts = [
        c.message.text() for c in rest if c.event == StreamEvent.MESSAGE and c.data.get("complete")
    ]
    assert texts == ["sent", "Sent."]
    assert rest[-1].data == {"status": "done"}


async def test_ainvoke_granularities_add_interrupt_thread_seq_and_state(store, config):
    model = FakeModel(say("one"), say("two"), say("three"))
    graph = ReactAgent(model, tools=[]).compile(checkpointer=store)
    low = await graph.ainvoke(user("a"), config)
    assert set(low) == {"messages"} and low["messages"][-1].text() == "one"
    partial = await graph.ainvoke(user("b"), config, ResponseGranularity.PARTIAL)
    assert set(partial) == {"messages", "interrupt", "thread_id", "seq"}
    assert partial["thread_id"] == "t-1" and partial["interrupt"] is None
    # Two turns so far, each two checkpoints: its input and the model's answer.
    assert partial["seq"] == (await store.aget("t-1")).seq == 4
    full = await graph.ainvoke(user("c"), config, ResponseGranularity.FULL)
    assert set(full) == {"messages", "interrupt", "thread_id", "seq", "state"}
    assert isinstance(full["state"], AgentState)
    # "messages" is the whole conversation and ends with the newest answer.
    assert [m.text() for m in full["messages"]] == ["a", "one", "b", "two", "c", "three"]


async def test_low_granularity_streams_no_state_chunk(store, config):
    graph = ReactAgent(FakeModel(say("hi")), tools=[]).compile(checkpointer=store)
    chunks = await collect(graph.astream(user("x"), config))
    assert not any(c.event == StreamEvent.STATE for c in chunks)
    assert chunks[-1].data == {"status": "done"}


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_model_failure_yields_an_error_chunk_keeps_the_checkpoint_and_can_be_retried(
    store, config, streaming
):
    model = FakeModel(ModelError("upstream timed out"), say("recovered"))
    graph = ReactAgent(model, tools=[]).compile(checkpointer=store)
    if streaming:
        chunks = []
        with pytest.raises(ModelError):
            async for chunk in graph.astream(user("hi"), config):
                chunks.append(chunk)
        errors = [c for c in chunks if c.event == StreamEvent.ERROR]
        assert [c.data for c in errors] == [
            {"error": "upstream timed out", "type": "ModelError", "node": "MAIN"}
        ]
        assert chunks[-1] is errors[0]
    else:
        with pytest.raises(ModelError):
            await graph.ainvoke(user("hi"), config)
    snapshot = await store.aget("t-1")
    assert (snapshot.status, snapshot.next_node) == ("running", "MAIN")
    assert [m["content"] for m in snapshot.messages] == ["hi"]
    retried = await graph.ainvoke({"messages": []}, config)
    assert [m.text() for m in retried["messages"]] == ["hi", "recovered"]


async def test_continuing_a_finished_thread_returns_its_state_without_running(store, config):
    model = FakeModel(say("once"))
    graph = ReactAgent(model, tools=[]).compile(checkpointer=store)
    await graph.ainvoke(user("hi"), config)
    out = await graph.ainvoke({"messages": []}, config)
    assert [m.text() for m in out["messages"]] == ["hi", "once"]
    assert len(model.seen) == 1


async def test_each_checkpoint_carries_only_new_messages_whatever_the_history_length(config):
    sizes = {}
    for history in (10, 1000):
        store = InMemoryCheckpointer()
        graph = ReactAgent(FakeModel(say("short answer")), tools=[]).compile(checkpointer=store)
        old = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"old message {i:04d}"}
            for i in range(history)
        ]
        # Seed a long finished thread directly, then run one turn on it.
        await store.aput(
            "t-1",
            CheckpointWrite(
                ThreadStatus.DONE, None, new_messages=[Message.from_dict(m).to_dict() for m in old]
            ),
            parent_seq=None,
        )
        out = await graph.ainvoke(user("new question"), config)
        assert len(out["messages"]) == history + 2
        sizes[history] = store.last_write_bytes("t-1")
        log = await store.alist("t-1")
        assert [r.message_count for r in log[1:]] == [1, 1]
    assert abs(sizes[1000] - sizes[10]) < 50


async def test_closing_the_graph_closes_models(store):
    model = FakeModel()
    async with ReactAgent(model, tools=[]).compile(checkpointer=store):
        pass
    assert model.closed


async def test_the_history_lists_one_checkpoint_per_boundary_and_the_pause(store, config):
    counts = {"transfers": 0}
    model = FakeModel(call(("transfer_funds", {"amount": 1, "recipient": "Bo"})), say("Sent."))
    graph = ReactAgent(model, tools=[approval_tool(counts)]).compile(checkpointer=store)
    out = await graph.ainvoke(user("send"), config, ResponseGranularity.PARTIAL)
    history = await graph.aget_history("t-1")
    assert [(r.node, r.status, r.next_node) for r in history] == [
        (None, "running", "MAIN"),
        ("MAIN", "running", "TOOL"),
        ("TOOL", "running", "TOOL"),  # the call, recorded in flight before it ran
        ("TOOL", "interrupted", "TOOL"),
    ]
    assert history[-1].interrupt_id == out["interrupt"]["id"]
    assert await graph.aget_state("unknown-thread") is None
