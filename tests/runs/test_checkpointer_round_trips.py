"""Round trips to PostgreSQL per ReAct cycle, as the worker runs a graph (its own
autocommit connection, the thread's seq told), counted on the wire. Each write is one
autocommitted statement, so there is no BEGIN or COMMIT to count; docs/benchmarks.md lists
them. A change that adds one fails here."""

from __future__ import annotations

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import ResponseGranularity
from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.examples.refunds import EXAMPLE, build_agent
from portal.models import Thread
from portal.models.db import aconnect
from portal.notify import broadcast
from portal.runs.checkpointer import DjangoCheckpointer
from tests.api.roundtrips import traced

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# One load per run, then each write the runtime must commit before what depends on it:
# the input (before the model), the model's tool call with the call marked in flight
# (before the tool), the pause (the request enters the queue); then the answer with the
# call in flight again (before the tool acts), the tool's result (before the model reads
# it), the end.
PAUSE = ["load", "step", "step", "step + queue"]
RESUME = ["load", "step + queue", "step", "step"]


def _kind(query: str) -> str:
    if query.lstrip().startswith("SELECT t.agent"):
        return "load"
    if "INSERT INTO portal_checkpoint" in query:
        return "step + queue" if "INSERT INTO portal_interrupt" in query else "step"
    return query.strip()[:60]


def _history(n: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"id": f"h{i}", "role": roles[i % 2], "content": f"earlier {i}"} for i in range(n)]


@pytest.mark.parametrize("earlier", [10, 100])
def test_a_react_cycle_takes_four_round_trips_to_pause_and_four_to_finish(monkeypatch, earlier):
    thread = Thread.objects.create(agent="refunds")
    tid = str(thread.pk)
    monkeypatch.setattr(broadcast, "group_send", lambda group, message: None)
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def watched(cursor, query, params=None, **kwargs):
        sent.append(_kind(query))
        return await execute(cursor, query, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", watched)

    async def cycle() -> tuple[list[str], list[str], list[str], list[str]]:
        conn = await aconnect()
        try:
            done = CheckpointWrite(
                status=ThreadStatus.DONE, next_node=None, new_messages=_history(earlier)
            )
            seq = await DjangoCheckpointer(connection=conn).aput(tid, done, parent_seq=None)
            sent.clear()
            graph = build_agent().compile(checkpointer=DjangoCheckpointer(connection=conn))
            with traced(conn.pgconn) as pause_trips:
                out = await graph.ainvoke(
                    {"messages": [{"role": "user", "content": EXAMPLE}]},
                    {"thread_id": tid, "expected_seq": seq},
                    response_granularity=ResponseGranularity.PARTIAL,
                )
            paused, sent[:] = list(sent), []
            answer = {"resume": {"approved": True}, "resume_interrupt_id": out["interrupt"]["id"]}
            with traced(conn.pgconn) as resume_trips:
                done_out = await graph.ainvoke(
                    answer,
                    {"thread_id": tid, "expected_seq": out["seq"]},
                    response_granularity=ResponseGranularity.PARTIAL,
                )
            await graph.aclose()
            assert done_out["interrupt"] is None
            return paused, list(sent), pause_trips, resume_trips
        finally:
            await conn.close()

    with CaptureQueriesContext(connection) as django_queries:
        paused, resumed, pause_trips, resume_trips = async_to_sync(cycle)()

    assert paused == PAUSE and len(pause_trips) == len(PAUSE), "\n".join(pause_trips)
    assert resumed == RESUME and len(resume_trips) == len(RESUME), "\n".join(resume_trips)
    assert not any(t in ("BEGIN", "COMMIT") for t in pause_trips + resume_trips)
    # Nothing of the cycle goes through Django's connection (the queue's announcements
    # render in their own thread, on its own connection, and only for someone listening).
    assert len(django_queries) == 0, [q["sql"][:80] for q in django_queries.captured_queries]
