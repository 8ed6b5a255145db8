"""Which steps the runtime asks a store to make durable, and when it writes them.

Every node boundary gets its checkpoint. A step whose loss to a crash of the store would
cost only a replay (the run's input, an answer to a replayable node or a ToolNode, the end
of a replayable node) is written with ``durable=False``. The input and a replayable node's
end wait to go with the next write; so does an answer to a ToolNode, other answers are
written at once. Pauses, ends, plain nodes, tool calls recorded in flight and tool results
are durable. Whatever waits is written before a node that is not replayable runs, durably,
so such a node runs only once its run's compare-and-swap succeeded and cannot be taken
back; a ToolNode does the same with the write that records a call in flight."""

from __future__ import annotations

import dataclasses
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
    """The in-memory store, noting (node, status, next node, durable) for each step and
    how many steps went to it together (its ``aput`` goes through ``aput_steps``)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str | None, str, str | None, bool]] = []
        self.batches: list[int] = []

    async def aput_steps(self, thread_id: str, writes: Any, *, parent_seq: int | None) -> int:
        seq = await super().aput_steps(thread_id, writes, parent_seq=parent_seq)
        self.batches.append(len(writes))
        self.writes.extend((w.node, w.status.value, w.next_node, w.durable) for w in writes)
        return seq


def approval_graph(store: RecordingStore, *, replayable: bool) -> Any:
    def draft(state: AgentState) -> Message:
        return Message(role="assistant", content="drafted")

    def approve(state: AgentState) -> Message:
        answer = interrupt({"order": "A-1"}, message="Approve?")
        return Message(role="assistant", content=f"answer: {answer}")

    return draft_then(store, draft, ("approve", approve), replayable=replayable)


def draft_then(store: RecordingStore, draft: Any, then: tuple[str, Any], *, replayable: bool):
    """``draft`` (replayable or not) -> ``then`` -> END."""
    name, fn = then
    graph = StateGraph()
    graph.add_node("draft", draft, replayable=replayable)
    graph.add_node(name, fn)
    graph.set_entry_point("draft")
    graph.add_edge("draft", name)
    graph.add_edge(name, END)
    return graph.compile(checkpointer=store)


async def test_what_comes_before_a_node_that_may_act_is_durable_the_rest_need_not_be(config):
    store = RecordingStore()
    graph = approval_graph(store, replayable=True)
    out = await graph.ainvoke(user("refund please"), config, response_granularity=PARTIAL)
    await graph.ainvoke({"resume": "yes", "resume_interrupt_id": out["interrupt"]["id"]}, config)
    assert store.writes == [
        (None, "running", "draft", False),  # the input
        ("draft", "running", "approve", True),  # a replayable node's end, before `approve`
        ("approve", "interrupted", "approve", True),  # the pause
        ("approve", "running", "approve", True),  # the answer, before `approve` acts on it
        ("approve", "done", None, True),  # the end
    ]
    # The input and the draft go together, before `approve` (not replayable) runs; the
    # answer alone, before it runs again.
    assert store.batches == [2, 1, 1, 1]


async def test_a_node_is_durable_unless_marked_replayable(config):
    store = RecordingStore()
    await approval_graph(store, replayable=False).ainvoke(user("refund please"), config)
    assert ("draft", "running", "approve", True) in store.writes


async def test_a_replayable_last_node_still_ends_the_run_durably(config):
    store = RecordingStore()
    graph = StateGraph()
    graph.add_node("only", lambda state: Message(role="assistant", content="hi"), replayable=True)
    graph.set_entry_point("only")
    graph.add_edge("only", END)
    await graph.compile(checkpointer=store).ainvoke(user("hello"), config)
    assert store.writes[-1] == ("only", "done", None, True)


def refund_tool(refunded: list[str]) -> Any:
    """A high-risk tool that notes each order it refunds."""

    @tool(high_risk=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return f"refunded {order_id}"

    return issue_refund


async def test_a_react_agents_model_steps_are_replayable_and_its_tool_results_durable(config):
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
        (None, "running", "MAIN", False),  # the input
        ("MAIN", "running", "TOOL", False),  # the model's turn: replayable
        ("TOOL", "interrupted", "TOOL", True),  # the approval request
        ("TOOL", "running", "TOOL", False),  # the reviewer's answer
        ("TOOL", "running", "TOOL", True),  # the call, in flight, before it runs
        ("TOOL", "running", "MAIN", True),  # its result, the last, with the node's end
        ("MAIN", "done", None, True),  # the model's last turn ends the run
    ]
    # The turn that asks for approval is one write: the input, the model's turn and the
    # request. The tool node asks before it acts, so it needs no write before it starts;
    # the answer goes with the call recorded in flight.
    assert store.batches == [3, 2, 1, 1]


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
            await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=1)
            return await super().agenerate(*args, **kwargs)

    await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=None)
    model = MeanwhileModel(call(("send_email", {"to": "ann@example.com"})))
    graph = ReactAgent(model, tools=[send_email]).compile(checkpointer=store)
    with pytest.raises(CheckpointConflict):
        await graph.ainvoke(user("email Ann"), config)
    assert sent == []


async def test_a_chat_turn_without_tools_is_one_write(config):
    store = RecordingStore()
    graph = ReactAgent(FakeModel(say("Hello!"))).compile(checkpointer=store)
    await graph.ainvoke(user("hi"), config)
    assert store.batches == [2]  # the input and the model's answer, which ends the run
    snapshot = await store.aget("t-1")
    assert snapshot is not None and snapshot.seq == 2
    assert [m["content"] for m in snapshot.messages] == ["hi", "Hello!"]


async def test_a_failing_replayable_node_still_leaves_the_input_for_a_retry(config):
    store = RecordingStore()
    graph = ReactAgent(FakeModel(ModelError("the model is down"))).compile(checkpointer=store)
    with pytest.raises(ModelError):
        await graph.ainvoke(user("hi"), config)
    snapshot = await store.aget("t-1")
    assert snapshot is not None
    assert (snapshot.status.value, snapshot.next_node) == ("running", "MAIN")
    assert [m["content"] for m in snapshot.messages] == ["hi"]


async def test_a_node_that_is_not_replayable_waits_for_the_deferred_compare_and_swap(config):
    """Another writer moves the thread on while a replayable node runs: the next node,
    which would act on the world, never runs."""
    store = RecordingStore()
    acted: list[str] = []

    async def draft(state: AgentState) -> Message:
        # Someone else appends to the thread meanwhile (another worker, say).
        await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=1)
        return Message(role="assistant", content="drafted")

    def act(state: AgentState) -> None:
        acted.append("sent")

    compiled = draft_then(store, draft, ("act", act), replayable=True)
    await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=None)
    with pytest.raises(CheckpointConflict):
        await compiled.ainvoke(user("send it"), config)
    assert acted == []


@dataclasses.dataclass
class NotesState(AgentState):
    notes: list[str] = dataclasses.field(default_factory=list)


async def fail_in_second(store, state_type, first, second, config) -> tuple[Any, Any]:
    """first -> second -> END, both replayable, run until ``second`` raises RuntimeError;
    the graph, and the thread as stored then (its deferred steps flushed by the failure,
    so it waits at ``second``)."""
    graph = StateGraph(state_type)
    graph.add_node("first", first, replayable=True)
    graph.add_node("second", second, replayable=True)
    graph.set_entry_point("first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    compiled = graph.compile(checkpointer=store)
    with pytest.raises(RuntimeError):
        await compiled.ainvoke(user("go"), config)
    snapshot = await store.aget("t-1")
    assert snapshot is not None and snapshot.next_node == "second"
    return compiled, snapshot


async def test_a_deferred_step_keeps_the_state_as_it_was_at_that_step(config):
    """A later node changing a state value in place must not reach an earlier step that
    is still waiting to be written (here: flushed when that later node fails)."""
    store = RecordingStore()
    failures = [RuntimeError("the model is down")]

    def first(state: NotesState) -> dict[str, Any]:
        return {"notes": [*state.notes, "first"]}

    def second(state: NotesState) -> dict[str, Any]:
        state.notes.append("second")  # in place, then the node fails
        if failures:
            raise failures.pop()
        return {"notes": state.notes}

    compiled, snapshot = await fail_in_second(store, NotesState, first, second, config)
    assert snapshot.meta["values"]["notes"] == ["first"]
    await compiled.ainvoke({"messages": []}, config)  # the retry continues from there
    state = await compiled.aget_state("t-1")
    assert state is not None and state.notes == ["first", "second"]


async def test_a_deferred_step_keeps_its_messages_as_they_were_at_that_step(config):
    """Its record is the JSON taken at the step: a later node changing an earlier
    message in place (its meta, say) does not reach the stored step."""
    store = RecordingStore()

    def first(state: AgentState) -> Message:
        return Message(role="assistant", content="drafted", meta={"draft": 1})

    def second(state: AgentState) -> Message:
        state.context[-1].meta["draft"] = 2  # in place, then the node fails
        raise RuntimeError("the model is down")

    _, snapshot = await fail_in_second(store, AgentState, first, second, config)
    assert [m.get("meta") for m in snapshot.messages] == [None, {"draft": 1}]


class WorkerKilled(BaseException):
    """Stands for a worker process dying: nothing after it runs, not even a flush."""


async def test_an_answer_is_written_before_a_replayable_node_acts_on_it(config):
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
    graph.add_node("ask", ask, replayable=True)
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


async def test_a_deferred_step_keeps_the_time_it_happened(config):
    """The input waits for the model's turn to be written with it; the audit trail still
    shows when the message came in, not when the model answered."""
    import asyncio

    store = RecordingStore()

    async def slow_model(state: AgentState) -> Message:
        await asyncio.sleep(0.2)
        return Message(role="assistant", content="drafted")

    graph = StateGraph()
    graph.add_node("draft", slow_model, replayable=True)
    graph.set_entry_point("draft")
    graph.add_edge("draft", END)
    await graph.compile(checkpointer=store).ainvoke(user("hi"), config)
    assert store.batches == [2]
    accepted, answered = await store.alist("t-1")
    assert answered.created_at - accepted.created_at >= 0.15


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
    durably, with the call recorded in flight."""
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
        {"resume": {"approved": True}, "resume_interrupt_id": out["interrupt"]["id"]}, config
    )
    assert seen == [[{"approved": True}]]
    # The answer went with the call in flight, right before the tool: the write that lets
    # only this run act, durable since the call may act.
    assert store.batches[batches] == 2
    answer, in_flight = store.writes[3:5]
    assert (answer, in_flight) == (
        ("TOOL", "running", "TOOL", False),
        ("TOOL", "running", "TOOL", True),
    )


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
    assert store.writes[writes] == ("TOOL", "running", "TOOL", False)  # the answer
    state = await graph.aget_state("t-1")
    assert state is not None and state.context[-1].content == "Not refunded."


