"""A run reads its thread's history once, and builds a message only when a node reads it:
a node that looks at the last message does not pay for the whole conversation."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from agents import END, AgentState, InMemoryCheckpointer, Message, StateGraph, interrupt
from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Conversation

from .conftest import user


class CountingStore(InMemoryCheckpointer):
    """The in-memory store, counting its loads."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def aget(self, thread_id: str) -> Any:
        self.loads += 1
        return await super().aget(thread_id)


def _last_only(state: AgentState) -> Message:
    return Message(role="assistant", content=f"{len(state.context)}: {state.context[-1].content}")


def _ask(state: AgentState) -> Message:
    answer = interrupt({"ok": True}, message="Go on?", response_schema={"type": "boolean"})
    return Message(role="tool", content=str(answer))


def graph(store: InMemoryCheckpointer) -> Any:
    g = StateGraph(AgentState)
    g.add_node("agent", _last_only)
    g.add_node("ask", _ask)
    g.set_entry_point("agent")
    g.add_edge("agent", "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=store)


@pytest.fixture
def built(monkeypatch) -> list[int]:
    """How many ``Message`` objects were built from stored dicts."""
    counts = [0]
    original = Message.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Message], data: dict[str, Any]) -> Message:
        counts[0] += 1
        return original(cls, data)

    monkeypatch.setattr(Message, "from_dict", classmethod(counting))
    return counts


@pytest.mark.parametrize("history", [10, 100])
async def test_a_run_loads_its_history_once_and_builds_only_the_messages_its_nodes_read(
    history, built
):
    store = CountingStore()
    earlier = [{"id": f"m{n}", "role": "user", "content": f"hi {n}"} for n in range(history)]
    write = CheckpointWrite(status=ThreadStatus.DONE, next_node=None, new_messages=earlier)
    await store.aput("t", write, parent_seq=None)
    g = graph(store)

    store.loads, built[0] = 0, 0
    out = await g.ainvoke(user("and now?"), {"thread_id": "t"})
    assert store.loads == 1
    assert built[0] == 0  # the node read its new last message, built in this run
    assert out["messages"][-1].content == f"{history + 1}: and now?"

    snapshot = await store.aget("t")
    store.loads, built[0] = 0, 0
    answer = {"resume": True, "resume_interrupt_id": snapshot.interrupt["id"]}
    out = await g.ainvoke(answer, {"thread_id": "t"})
    assert store.loads == 1
    assert built[0] == 0  # the resumed run read none of the history
    assert out["messages"][-1].content == "True"
    assert len(out["messages"]) == history + 3


def test_a_conversation_reads_as_the_list_of_its_messages():
    stored = [{"id": f"m{n}", "role": "user", "content": str(n)} for n in range(4)]
    plain = [Message.from_dict(m) for m in stored]
    conversation = Conversation(stored)
    assert len(conversation) == 4
    assert conversation == plain and plain == conversation
    assert conversation[-1] == plain[-1] and conversation[1:3] == plain[1:3]
    assert list(reversed(conversation)) == plain[::-1]
    assert [*conversation] == plain and plain[2] in conversation
    conversation.append(Message(role="assistant", content="4"))
    assert [m.content for m in conversation] == ["0", "1", "2", "3", "4"]
    assert conversation.__add__([]) == [*conversation]
    assert copy.deepcopy(conversation) == conversation
    assert pickle.loads(pickle.dumps(conversation)) == conversation
    assert all(isinstance(m, Message) for m in conversation.copy())
