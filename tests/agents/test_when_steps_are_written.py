"""When the runtime writes each step.

Every node boundary gets its checkpoint, and every write is durable. A step that nothing
can act on before the next write waits to go with it: the run's input, an answer to a
``ToolNode``, and the end of a node that a ``ToolNode`` follows (a ToolNode writes before
each call it makes). Whatever waits is written before any other node runs, so a node
that may act runs only once its run's compare-and-swap succeeded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents import (
    END,
    AgentState,
    CheckpointConflict,
    InMemoryCheckpointer,
    Message,
    ModelError,
    ReactAgent,
    ResponseGranularity,
    StateGraph,
    interrupt,
    tool,
)
from agents.checkpoint import CheckpointWrite, ThreadStatus

from .conftest import FakeModel, call, say, user

PARTIAL = ResponseGranularity.PARTIAL


class RecordingStore(InMemoryCheckpointer):
    """The in-memory store, noting (node, status, next node) for each step and how many
    steps went to it together (its ``aput`` goes through ``aput_steps``)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str | None, str, str | None]] = []
        self.batches: list[int] = []
        self.metas: list[dict[str, Any]] = []

    async def aput_steps(self, thread_id: str, writes: Any, *, parent_seq: int | None) -> int:
        seq = await super().aput_steps(thread_id, writes, parent_seq=parent_seq)
        self.batches.append(len(writes))
        self.writes.extend((w.node, w.status.value, w.next_node) for w in writes)
        self.metas.extend(w.meta for w in writes)
        return seq


def refund_tool(refunded: list[str]) -> Any:
    """A high-risk tool that notes each order it refunds."""

    @tool(high_risk=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return f"refunded {order_id}"

    return issue_refund


async def test_a_plain_node_runs_only_once_the_input_before_it_is_written(config):
    store = RecordingStore()
    seen: list[Any] = []

    async def act(state: AgentState) -> Message:
        snapshot = await store.aget("t-1")
        seen.append(snapshot.seq if snapshot else None)
        return Message(role="assistant", content="done")

    graph = StateGraph()
    graph.add_node("act", act)
    graph.set_entry_point("act")
    graph.add_edge("act", END)
    await graph.compile(checkpointer=store).ainvoke(user("go"), config)
    assert seen == [1]
    assert store.writes == [(None, "running", "act"), ("act", "done", None)]


async def test_a_react_agents_model_turn_goes_with_the_tool_nodes_first_write(config):
    store = RecordingStore()
    refunded: list[str] = []
    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Refunded."))
    graph = ReactAgent(model, tools=[refund_tool(refunded)]).compile(checkpointer=store)
    out = await graph.ainvoke(user("refund A-1"), config, response_granularity=PARTIAL)
    await graph.ainvoke(
        {"resume": {"approved": True}, "resume_interrupt_id": out["interrupt"]["id"]}, config
    )
    assert refunded == ["A-1"]
    assert store.writes == [
        (None, "running", "MAIN"),  # the input, before the model is called
        ("MAIN", "running", "TOOL"),  # the model's turn...
        ("TOOL", "interrupted", "TOOL"),  # ...with the approval request
        ("TOOL", "running", "TOOL"),  # the reviewer's answer...
        ("TOOL", "running", "TOOL"),  # ...with the call, in flight, before it runs
        ("TOOL", "running", "MAIN"),  # its result, the last, with the node's end
        ("MAIN", "done", None),  # the model's last turn ends the run
    ]
    assert store.batches == [1, 2, 2, 1, 1]


async def test_a_tool_runs_only_once_its_run_is_known_to_own_the_thread(config):
    """Another writer moves the thread on while the model answers: the tool the model
    asked for (not a high-risk one: nothing stops it but this) never runs."""
    store = RecordingStore()
    sent: list[str] = []

    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    class MeanwhileModel(FakeModel):
        async def agenerate(self, *args: Any, **kwargs: Any) -> Message:
            snapshot = await store.aget("t-1")
            assert snapshot is not None
            await store.aput(
                "t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=snapshot.seq
            )
            return await super().agenerate(*args, **kwargs)

    await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=None)
    model = MeanwhileModel(call(("send_email", {"to": "ann@example.com"})))
    graph = ReactAgent(model, tools=[send_email]).compile(checkpointer=store)
    with pytest.raises(CheckpointConflict):
        await graph.ainvoke(user("email Ann"), config)
    assert sent == []


