from typing import Any

import pytest

from agents import ReactAgent, ResponseGranularity, ResumeValidationError, pending_interrupt, tool
from agents.inbox import declared

from .conftest import FakeModel, call, say, tool_results, user


def refund_graph(store, counts):
    @tool(high_risk=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        counts["refund"] += 1
        counts["last_args"] = (order_id, amount)
        return f"refunded {amount} for {order_id}"

    def check_order(order_id: str) -> str:
        counts["check"] += 1
        return f"{order_id} is broken"

    model = FakeModel(
        call(
            ("check_order", {"order_id": "A-1001"}),
            ("issue_refund", {"order_id": "A-1001", "amount": 42.5}),
        ),
        say("handled"),
    )
    return ReactAgent(model, tools=[check_order, issue_refund]).compile(checkpointer=store)


async def pause(graph, config):
    out = await graph.ainvoke(user("refund A-1001"), config, ResponseGranularity.FULL)
    request = pending_interrupt(out["state"])
    assert request is not None
    return request


@pytest.fixture
def counts() -> dict[str, Any]:
    return {"refund": 0, "check": 0, "last_args": None}


async def test_a_high_risk_call_waits_for_approval_and_runs_once_when_approved(
    store, config, counts
):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    assert request.reason == "tool_approval"
    assert request.node == "TOOL" and request.tool_call_id is None
    assert request.message == "Approve issue refund (order id: A-1001, amount: $42.50)?"
    assert request.value["tool_calls"] == [
        {
            "id": "call_2",
            "name": "issue_refund",
            "arguments": {"order_id": "A-1001", "amount": 42.5},
        }
    ]
    assert request.value["parameters"]["call_2"]["required"] == ["order_id", "amount"]
    assert counts["refund"] == 0 and counts["check"] == 0  # approval comes before the turn runs

    out = await graph.ainvoke(
        {"resume": {"type": "accept"}, "resume_interrupt_id": request.id}, config
    )
    assert counts["refund"] == 1 and counts["check"] == 1
    results = tool_results(out["messages"])
    assert results == {"call_1": "A-1001 is broken", "call_2": "refunded 42.5 for A-1001"}
    refund_message = next(m for m in out["messages"] if m.tool_call_id == "call_2")
    assert refund_message.meta["approved_by_interrupt"] == request.id
    assert out["messages"][-1].text() == "handled"


async def test_the_approval_declares_agent_inbox_answers_offering_the_calls_arguments(
    store, config, counts
):
    request = await pause(refund_graph(store, counts), config)
    found = declared(request.response_schema)
    assert found is not None
    assert found.actions == ["accept", "edit", "response", "ignore"]
    assert found.args == {"call_2": {"order_id": "A-1001", "amount": 42.5}}
    assert found.args_schema["properties"]["call_2"]["required"] == ["order_id", "amount"]


@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        ({"type": "ignore", "note": "outside the return window"}, "outside the return window"),
        ({"type": "ignore"}, "No approval was given."),
        ({"type": "response", "args": "Offer a voucher instead."}, "Offer a voucher instead."),
        (
            {"type": "response", "args": "Offer a voucher.", "note": "policy 4.2"},
            "Offer a voucher. (policy 4.2)",
        ),
        # The yes/no shape of before still declines, with its note.
        ({"approved": False, "note": "outside the return window"}, "outside the return window"),
        ({"approved": False}, "No approval was given."),
    ],
)
async def test_anything_but_an_explicit_accept_or_edit_declines_with_what_the_reviewer_said(
    store, config, counts, decision, reason
):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    out = await graph.ainvoke({"resume": decision, "resume_interrupt_id": request.id}, config)
    assert counts["refund"] == 0
    assert counts["check"] == 1  # the harmless call in the same turn still runs
    assert tool_results(out["messages"])["call_2"] == {"status": "declined", "reason": reason}
    assert out["messages"][-1].text() == "handled"


async def test_no_answer_at_all_says_the_request_was_withdrawn_not_declined(store, config, counts):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    out = await graph.ainvoke({"resume": None, "resume_interrupt_id": request.id}, config)
    assert counts["refund"] == 0
    assert tool_results(out["messages"])["call_2"] == {
        "status": "withdrawn",
        "reason": "The request was withdrawn before anyone decided; nothing was done.",
    }


async def test_an_approval_in_the_yes_no_shape_of_before_still_runs_the_call(store, config, counts):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    await graph.ainvoke({"resume": {"approved": True}, "resume_interrupt_id": request.id}, config)
    assert counts["refund"] == 1


@pytest.mark.parametrize(
    ("bad", "line"),
    [
        ({"approved": "yes"}, "$: unexpected field 'approved'"),
        ({"approved": 1}, "$: unexpected field 'approved'"),
        ({"note": "fine by me"}, "$.type: required"),
        ("yes", "$: expected object, got str"),
        (
            {"type": "approve"},
            "$.type: this request does not allow 'approve'; it allows 'accept', 'edit', "
            "'response', 'ignore'",
        ),
        (
            {"type": "accept", "args": {"call_2": {"order_id": "A-1001", "amount": 1.0}}},
            "$.args: 'accept' carries no arguments; use 'edit' to change them",
        ),
        ({"type": "response"}, "$.args: required"),
        ({"type": "edit"}, "$.args: required"),
    ],
)
async def test_a_malformed_answer_is_refused_saying_why_and_the_thread_stays_paused(
    store, config, counts, bad, line
):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    with pytest.raises(ResumeValidationError) as err:
        await graph.ainvoke({"resume": bad}, config)
    assert line in err.value.context["errors"]
    assert counts["refund"] == 0
    assert (await store.aget("t-1")).interrupt["id"] == request.id
    await graph.ainvoke({"resume": {"type": "ignore"}}, config)
    assert counts["refund"] == 0


