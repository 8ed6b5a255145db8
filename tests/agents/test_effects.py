"""Exactly-once effects, or an honest question (see ``agents.tools``).

A crash is ``ProcessDied``, a BaseException raised inside the tool: nothing in the graph
catches it or writes anything after it, as when the process is killed. The store is the
one the next "process" (a new compiled graph) continues from.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from agents import (
    InMemoryCheckpointer,
    ReactAgent,
    ResponseGranularity,
    ResumeValidationError,
    fencing_token,
    idempotency_key,
    tool,
)
from agents.tools import OUTCOME_REASON

from .conftest import FakeModel, call, say, tool_results, user

PARTIAL = ResponseGranularity.PARTIAL


class ProcessDied(BaseException):
    """Stands in for the process being killed."""


class Bank:
    """The world outside the thread: refunds as they were paid, and the keys they came
    with. ``dedup`` makes it a target that acts once per key."""

    def __init__(self, *, dedup: bool = False) -> None:
        self.dedup = dedup
        self.paid: list[str] = []
        self.keys: list[str] = []
        self.fences: list[int] = []  # each call's fencing token
        self.crash: str | None = None  # "before" or "after" the effect, on the next call

    def refund(self, order_id: str) -> str:
        key = idempotency_key()
        self.keys.append(key)
        self.fences.append(fencing_token())
        if self.crash == "before":
            self.crash = None
            raise ProcessDied
        if not (self.dedup and key in self.keys[:-1] and order_id in self.paid):
            self.paid.append(order_id)
        if self.crash == "after":
            self.crash = None
            raise ProcessDied
        return f"refunded {order_id}"


def refund_tool(bank: Bank, *, idempotent: bool = False) -> Any:
    @tool(idempotent=idempotent)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        return bank.refund(order_id)

    return issue_refund


def agent(bank: Bank, *turns: Any, idempotent: bool = False) -> ReactAgent:
    return ReactAgent(FakeModel(*turns), tools=[refund_tool(bank, idempotent=idempotent)])


async def crash_in_refund(bank: Bank, store: InMemoryCheckpointer, config, *, when: str) -> None:
    bank.crash = when
    graph = agent(bank, call(("issue_refund", {"order_id": "A-1"}))).compile(checkpointer=store)
    with pytest.raises(ProcessDied):
        await graph.ainvoke(user("refund A-1"), config)


class WatchingStore(InMemoryCheckpointer):
    """Notes each step's in_flight list as it is written."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[list[str]] = []

    async def aput_steps(self, thread_id: str, writes: Any, *, parent_seq: int | None) -> int:
        seq = await super().aput_steps(thread_id, writes, parent_seq=parent_seq)
        self.steps.extend(list(w.meta.get("in_flight", [])) for w in writes)
        return seq


async def test_a_call_is_recorded_in_flight_durably_before_the_tool_runs(config):
    store = WatchingStore()
    seen: list[Any] = []

    @tool
    async def issue_refund(order_id: str) -> str:
        """Refund an order."""
        snapshot = await store.aget("t-1")
        assert snapshot is not None
        seen.append((store.steps[-1], snapshot.meta.get("in_flight")))
        return f"refunded {order_id}"

    model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Done."))
    graph = ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)
    await graph.ainvoke(user("refund A-1"), config)
    # Inside the tool: the newest write names the call.
    assert seen == [(["call_1"], ["call_1"])]
    # Its result's write (with the tool node's end) no longer names it; nor does the end.
    snapshot = await store.aget("t-1")
    assert snapshot is not None and "in_flight" not in snapshot.meta
    assert store.steps[-2:] == [[], []]


async def test_each_call_gets_a_stable_key_from_its_thread_and_its_call(store, config):
    bank = Bank()
    turns = (call(("issue_refund", {"order_id": "A-1"}), ("issue_refund", {"order_id": "B-2"})),)
    graph = agent(bank, *turns, say("Done.")).compile(checkpointer=store)
    out = await graph.ainvoke(user("refund both"), config)
    asked = next(m for m in out["messages"] if m.tools_calls)
    expected = [
        hashlib.sha256(f"t-1\n{asked.id}\n{cid}".encode()).hexdigest()
        for cid in ("call_1", "call_2")
    ]
    assert bank.keys == expected
    # Another thread, the same call ids: other keys.
    other = agent(bank, *turns, say("Done.")).compile(checkpointer=store)
    await other.ainvoke(user("refund both"), {"thread_id": "t-2"})
    assert len(set(bank.keys)) == 4


