import subprocess
import sys

import pytest

from agents import (
    END,
    AgentState,
    CheckpointerRequiredError,
    InMemoryCheckpointer,
    Message,
    ResponseGranularity,
    StateGraph,
    interrupt,
    pending_interrupt,
)
from agents.interrupt import GraphInterrupt, validate_resume

from .conftest import user


def graph_of(fn, checkpointer=None):
    g = StateGraph()
    g.add_node("ASK", fn)
    g.add_edge("ASK", END)
    g.set_entry_point("ASK")
    return g.compile(checkpointer=checkpointer)


async def test_code_before_interrupt_runs_twice_and_code_after_runs_once(store, config):
    counts = {"before": 0, "after": 0}

    def ask(state: AgentState) -> Message:
        counts["before"] += 1
        answer = interrupt({"q": "name?"}, message="What is your name?")
        counts["after"] += 1
        return Message(role="assistant", content=f"hello {answer}")

    graph = graph_of(ask, store)
    paused = await graph.ainvoke(user("hi"), config, response_granularity=ResponseGranularity.FULL)
    request = pending_interrupt(paused["state"])
    assert request is not None
    assert (request.node, request.value, request.message) == (
        "ASK",
        {"q": "name?"},
        "What is your name?",
    )
    assert counts == {"before": 1, "after": 0}

    done = await graph.ainvoke({"resume": "Ada", "resume_interrupt_id": request.id}, config)
    assert done["messages"][-1].text() == "hello Ada"
    assert counts == {"before": 2, "after": 1}


async def test_several_interrupts_in_one_node_are_answered_in_order_with_distinct_ids(
    store, config
):
    def ask(state: AgentState) -> Message:
        first = interrupt("first?")
        second = interrupt("second?")
        return Message(role="assistant", content=f"{first}+{second}")

    graph = graph_of(ask, store)
    out = await graph.ainvoke(user("go"), config, ResponseGranularity.PARTIAL)
    one = out["interrupt"]
    assert one["value"] == "first?" and one["key"] == "ASK:-:0"
    out = await graph.ainvoke(
        {"resume": 1, "resume_interrupt_id": one["id"]}, config, ResponseGranularity.PARTIAL
    )
    two = out["interrupt"]
    assert two["value"] == "second?" and two["key"] == "ASK:-:1"
    assert two["id"] != one["id"]
    out = await graph.ainvoke(
        {"resume": 2, "resume_interrupt_id": two["id"]}, config, ResponseGranularity.PARTIAL
    )
    assert out["interrupt"] is None
    assert out["messages"][-1].text() == "1+2"


async def test_answers_are_dropped_once_the_node_completes(store, config):
    def ask(state: AgentState) -> Message:
        return Message(role="assistant", content=str(interrupt("again?")))

    graph = graph_of(ask, store)
    await graph.ainvoke(user("one"), config)
    await graph.ainvoke({"resume": "first"}, config)
    snapshot = await store.aget("t-1")
    assert "answers" not in snapshot.meta
    # A new turn asks again instead of reusing the old answer.
    out = await graph.ainvoke(user("two"), config, ResponseGranularity.PARTIAL)
    assert out["interrupt"]["value"] == "again?"


def test_interrupt_outside_a_running_node_raises_runtime_error():
    with pytest.raises(RuntimeError, match="inside a node or a tool"):
        interrupt("nobody is running")


def test_graph_interrupt_is_not_an_exception_so_except_exception_cannot_swallow_it():
    assert issubclass(GraphInterrupt, BaseException)
    assert not issubclass(GraphInterrupt, Exception)


async def test_an_interrupt_without_checkpointer_says_how_to_add_one():
    graph = graph_of(lambda state: interrupt("?"))
    with pytest.raises(
        CheckpointerRequiredError, match=r"compile\(checkpointer=InMemoryCheckpointer\(\)\)"
    ):
        await graph.ainvoke(user("hi"))


async def test_a_graph_without_checkpointer_runs_without_a_thread_id():
    graph = graph_of(lambda state: Message(role="assistant", content="ok"))
    out = await graph.ainvoke(user("hi"), None, ResponseGranularity.PARTIAL)
    assert out["messages"][-1].text() == "ok"
    assert out["thread_id"].startswith("thread_")