class RecallingStore(RecordingStore):
    """Holds what it wrote last per thread, and recalls it as a store with a cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.held: dict[str, Any] = {}

    async def aget(self, thread_id: str) -> Any:
        self.loads += 1
        return await super().aget(thread_id)

    async def aput_steps(self, thread_id: str, writes: Any, *, parent_seq: int | None) -> int:
        seq = await super().aput_steps(thread_id, writes, parent_seq=parent_seq)
        self.held[thread_id] = await super().aget(thread_id)
        return seq

    def recall(self, thread_id: str, seq: int | None) -> Any:
        if not seq:
            return None
        held = self.held.get(thread_id)
        if held is None or held.seq != seq:
            raise LookupError(thread_id)
        return dataclasses.replace(held, messages=[dict(m) for m in held.messages])


async def test_a_store_that_recalls_the_expected_checkpoint_is_not_asked_to_load(config):
    store = RecallingStore()
    graph = approval_graph(store, replayable=True)
    out = await graph.ainvoke(user("refund"), {**config, "expected_seq": 0}, PARTIAL)
    assert out["seq"] == 3 and store.loads == 0
    resumed = {"resume": "yes", "resume_interrupt_id": out["interrupt"]["id"]}
    done = await graph.ainvoke(resumed, {**config, "expected_seq": out["seq"]}, PARTIAL)
    assert store.loads == 0 and done["messages"][-1].content == "answer: yes"
    # A seq it does not hold (here: after another writer's step) is loaded and checked.
    store.held.clear()
    await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=done["seq"])
    with pytest.raises(CheckpointConflict):
        await graph.ainvoke(user("again"), {**config, "expected_seq": done["seq"]})
    assert store.loads == 1


async def test_a_recalled_thread_that_moved_on_stops_before_anything_acts(config):
    """Recalled as of an old checkpoint, the run's first write is refused by the store's
    compare-and-swap, before the node that may act; the replayable one ran for nothing."""
    store = RecallingStore()
    acted: list[str] = []

    def draft(state: AgentState) -> Message:
        return Message(role="assistant", content="drafted")

    def send(state: AgentState) -> Message:
        acted.append("sent")
        return Message(role="assistant", content="sent")

    graph = draft_then(store, draft, ("send", send), replayable=True)
    out = await graph.ainvoke(user("one"), {**config, "expected_seq": 0}, PARTIAL)
    assert acted == ["sent"]
    stale = out["seq"]
    store.held["t-1"] = await store.aget("t-1")  # held as of `stale` ...
    await store.aput("t-1", CheckpointWrite(ThreadStatus.DONE, None), parent_seq=stale)
    with pytest.raises(CheckpointConflict):  # ... while the thread moved on
        await graph.ainvoke(user("two"), {**config, "expected_seq": stale})
    assert acted == ["sent"]
    snapshot = await store.aget("t-1")
    assert snapshot is not None and snapshot.seq == stale + 1


async def test_a_recalled_run_that_writes_nothing_still_finds_a_thread_that_moved_on(config):
    """Nothing to do on the recalled thread (or a refusal of the input there) proves
    nothing: the run checks with the store before it reports either."""
    store = RecallingStore()
    graph = approval_graph(store, replayable=True)
    out = await graph.ainvoke(user("refund"), {**config, "expected_seq": 0}, PARTIAL)
    resumed = {"resume": "yes", "resume_interrupt_id": out["interrupt"]["id"]}
    done = await graph.ainvoke(resumed, {**config, "expected_seq": out["seq"]}, PARTIAL)
    stale = done["seq"]  # held as of the finished thread ...
    await store.aput("t-1", CheckpointWrite(ThreadStatus.RUNNING, "approve"), parent_seq=stale)
    store.held["t-1"] = dataclasses.replace(store.held["t-1"], seq=stale)  # ... still
    loads = store.loads

    with pytest.raises(CheckpointConflict):  # "nothing to continue" on the stale view
        await graph.ainvoke({"messages": []}, {**config, "expected_seq": stale})
    with pytest.raises(CheckpointConflict) as refused:  # "not paused" on the stale view
        await graph.ainvoke(resumed, {**config, "expected_seq": stale})
    assert type(refused.value.__cause__).__name__ == "ThreadNotPausedError"
    assert store.loads == loads + 2
    # On the thread as it is (left at `approve`, with no answer), the continue runs it.
    went_on = await graph.ainvoke({"messages": []}, {**config, "expected_seq": stale + 1}, PARTIAL)
    assert went_on["interrupt"] is not None and went_on["seq"] > stale + 1