async def test_a_failing_node_still_leaves_the_input_for_a_retry(config):
    store = RecordingStore()
    graph = ReactAgent(FakeModel(ModelError("the model is down"))).compile(checkpointer=store)
    with pytest.raises(ModelError):
        await graph.ainvoke(user("hi"), config)
    snapshot = await store.aget("t-1")
    assert snapshot is not None
    assert (snapshot.status.value, snapshot.next_node) == ("running", "MAIN")
    assert [m["content"] for m in snapshot.messages] == ["hi"]


class WorkerKilled(BaseException):
    """Stands for a worker process dying: nothing after it runs, not even a flush."""


async def test_an_answer_is_written_before_its_node_acts_on_it(config):
    """Were it kept for later, a worker dying in the node would lose it, and the request
    it answered (out of the queue by then) could never be answered again."""
    store = RecordingStore()
    dies = [True]

    def ask(state: AgentState) -> Message:
        answer = interrupt({"order": "A-1"}, message="Approve?")
        if dies:
            raise WorkerKilled
        return Message(role="assistant", content=f"answer: {answer}")

    graph = StateGraph()
    graph.add_node("ask", ask)
    graph.set_entry_point("ask")
    graph.add_edge("ask", END)
    compiled = graph.compile(checkpointer=store)
    out = await compiled.ainvoke(user("refund"), config, response_granularity=PARTIAL)
    request = out["interrupt"]["id"]
    with pytest.raises(WorkerKilled):
        await compiled.ainvoke({"resume": "yes", "resume_interrupt_id": request}, config)
    snapshot = await store.aget("t-1")
    assert snapshot is not None
    assert (snapshot.status.value, snapshot.next_node) == ("running", "ask")
    assert [a["id"] for a in snapshot.meta["answers"].values()] == [request]
    dies.clear()
    await compiled.ainvoke({"messages": []}, config)  # continuing finds the answer
    state = await compiled.aget_state("t-1")
    assert state is not None and state.context[-1].content == "answer: yes"


async def test_a_step_kept_for_later_keeps_the_time_it_happened(config):
    """The model's turn waits for the approval request to be written with it; the audit
    trail still shows when the model answered, not when the request was written."""
    store = RecordingStore()

    @tool(high_risk=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})))
    graph = ReactAgent(model, tools=[issue_refund]).graph()
    tool_node = graph.nodes["TOOL"]

    async def slow_tool_node(state: AgentState) -> Any:
        await asyncio.sleep(0.2)
        return await tool_node(state)

    graph.nodes["TOOL"] = slow_tool_node
    await graph.compile(checkpointer=store).ainvoke(user("hi"), config)
    _accepted, answered, asked = await store.alist("t-1")
    assert asked.created_at - answered.created_at >= 0.15


async def test_a_run_continuing_a_thread_must_own_it_before_a_tool_runs(config):
    """A run that continues a thread left running (a retry, a worker taking over a run)
    races a stalled earlier attempt that writes right after the load: the tool the model
    asked for does not run for the one that lost."""
    sent: list[str] = []

    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    class RacingStore(RecordingStore):
        race = True

        async def aget(self, thread_id: str) -> Any:
            snapshot = await super().aget(thread_id)
            if self.race and snapshot is not None:
                self.race = False  # the stalled attempt writes its step now
                step = CheckpointWrite(ThreadStatus.RUNNING, "TOOL", node="TOOL")
                await super().aput_steps(thread_id, [step], parent_seq=snapshot.seq)
            return snapshot

    store = RacingStore()
    asked = call(("send_email", {"to": "ann@example.com"}))
    left_running = [
        CheckpointWrite(
            ThreadStatus.RUNNING, "MAIN", [Message.text_message("email Ann").to_dict()]
        ),
        CheckpointWrite(ThreadStatus.RUNNING, "TOOL", [asked.to_dict()], node="MAIN"),
    ]
    await InMemoryCheckpointer.aput_steps(store, "t-1", left_running, parent_seq=None)
    graph = ReactAgent(FakeModel(say("Sent.")), tools=[send_email]).compile(checkpointer=store)
    with pytest.raises(CheckpointConflict):
        await graph.ainvoke({"messages": []}, config)
    assert sent == []