async def test_a_graph_with_checkpointer_needs_a_thread_id(store):
    from agents import InvalidInputError

    with pytest.raises(InvalidInputError, match="thread_id"):
        await graph_of(lambda s: None, store).ainvoke(user("hi"), {"user_id": "u"})


def test_resume_validation_lines_are_readable():
    schema = {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "kind": {"enum": ["a", "b"]},
            "items": {"type": "array", "items": {"type": "integer"}},
            "inner": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]},
        },
        "required": ["approved"],
        "additionalProperties": False,
    }
    assert validate_resume({"approved": "yes"}, schema) == ["$.approved: expected boolean, got str"]
    assert validate_resume({}, schema) == ["$.approved: required"]
    assert validate_resume({"approved": True, "x": 1}, schema) == ["$: unexpected field 'x'"]
    assert validate_resume({"approved": True, "kind": "c"}, schema) == [
        "$.kind: expected one of ['a', 'b'], got 'c'"
    ]
    assert validate_resume({"approved": True, "items": [1, 2, "3"]}, schema) == [
        "$.items[2]: expected integer, got str"
    ]
    assert validate_resume({"approved": True, "inner": {}}, schema) == ["$.inner.n: required"]
    assert validate_resume({"approved": True, "inner": {"n": "1"}}, schema) == [
        "$.inner.n: expected number, got str"
    ]
    assert validate_resume(None, schema) == []  # None means cancelled
    assert validate_resume("anything", None) == []
    assert validate_resume("short", {"type": "string", "minLength": 10}) == [
        "$: 'short' is too short"
    ]


@pytest.mark.slow
def test_importing_agents_does_not_import_django():
    code = (
        "import sys, agents, agents.graph, agents.prebuilt, agents.testing.checkpointer_contract,"
        " agents.portal_client;"
        "print('django' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


async def test_two_graphs_with_two_checkpointers_keep_their_threads_apart(config):
    a_store, b_store = InMemoryCheckpointer(), InMemoryCheckpointer()
    a = graph_of(lambda s: Message(role="assistant", content="from a"), a_store)
    b = graph_of(lambda s: Message(role="assistant", content="from b"), b_store)
    await a.ainvoke(user("hi a"), config)
    await b.ainvoke(user("hi b"), config)
    state_a, state_b = await a.aget_state("t-1"), await b.aget_state("t-1")
    assert [m.text() for m in state_a.context] == ["hi a", "from a"]
    assert [m.text() for m in state_b.context] == ["hi b", "from b"]


async def test_an_interrupt_names_who_should_answer_and_the_checkpoint_keeps_it(store, config):
    def ask(state: AgentState) -> Message:
        answer = interrupt("ok?", assign_to=["group:finance", "user:ada"])
        return Message(role="assistant", content=str(answer))

    graph = graph_of(ask, store)
    paused = await graph.ainvoke(user("hi"), config, response_granularity=ResponseGranularity.FULL)

    request = pending_interrupt(paused["state"])
    assert request is not None
    assert request.assign_to == ["group:finance", "user:ada"]
    assert paused["state"].interrupt["assign_to"] == ["group:finance", "user:ada"]


async def test_an_interrupt_that_names_nobody_keeps_its_old_shape(store, config):
    graph = graph_of(lambda state: Message(role="assistant", content=str(interrupt("ok?"))), store)
    paused = await graph.ainvoke(user("hi"), config, response_granularity=ResponseGranularity.FULL)
    assert "assign_to" not in paused["state"].interrupt


async def test_a_malformed_assignee_fails_the_run_saying_how_to_write_one(store, config):
    from agents.errors import InvalidInterruptError

    graph = graph_of(
        lambda state: Message(
            role="assistant", content=str(interrupt("ok?", assign_to=["finance"]))
        ),
        store,
    )
    with pytest.raises(InvalidInterruptError, match="'user:<username>' or 'group:<name>'"):
        await graph.ainvoke(user("hi"), config)
