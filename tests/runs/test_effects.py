"""Tool effects in the portal: the write before a tool call, and how a reviewer's answer
about a call a crash cut short is recorded.

On PostgreSQL, the worker's path: a step is one statement on the worker's own connection,
committed durably. The statements the checkpointer sends are read as they go out.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync

from agents import ReactAgent
from agents.tools import OUTCOME_REASON, OUTCOME_SCHEMA
from portal.models import Decision, Thread
from portal.models.db import aconnect
from portal.notify import broadcast
from portal.reviews.decisions import decision_submit
from portal.runs.checkpointer import DjangoCheckpointer
from tests.agents.conftest import FakeModel, call, say, user
from tests.factories import make_interrupt


def answer_question(reviewer: Any, outcome: str, tool_call: dict[str, Any]) -> tuple[Any, Any]:
    """The question about ``tool_call`` a crash cut short, and ``reviewer``'s answer."""
    request = make_interrupt(
        reason=OUTCOME_REASON,
        schema=OUTCOME_SCHEMA,
        value={"tool_call": tool_call, "key": "k"},
        message="issue_refund(...) may already have taken effect",
    )
    decision = decision_submit(
        interrupt=request,
        reviewer=reviewer,
        value={"outcome": outcome},
        resume_interrupt_id=request.pk,
    )
    return request, decision


@pytest.mark.parametrize(
    ("outcome", "recorded", "executed"),
    [
        ("confirm", Decision.Outcome.APPROVED, True),
        ("retry", Decision.Outcome.APPROVED, True),
        ("fail", Decision.Outcome.REJECTED, False),
    ],
)
@pytest.mark.django_db
def test_a_call_marked_failed_is_recorded_as_rejected_with_nothing_executed(
    reviewer, outcome, recorded, executed
):
    request, decision = answer_question(reviewer, outcome, {"id": "x", "name": "issue_refund"})
    args = {request.tool_call_id: {"order_id": "A-1001", "amount": 42.5}}
    assert (decision.outcome, decision.original_args) == (recorded, args)
    assert decision.executed_args == (args if executed else None)


@pytest.mark.parametrize(
    ("outcome", "executed"), [("confirm", True), ("retry", True), ("fail", False)]
)
@pytest.mark.django_db
def test_an_answer_about_a_call_records_the_arguments_it_ran_with_not_the_models(
    reviewer, outcome, executed
):
    # The model asked for 42.50; a reviewer's edit made it 10.00 before the crash.
    ran_with = {"order_id": "A-1001", "amount": 10.0}
    call = {"id": "x", "name": "issue_refund", "arguments": ran_with}
    request, decision = answer_question(reviewer, outcome, call)
    args = {request.tool_call_id: ran_with}
    assert decision.original_args == args
    assert decision.executed_args == (args if executed else None)
    # Nobody edited anything in this answer.
    assert decision.outcome != Decision.Outcome.EDITED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_write_before_a_tool_call_names_it_and_waits_for_the_disk(monkeypatch):
    monkeypatch.setattr(broadcast, "group_send", lambda group, message: None)
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def watching(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append(str(query))
        return await execute(cursor, query, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", watching)
    thread = Thread.objects.create(agent="refunds", title="Broken mug")
    tid = str(thread.pk)
    seen: list[tuple[str, Any]] = []

    async def scenario() -> None:
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn, thread=thread)

        async def issue_refund(order_id: str) -> str:
            """Refund an order."""
            before_the_call = sent[-1]
            snapshot = await DjangoCheckpointer(connection=conn).aget(tid)
            assert snapshot is not None
            seen.append((before_the_call, snapshot.meta.get("in_flight")))
            return f"refunded {order_id}"

        model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Done."))
        graph = ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)
        try:
            # The worker's way: it tells the run the thread's seq as it read it.
            await graph.ainvoke(user("refund A-1"), {"thread_id": tid, "expected_seq": 0})
        finally:
            await conn.close()

    async_to_sync(scenario)()
    ((before_the_call, in_flight),) = seen
    assert "INSERT INTO portal_checkpoint" in before_the_call
    assert "synchronous_commit" not in before_the_call
    assert in_flight == ["call_1"]
    # The input went before the model's turn; the model's turn went in that write. Then
    # the result with the tool node's end, and the model's answer: four in all.
    assert sum("INSERT INTO portal_checkpoint" in sql for sql in sent) == 4