async def test_edited_arguments_are_executed_and_both_versions_are_recorded(store, config, counts):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    edited = {"order_id": "A-1001", "amount": 40.0}
    out = await graph.ainvoke(
        {
            "resume": {"type": "edit", "args": {"call_2": edited}},
            "resume_interrupt_id": request.id,
        },
        config,
    )
    assert counts["refund"] == 1 and counts["last_args"] == ("A-1001", 40.0)
    message = next(m for m in out["messages"] if m.tool_call_id == "call_2")
    assert message.meta == {
        "original_args": {"order_id": "A-1001", "amount": 42.5},
        "executed_args": edited,
        "approved_by_interrupt": request.id,
    }


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            {"call_2": {"order_id": "A-1001", "amount": "lots"}},
            "$.args.call_2.amount: expected number, got str",
        ),
        ({"call_2": {"order_id": "A-1001"}}, "$.args.call_2.amount: required"),
        ({"call_9": {}}, "$.args: unexpected field 'call_9'"),
    ],
)
async def test_invalid_edited_arguments_are_refused_and_the_thread_stays_paused(
    store, config, counts, args, line
):
    graph = refund_graph(store, counts)
    request = await pause(graph, config)
    with pytest.raises(ResumeValidationError) as err:
        await graph.ainvoke({"resume": {"type": "edit", "args": args}}, config)
    assert line in err.value.context["errors"]
    assert counts["refund"] == 0
    await graph.ainvoke({"resume": {"type": "accept"}, "resume_interrupt_id": request.id}, config)
    assert counts["refund"] == 1


async def test_several_high_risk_calls_share_one_approval_listing_all(store, config):
    ran = []

    @tool(high_risk=True)
    def delete_account(user_id: str) -> str:
        ran.append(user_id)
        return "deleted"

    model = FakeModel(
        call(("delete_account", {"user_id": "u1"}), ("delete_account", {"user_id": "u2"})),
        say("ok"),
    )
    graph = ReactAgent(model, tools=[delete_account]).compile(checkpointer=store)
    request = await pause(graph, config)
    assert request.message == "Approve delete account (user id: u1); delete account (user id: u2)?"
    assert [c["id"] for c in request.value["tool_calls"]] == ["call_1", "call_2"]
    await graph.ainvoke({"resume": {"type": "accept"}}, config)
    assert ran == ["u1", "u2"]


class ProcessDied(BaseException):
    pass


async def test_the_approval_survives_a_crash_between_two_approved_calls(store, config):
    ran = []

    @tool(high_risk=True, idempotent=True)  # bob's cut-short call is simply run again
    def pay(who: str) -> str:
        ran.append(who)
        if who == "bob" and ran.count("bob") == 1:
            raise ProcessDied
        return f"paid {who}"

    turns = (call(("pay", {"who": "alice"}), ("pay", {"who": "bob"})), say("paid both"))
    graph = ReactAgent(FakeModel(*turns), tools=[pay]).compile(checkpointer=store)
    await pause(graph, config)
    with pytest.raises(ProcessDied):
        await graph.ainvoke({"resume": {"type": "accept"}}, config)
    restarted = ReactAgent(FakeModel(say("paid both")), tools=[pay]).compile(checkpointer=store)
    out = await restarted.ainvoke({"messages": []}, config, ResponseGranularity.PARTIAL)
    assert out["interrupt"] is None  # no second approval needed
    assert ran == ["alice", "bob", "bob"]  # alice once; bob died before finishing, then ran
    assert tool_results(out["messages"]) == {"call_1": "paid alice", "call_2": "paid bob"}


def test_a_tools_title_words_its_approval_request_as_a_format_string_or_a_function():
    from agents.tools import describe_call

    @tool(high_risk=True, title="a ${amount:,.2f} transfer to {recipient}")
    def transfer(amount: float, recipient: str) -> str:
        """Move money."""
        return "done"

    @tool(title=lambda args: f"closing {args['user_id']}")
    def close(user_id: str) -> str:
        """Close an account."""
        return "closed"

    assert describe_call("transfer", {"amount": 2500, "recipient": "Alice"}, transfer) == (
        "a $2,500.00 transfer to Alice"
    )
    assert describe_call("close", {"user_id": "u-1"}, close) == "closing u-1"
    # A title the arguments do not fit falls back to the tool's name in words.
    assert describe_call("transfer", {"amount": 5}, transfer) == "transfer (amount: $5.00)"
    assert describe_call("transfer_funds", {"amount": 5000.0, "to": "Al"}) == (
        "transfer funds (amount: $5,000.00, to: Al)"
    )


async def test_a_titled_high_risk_tool_asks_in_its_own_words(store, config):
    @tool(high_risk=True, title="a ${amount:,.2f} refund for order {order_id}")
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return "ok"

    model = FakeModel(call(("refund", {"order_id": "A-1", "amount": 42.5})), say("done"))
    graph = ReactAgent(model, tools=[refund]).compile(checkpointer=store)

    request = await pause(graph, config)

    assert request.message == "Approve a $42.50 refund for order A-1?"
