from dataclasses import dataclass

import pytest

from agents import END, AgentState, GraphSetupError, InMemoryCheckpointer, Message, StateGraph


def noop(state: AgentState) -> None:
    return None


def two_nodes() -> StateGraph:
    g = StateGraph()
    g.add_node("A", noop)
    g.add_node("B", noop)
    g.add_edge("A", "B")
    g.add_edge("B", END)
    g.set_entry_point("A")
    return g


def test_a_well_formed_graph_compiles_and_is_immutable():
    compiled = two_nodes().compile()
    with pytest.raises(AttributeError):
        compiled.entry = "B"  # type: ignore[misc]
    with pytest.raises(TypeError):
        compiled.nodes["C"] = noop  # type: ignore[index]


def test_a_graph_without_entry_point_says_to_call_set_entry_point():
    g = StateGraph()
    g.add_node("A", noop)
    g.add_edge("A", END)
    with pytest.raises(GraphSetupError, match=r"set_entry_point"):
        g.compile()


def test_an_unknown_entry_point_is_refused():
    g = two_nodes()
    g.set_entry_point("Z")
    with pytest.raises(GraphSetupError, match="no node `Z`; add it with add_node"):
        g.compile()


def test_an_edge_to_an_unknown_node_names_both_ends_and_the_fix():
    g = StateGraph()
    g.add_node("A", noop)
    g.add_edge("A", "X")
    g.set_entry_point("A")
    with pytest.raises(
        GraphSetupError,
        match=r"edge from `A` to `X`, but there is no node `X`; add it with add_node",
    ):
        g.compile()


def test_an_edge_from_an_unknown_node_is_refused():
    g = two_nodes()
    g.add_edge("Q", "A")
    with pytest.raises(GraphSetupError, match="starts at `Q`"):
        g.compile()


def test_a_conditional_edge_to_an_unknown_node_is_refused():
    g = StateGraph()
    g.add_node("A", noop)
    g.add_conditional_edges("A", lambda s: "go", {"go": "MISSING", "stop": END})
    g.set_entry_point("A")
    with pytest.raises(GraphSetupError, match="edge from `A` to `MISSING`"):
        g.compile()


def test_a_node_without_outgoing_edge_is_refused_with_the_end_fix():
    g = StateGraph()
    g.add_node("A", noop)
    g.set_entry_point("A")
    with pytest.raises(
        GraphSetupError, match=r"node `A` has no outgoing edge; add_edge\('A', END\)"
    ):
        g.compile()


def test_a_duplicate_node_name_is_refused():
    g = StateGraph()
    g.add_node("A", noop)
    with pytest.raises(GraphSetupError, match="already a node `A`"):
        g.add_node("A", noop)


def test_the_end_name_is_reserved():
    with pytest.raises(GraphSetupError, match="reserved"):
        StateGraph().add_node(END, noop)


def test_a_second_outgoing_edge_is_refused():
    g = two_nodes()
    with pytest.raises(GraphSetupError, match="already has an outgoing edge"):
        g.add_edge("A", END)


def test_unknown_breakpoint_names_are_refused():
    with pytest.raises(GraphSetupError, match="interrupt_before names `NOPE`"):
        two_nodes().compile(checkpointer=InMemoryCheckpointer(), interrupt_before=["NOPE"])
    with pytest.raises(GraphSetupError, match="interrupt_after names `NOPE`"):
        two_nodes().compile(checkpointer=InMemoryCheckpointer(), interrupt_after=["NOPE"])


def test_breakpoints_without_a_checkpointer_are_refused_at_compile():
    with pytest.raises(GraphSetupError, match=r"compile\(checkpointer=InMemoryCheckpointer\(\)\)"):
        two_nodes().compile(interrupt_before=["B"])


def test_a_state_type_that_is_not_agent_state_is_refused():
    with pytest.raises(GraphSetupError, match="AgentState"):
        StateGraph(dict)  # type: ignore[arg-type]


def test_a_non_callable_node_is_refused():
    with pytest.raises(GraphSetupError, match="must be a function"):
        StateGraph().add_node("A", "not a function")  # type: ignore[arg-type]


@dataclass
class Counting(AgentState):
    visits: int = 0


async def test_nodes_may_be_sync_or_async_take_config_and_set_state_fields(store):
    seen = {}

    def first(state: Counting, config: dict) -> dict:
        seen["user"] = config["user_id"]
        return {"messages": [Message(role="assistant", content="one")], "visits": state.visits + 1}

    async def second(state: Counting) -> list[Message]:
        return [Message(role="assistant", content=f"visits={state.visits}")]

    g = StateGraph(Counting)
    g.add_node("A", first)
    g.add_node("B", second)
    g.add_edge("A", "B")
    g.add_edge("B", END)
    g.set_entry_point("A")
    graph = g.compile(checkpointer=store)
    out = await graph.ainvoke({"messages": []}, {"thread_id": "x", "user_id": "u"})
    assert out["messages"] == []  # nothing to do on a new thread without messages
    out = await graph.ainvoke(
        {"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "x", "user_id": "u"}
    )
    assert [m.content for m in out["messages"]] == ["hi", "one", "visits=1"]
    assert seen["user"] == "u"
    state = await graph.aget_state("x")
    assert isinstance(state, Counting) and state.visits == 1


async def test_a_router_returning_an_unknown_target_fails_with_the_options():
    g = StateGraph()
    g.add_node("A", noop)
    g.add_conditional_edges("A", lambda s: "nowhere", {"stop": END})
    g.set_entry_point("A")
    with pytest.raises(GraphSetupError, match="router of `A` returned 'nowhere'"):
        await g.compile().ainvoke({"messages": [Message.text_message("hi")]})


async def test_a_node_returning_an_unknown_field_is_told_how_to_fix_it():
    g = StateGraph()
    g.add_node("A", lambda s: {"mood": "happy"})
    g.add_edge("A", END)
    g.set_entry_point("A")
    with pytest.raises(GraphSetupError, match="add the field to your AgentState subclass"):
        await g.compile().ainvoke({"messages": [Message.text_message("hi")]})


async def test_a_looping_graph_stops_at_the_recursion_limit():
    from agents import GraphRecursionError

    g = StateGraph()
    g.add_node("A", noop)
    g.add_edge("A", "A")
    g.set_entry_point("A")
    with pytest.raises(GraphRecursionError, match="recursion_limit"):
        await g.compile().ainvoke(
            {"messages": [Message.text_message("hi")]}, {"recursion_limit": 5}
        )


def test_invoke_runs_synchronously_outside_an_event_loop():
    g = StateGraph()
    g.add_node("A", lambda s: Message(role="assistant", content="sync"))
    g.add_edge("A", END)
    g.set_entry_point("A")
    out = g.compile().invoke({"messages": [Message.text_message("hi")]})
    assert out["messages"][-1].text() == "sync"


async def test_invoke_inside_an_event_loop_says_to_use_ainvoke():
    with pytest.raises(RuntimeError, match="ainvoke"):
        two_nodes().compile().invoke({"messages": []})