async def test_a_model_that_reuses_call_ids_still_gets_a_new_key_each_turn(store, config):
    bank = Bank()
    turns = (
        call(("issue_refund", {"order_id": "A-1"})),
        call(("issue_refund", {"order_id": "B-2"})),  # call_1 again, in a later turn
        say("Done."),
    )
    await agent(bank, *turns).compile(checkpointer=store).ainvoke(user("refund"), config)
    assert len(bank.keys) == 2 and bank.keys[0] != bank.keys[1]


def test_idempotency_key_outside_a_tool_call_says_where_it_works():
    with pytest.raises(RuntimeError, match="no graph node is running"):
        idempotency_key()


@pytest.mark.parametrize("when", ["before", "after"])
async def test_an_idempotent_tool_cut_short_runs_again_with_the_same_key(store, config, when):
    bank = Bank(dedup=True)
    await crash_in_refund(bank, store, config, when=when)
    restarted = agent(bank, say("Refunded."), idempotent=True).compile(checkpointer=store)
    out = await restarted.ainvoke({"messages": []}, config, PARTIAL)
    assert out["interrupt"] is None
    assert bank.keys == [bank.keys[0]] * 2  # run again, with the same key
    assert bank.paid == ["A-1"]  # which the target acted on once
    assert tool_results(out["messages"]) == {"call_1": "refunded A-1"}


def test_fencing_token_outside_a_tool_call_says_where_it_works():
    with pytest.raises(RuntimeError, match="no graph node is running"):
        fencing_token()


async def test_the_fencing_token_is_the_seq_of_the_write_that_put_the_call_in_flight(config):
    store = WatchingStore()
    seen: list[tuple[int, int | None, list[str]]] = []

    @tool
    async def issue_refund(order_id: str) -> str:
        """Refund an order."""
        snapshot = await store.aget("t-1")
        assert snapshot is not None
        seen.append((fencing_token(), snapshot.seq, snapshot.meta.get("in_flight")))
        assert fencing_token() == seen[-1][0]  # the same throughout the attempt
        return f"refunded {order_id}"

    turns = (call(("issue_refund", {"order_id": "A-1"}), ("issue_refund", {"order_id": "B-2"})),)
    graph = ReactAgent(FakeModel(*turns, say("Done.")), tools=[issue_refund])
    await graph.compile(checkpointer=store).ainvoke(user("refund both"), config)
    # Each call's own record; the second call's comes after the first call's result.
    assert seen == [(seen[0][0], seen[0][0], ["call_1"]), (seen[1][0], seen[1][0], ["call_2"])]
    assert 0 < seen[0][0] < seen[1][0]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_an_attempt_after_a_crash_gets_a_higher_fencing_token(store, config, when):
    # The same key, a higher token: a target that keeps the highest token per key can
    # refuse the earlier attempt should it arrive late.
    bank = Bank(dedup=True)
    await crash_in_refund(bank, store, config, when=when)
    restarted = agent(bank, say("Refunded."), idempotent=True).compile(checkpointer=store)
    await restarted.ainvoke({"messages": []}, config, PARTIAL)
    assert bank.keys == [bank.keys[0]] * 2
    assert 0 < bank.fences[0] < bank.fences[1]


async def test_a_reviewers_retry_gets_a_higher_fencing_token(store, config):
    bank = Bank()
    await answer(store, config, bank, {"outcome": "retry"}, say("ok"))
    assert bank.keys == [bank.keys[0]] * 2
    assert 0 < bank.fences[0] < bank.fences[1]


