"""Agent Inbox's answers: an interrupt declares accept/edit/response/ignore, the agent
receives a typed answer, and edits reach the tool call before it runs."""

from __future__ import annotations

from typing import Any

import pytest

from agents import (
    InMemoryCheckpointer,
    ReactAgent,
    ResponseGranularity,
    ResumeValidationError,
    interrupt,
    pending_interrupt,
    tool,
)
from agents.inbox import declared, goes_ahead

from .conftest import FakeModel, call, say, tool_results, user


def refund_graph(store: InMemoryCheckpointer, ran: list[Any], actions: tuple[str, ...]):
    @tool
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        answer = interrupt(
            {"order_id": order_id, "amount": amount},
            message=f"Refund **${amount:.2f}** for order {order_id}?",
            reason="refund",
            actions=actions,
        )
        if not goes_ahead(answer):
            kind = answer["type"] if answer else "none"
            text = answer.get("args") if answer else None
            return f"not refunded ({kind}): {text}"
        args = answer["args"] if answer["type"] == "edit" else {"order_id": order_id}
        args.setdefault("amount", amount)
        ran.append(args)
        return f"refunded {args['amount']} for {args['order_id']}"

    model = FakeModel(call(("issue_refund", {"order_id": "A-1", "amount": 42.5})), say("Done."))
    return ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)


async def paused_request(graph, config):
    out = await graph.ainvoke(user("refund A-1"), config, ResponseGranularity.FULL)
    return pending_interrupt(out["state"])


async def test_an_interrupt_declares_the_answers_a_person_may_give(store, config):
    graph = refund_graph(store, [], ("accept", "edit", "response"))
    request = await paused_request(graph, config)
    found = declared(request.response_schema)
    assert found.actions == ["accept", "edit", "response"]
    # Inside a tool, the call's own arguments are offered, checked against its parameters.
    assert found.args == {"order_id": "A-1", "amount": 42.5}
    assert found.args_schema["properties"]["amount"] == {"type": "number"}


@pytest.mark.parametrize(
    ("answer", "ran", "result"),
    [
        ({"type": "accept"}, [{"order_id": "A-1", "amount": 42.5}], "refunded 42.5 for A-1"),
        (
            {"type": "edit", "args": {"order_id": "A-1", "amount": 10.0}},
            [{"order_id": "A-1", "amount": 10.0}],
            "refunded 10.0 for A-1",
        ),
        ({"type": "response", "args": "Ask for a photo first."}, [], None),
        ({"type": "ignore"}, [], "not refunded (ignore): None"),
        (None, [], "not refunded (none): None"),
    ],
)
async def test_the_tool_receives_a_typed_answer_and_acts_only_on_accept_or_edit(
    store, config, answer, ran, result
):
    done: list[Any] = []
    graph = refund_graph(store, done, ("accept", "edit", "response", "ignore"))
    request = await paused_request(graph, config)
    out = await graph.ainvoke({"resume": answer, "resume_interrupt_id": request.id}, config)
    assert done == ran
    expected = result or "not refunded (response): Ask for a photo first."
    assert tool_results(out["messages"])["call_1"] == expected


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        ({"type": "ignore"}, "$.type: this request does not allow 'ignore'; it allows 'accept'"),
        ({"type": "edit", "args": {"order_id": "A-1", "amount": "ten"}}, "$.args.amount"),
        ({"type": "edit", "args": {"order_id": "A-1", "amount": 1, "x": 1}}, "unexpected"),
        ({"type": "response"}, "$.args: required"),
        ({"type": "accept", "args": {"amount": 1}}, "$.args"),
    ],
)
async def test_an_answer_the_request_does_not_allow_is_refused_and_nothing_is_recorded(
    store, config, answer, line
):
    done: list[Any] = []
    graph = refund_graph(store, done, ("accept", "edit", "response"))
    request = await paused_request(graph, config)
    before = await store.aget(config["thread_id"])
    with pytest.raises(ResumeValidationError) as refused:
        await graph.ainvoke({"resume": answer, "resume_interrupt_id": request.id}, config)
    assert any(line in error for error in refused.value.context["errors"]), refused.value
    after = await store.aget(config["thread_id"])
    assert after.seq == before.seq and done == []


def test_actions_must_be_known_and_at_least_one():
    from agents.inbox import check_actions

    with pytest.raises(ValueError, match="unknown action 'approve'"):
        check_actions(["approve"])
    with pytest.raises(ValueError, match="at least one"):
        check_actions([])


def account_graph(store, ran):
    def delete_account(user_id: str, reason: str = "") -> str:
        """Permanently delete a user account."""
        ran.append(user_id)
        return f"Account {user_id} deleted."

    model = FakeModel(call(("delete_account", {"user_id": "u-381"})), say("Done."))
    return ReactAgent(model, tools=[delete_account]).compile(
        checkpointer=store, interrupt_before=["TOOL"]
    )


