"""The write before a tool call, on PostgreSQL, is a durable commit that names the call.

The worker's path: a step is one statement on the worker's own connection, and a step
that need not be durable carries ``set_config('synchronous_commit', 'off', true)``. The
statements the checkpointer sends are read as they go out.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents import ReactAgent
from portal import broadcast, pg
from portal.checkpointer import DjangoCheckpointer, aconnect
from portal.models import Thread
from tests.agents.conftest import FakeModel, call, say, user

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


async def _quiet_send(group: str, message: Any) -> None:
    return None


def test_the_write_before_a_tool_call_names_it_and_waits_for_the_disk(monkeypatch):
    monkeypatch.setattr(broadcast, "agroup_send", _quiet_send)
    sent: list[str] = []
    real_fetch_first = pg.fetch_first

    async def watching(conn: Any, statement: Any, params: Any, **kwargs: Any) -> Any:
        sent.append(statement.sql.decode())
        return await real_fetch_first(conn, statement, params, **kwargs)

    monkeypatch.setattr(pg, "fetch_first", watching)
    thread = Thread.objects.create(agent="refunds", title="Broken mug")
    tid = str(thread.pk)
    seen: list[tuple[str, Any]] = []

    async def scenario() -> None:
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn, thread=thread)

        async def issue_refund(order_id: str) -> str:
            """Refund an order."""
            snapshot = await DjangoCheckpointer(connection=conn).aget(tid)
            assert snapshot is not None
            seen.append((sent[-1], snapshot.meta.get("in_flight")))
            return f"refunded {order_id}"

        model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Done."))
        graph = ReactAgent(model, tools=[issue_refund]).compile(checkpointer=store)
        try:
            # The worker's way: it tells the run the thread's seq, so nothing is loaded.
            await graph.ainvoke(user("refund A-1"), {"thread_id": tid, "expected_seq": 0})
        finally:
            await conn.close()

    async_to_sync(scenario)()
    ((before_the_call, in_flight),) = seen
    assert "INSERT INTO portal_checkpoint" in before_the_call
    assert "synchronous_commit" not in before_the_call
    assert in_flight == ["call_1"]
    # The model's turn and the input went in that write too: one statement, durable.
    assert sum("INSERT INTO portal_checkpoint" in sql for sql in sent) == 4