async def test_without_a_checkpointer_the_fencing_token_is_zero(config):
    bank = Bank()
    graph = agent(bank, call(("issue_refund", {"order_id": "A-1"})), say("Done.")).compile()
    await graph.ainvoke(user("refund A-1"), config)
    assert bank.fences == [0]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_tool_cut_short_is_not_run_again_but_becomes_a_question(store, config, when):
    bank = Bank()
    await crash_in_refund(bank, store, config, when=when)
    restarted = agent(bank).compile(checkpointer=store)
    out = await restarted.ainvoke({"messages": []}, config, PARTIAL)
    request = out["interrupt"]
    assert len(bank.keys) == 1  # not run again
    assert request["reason"] == OUTCOME_REASON
    assert request["tool_call_id"] == "call_1"
    assert request["message"].startswith("issue refund (order id: A-1) may already have")
    assert "confirm it happened, retry it, or mark it failed" in request["message"]
    assert request["value"]["key"] == bank.keys[0]
    assert request["response_schema"]["properties"]["outcome"]["enum"] == [
        "confirm",
        "retry",
        "fail",
    ]
    # The question stays put until it is answered: asked again, it is the same one.
    with pytest.raises(ResumeValidationError):
        await restarted.ainvoke({"resume": {"outcome": "maybe"}}, config)
    state = await restarted.aget_state("t-1")
    assert state is not None and state.interrupt["id"] == request["id"]


async def answer(store, config, bank: Bank, outcome: Any, *turns: Any) -> dict[str, Any]:
    """Crash after the effect, ask on restart, then answer ``outcome``."""
    await crash_in_refund(bank, store, config, when="after")
    restarted = agent(bank).compile(checkpointer=store)
    out = await restarted.ainvoke({"messages": []}, config, PARTIAL)
    graph = agent(bank, *turns).compile(checkpointer=store)
    return await graph.ainvoke(
        {"resume": outcome, "resume_interrupt_id": out["interrupt"]["id"]}, config, PARTIAL
    )


async def test_confirm_tells_the_model_it_happened_without_running_it_again(store, config):
    bank = Bank()
    out = await answer(
        store, config, bank, {"outcome": "confirm", "note": "in the ledger"}, say("ok")
    )
    assert bank.paid == ["A-1"] and len(bank.keys) == 1
    assert tool_results(out["messages"])["call_1"] == {
        "status": "done",
        "detail": "a reviewer confirmed the call took effect",
        "reviewer_note": "in the ledger",
    }
    assert out["messages"][-1].text() == "ok" and out["interrupt"] is None


async def test_retry_runs_it_again_with_the_same_key(store, config):
    bank = Bank()
    out = await answer(store, config, bank, {"outcome": "retry"}, say("ok"))
    assert bank.paid == ["A-1", "A-1"]  # the reviewer said it had not happened
    assert bank.keys == [bank.keys[0]] * 2
    assert tool_results(out["messages"])["call_1"] == "refunded A-1"


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        ({"outcome": "fail"}, "a reviewer marked the call as failed: it did not take effect"),
        (None, "nobody confirmed whether the call took effect, so it was not run again"),
    ],
)
async def test_fail_or_no_answer_gives_the_model_a_failure_and_runs_nothing(
    store, config, outcome, error
):
    bank = Bank()
    out = await answer(store, config, bank, outcome, say("ok"))
    assert len(bank.keys) == 1
    assert tool_results(out["messages"])["call_1"] == {"status": "error", "error": error}


async def test_a_retry_cut_short_again_is_asked_about_again(store, config):
    bank = Bank()
    await crash_in_refund(bank, store, config, when="after")
    out = await agent(bank).compile(checkpointer=store).ainvoke({"messages": []}, config, PARTIAL)
    first = out["interrupt"]["id"]
    bank.crash = "after"
    with pytest.raises(ProcessDied):
        await (
            agent(bank)
            .compile(checkpointer=store)
            .ainvoke({"resume": {"outcome": "retry"}, "resume_interrupt_id": first}, config)
        )
    out = await agent(bank).compile(checkpointer=store).ainvoke({"messages": []}, config, PARTIAL)
    assert out["interrupt"]["reason"] == OUTCOME_REASON and out["interrupt"]["id"] != first
    assert bank.paid == ["A-1", "A-1"]  # the retry, and no third one