async def test_an_answer_to_a_tool_node_is_written_before_the_tool_runs(config):
    """The ToolNode's compare-and-swap before its tool: the answer is in the store by then,
    with the call recorded in flight."""
    store = RecordingStore()
    seen: list[Any] = []

    @tool(high_risk=True)
    async def issue_refund(order_id: str) -> str:
        """Refund an order."""
        snapshot = await store.aget("t-1")
        assert snapshot is not None
        seen.append([a["value"] for a in snapshot.meta["answers"].values()])
        return f"refunded {order_id}"

    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Refunded."))
    graph = ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)
    out = await graph.ainvoke(user("refund A-1"), config, response_granularity=PARTIAL)
    batches = len(store.batches)
    await graph.ainvoke(
        {"resume": {"type": "accept"}, "resume_interrupt_id": out["interrupt"]["id"]}, config
    )
    assert seen == [[{"type": "accept"}]]
    # The answer went with the call in flight, right before the tool: the write that lets
    # only this run act.
    assert store.batches[batches] == 2


async def test_a_declined_tool_call_goes_to_the_store_with_its_answer(config):
    """Nothing acts on a refusal, so the answer waits for the declined result's write."""
    store = RecordingStore()
    refunded: list[str] = []
    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Not refunded."))
    graph = ReactAgent(model, tools=[refund_tool(refunded)]).compile(checkpointer=store)
    out = await graph.ainvoke(user("refund A-1"), config, response_granularity=PARTIAL)
    batches, writes = len(store.batches), len(store.writes)
    await graph.ainvoke(
        {"resume": {"approved": False}, "resume_interrupt_id": out["interrupt"]["id"]}, config
    )
    assert refunded == []
    assert store.batches[batches] == 2  # the answer and the declined result, together
    assert store.writes[writes] == ("TOOL", "running", "TOOL")  # the answer
    state = await graph.aget_state("t-1")
    assert state is not None and state.context[-1].content == "Not refunded."


async def test_a_thread_that_moved_on_since_the_caller_read_it_is_refused_before_anything_runs(
    config,
):
    store = RecordingStore()
    acted: list[str] = []

    def act(state: AgentState) -> None:
        acted.append("sent")

    graph = StateGraph()
    graph.add_node("act", act)
    graph.set_entry_point("act")
    graph.add_edge("act", END)
    compiled = graph.compile(checkpointer=store)
    out = await compiled.ainvoke(user("one"), {**config, "expected_seq": 0}, PARTIAL)
    with pytest.raises(CheckpointConflict):
        await compiled.ainvoke(user("two"), {**config, "expected_seq": out["seq"] - 1})
    assert acted == ["sent"]
    assert len(await store.alist("t-1")) == out["seq"]


async def test_a_step_stores_only_the_meta_that_differs_from_the_defaults(config):
    """A long thread keeps every step: one with nothing to say stores an empty meta, and
    none stores a null, an empty answer list or a zero step count."""
    store = RecordingStore()
    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Refunded."))
    graph = ReactAgent(model, tools=[refund_tool([])]).compile(checkpointer=store)
    out = await graph.ainvoke(user("refund A-1"), config, response_granularity=PARTIAL)
    await graph.ainvoke(
        {"resume": {"approved": True}, "resume_interrupt_id": out["interrupt"]["id"]}, config
    )

    def defaults(meta: dict[str, Any]) -> list[str]:
        fields = {**meta, **meta.get("execution_meta", {})}
        return [key for key, value in fields.items() if value in (None, 0, {}, [])]

    assert store.metas[0] == {}  # the input: step 0, no answers, no breakpoint
    assert [defaults(meta) for meta in store.metas] == [[] for _ in store.metas]
    assert {"execution_meta": {"step": 1}} in store.metas