async def test_a_breakpoint_before_the_tools_offers_each_calls_arguments_for_editing(store, config):
    graph = account_graph(store, [])
    request = await paused_request(graph, config)
    found = declared(request.response_schema)
    assert found is not None
    # The answers a high-risk tool's approval takes, as in Agent Inbox.
    assert found.actions == ["accept", "edit", "response", "ignore"]
    assert found.args == {"call_1": {"user_id": "u-381"}}
    args = found.args_schema
    assert args["properties"]["call_1"]["properties"]["user_id"] == {"type": "string"}
    assert args["additionalProperties"] is False


@pytest.mark.parametrize(
    ("answer", "ran", "result"),
    [
        ({"type": "accept"}, ["u-381"], "Account u-381 deleted."),
        (
            {"type": "edit", "args": {"call_1": {"user_id": "u-999"}}},
            ["u-999"],
            "Account u-999 deleted.",
        ),
        (
            {"type": "response", "args": "Only deactivate it.", "note": "policy 7"},
            [],
            {"status": "declined", "reason": "Only deactivate it. (policy 7)"},
        ),
        (
            {"type": "ignore", "note": "not this account"},
            [],
            {"status": "declined", "reason": "not this account"},
        ),
        # The yes/no answers of before still work.
        ({"approved": True}, ["u-381"], "Account u-381 deleted."),
        ({"approved": False}, [], {"status": "declined", "reason": "No approval was given."}),
    ],
)
async def test_a_breakpoint_before_the_tools_takes_each_typed_answer_and_fails_closed(
    store, config, answer, ran, result
):
    done: list[str] = []
    graph = account_graph(store, done)
    request = await paused_request(graph, config)

    out = await graph.ainvoke({"resume": answer, "resume_interrupt_id": request.id}, config)

    assert done == ran
    [message] = [m for m in out["messages"] if m.role == "tool"]
    if isinstance(result, dict):
        assert tool_results(out["messages"])["call_1"] == result
    else:
        assert message.content == result
    assert out["messages"][-1].text() == "Done."  # the model saw the outcome and answered


async def test_a_breakpoint_before_calls_with_nothing_to_edit_offers_no_edit(store, config):
    def forget_everything() -> str:
        """Forget every account."""
        return "forgotten"

    model = FakeModel(call(("forget_everything", {})), say("Done."))
    graph = ReactAgent(model, tools=[forget_everything]).compile(
        checkpointer=store, interrupt_before=["TOOL"]
    )
    request = await paused_request(graph, config)
    found = declared(request.response_schema)
    assert found is not None and found.actions == ["accept", "response", "ignore"]


async def test_editing_at_a_breakpoint_changes_the_pending_call_before_it_runs(store, config):
    ran: list[str] = []
    graph = account_graph(store, ran)
    request = await paused_request(graph, config)
    edited = {"approved": True, "args": {"call_1": {"user_id": "u-999"}}}
    out = await graph.ainvoke(
        {"resume": edited, "resume_interrupt_id": request.id}, config, ResponseGranularity.FULL
    )
    assert ran == ["u-999"]
    result = next(m for m in out["messages"] if m.role == "tool")
    assert result.content == "Account u-999 deleted."
    assert result.meta["original_args"] == {"user_id": "u-381"}
    assert result.meta["executed_args"] == {"user_id": "u-999"}
    assert result.meta["approved_by_interrupt"] == request.id
    # Used once: the node completed, so the edit is not kept for a later turn.
    assert "TOOL:args" not in (await store.aget(config["thread_id"])).meta.get("answers", {})


async def test_an_edit_at_a_breakpoint_that_breaks_the_tools_schema_is_refused(store, config):
    ran: list[str] = []
    graph = account_graph(store, ran)
    request = await paused_request(graph, config)
    with pytest.raises(ResumeValidationError) as refused:
        await graph.ainvoke(
            {
                "resume": {"approved": True, "args": {"call_1": {"user_id": 7}}},
                "resume_interrupt_id": request.id,
            },
            config,
        )
    assert "$.args.call_1.user_id: expected string, got int" in refused.value.context["errors"]
    assert ran == []


async def test_an_edit_with_a_rejection_at_a_breakpoint_runs_nothing(store, config):
    ran: list[str] = []
    graph = account_graph(store, ran)
    request = await paused_request(graph, config)
    out = await graph.ainvoke(
        {
            "resume": {"approved": False, "args": {"call_1": {"user_id": "u-1"}}},
            "resume_interrupt_id": request.id,
        },
        config,
    )
    assert ran == []
    assert tool_results(out["messages"])["call_1"]["status"] == "declined"