async def test_a_high_risk_call_cut_short_is_asked_about_not_approved_again(store, config):
    paid: list[str] = []

    @tool(high_risk=True)
    def transfer(to: str) -> str:
        """Send money."""
        paid.append(to)
        raise ProcessDied

    model = FakeModel(call(("transfer", {"to": "Bo"})))
    graph = ReactAgent(model, tools=[transfer]).compile(checkpointer=store)
    out = await graph.ainvoke(user("send"), config, PARTIAL)
    with pytest.raises(ProcessDied):
        await graph.ainvoke({"resume": {"approved": True}}, config)
    out = await graph.ainvoke({"messages": []}, config, PARTIAL)
    assert out["interrupt"]["reason"] == OUTCOME_REASON
    assert paid == ["Bo"]


async def test_the_question_about_an_edited_call_names_its_edit_and_a_retry_runs_it(store, config):
    paid: list[float] = []

    @tool(high_risk=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        paid.append(amount)
        if len(paid) == 1:
            raise ProcessDied
        return "refunded"

    def graph(*turns: Any) -> Any:
        return ReactAgent(FakeModel(*turns), tools=[refund]).compile(checkpointer=store)

    asked = call(("refund", {"order_id": "A-1", "amount": 42.5}))
    out = await graph(asked).ainvoke(user("refund A-1"), config, PARTIAL)
    edit = {"type": "edit", "args": {"call_1": {"order_id": "A-1", "amount": 10.0}}}
    with pytest.raises(ProcessDied):
        await graph().ainvoke(
            {"resume": edit, "resume_interrupt_id": out["interrupt"]["id"]}, config
        )
    out = await graph().ainvoke({"messages": []}, config, PARTIAL)
    question = out["interrupt"]
    assert question["reason"] == OUTCOME_REASON
    # What the portal records as the call's arguments when this question is answered.
    assert question["value"]["tool_call"]["arguments"] == {"order_id": "A-1", "amount": 10.0}
    await graph(say("ok")).ainvoke(
        {"resume": {"outcome": "retry"}, "resume_interrupt_id": question["id"]}, config
    )
    assert paid == [10.0, 10.0]


async def test_calls_that_share_an_id_in_one_turn_are_not_run(store, config):
    # Their idempotency keys and in-flight records would be one: a deduplicating target
    # would drop the second refund, and a crash in it would go unasked.
    bank = Bank(dedup=True)
    turn = call(("issue_refund", {"order_id": "A-1"}), ("issue_refund", {"order_id": "B-2"}))
    for raw in turn.tools_calls or []:
        raw["id"] = "call_0"
    out = (
        await agent(bank, turn, say("ok"))
        .compile(checkpointer=store)
        .ainvoke(user("refund both"), config)
    )
    assert bank.paid == [] and bank.keys == []
    results = [m for m in out["messages"] if m.role == "tool"]
    assert len(results) == 2
    assert all("2 calls the id 'call_0'" in m.content for m in results)
    assert out["messages"][-1].content == "ok"


async def test_a_tool_that_pauses_before_acting_is_not_left_in_flight(store, config):
    """Side effects come after interrupt(): a call that paused has not acted, and
    resuming it is a fresh start, not a question about its outcome."""
    from agents import interrupt

    sent: list[str] = []

    def send(to: str) -> str:
        """Send, once a person says yes."""
        if interrupt({"to": to}, message=f"Send to {to}?"):
            sent.append(to)
        return "sent"

    model = FakeModel(call(("send", {"to": "Bo"})), say("Sent."))
    graph = ReactAgent(model, tools=[send]).compile(checkpointer=store)
    out = await graph.ainvoke(user("send"), config, PARTIAL)
    snapshot = await store.aget("t-1")
    assert snapshot is not None and "in_flight" not in snapshot.meta
    out = await graph.ainvoke(
        {"resume": True, "resume_interrupt_id": out["interrupt"]["id"]}, config, PARTIAL
    )
    assert out["interrupt"] is None and sent == ["Bo"]
