"""The ORM checkpointer beyond the shared contract: the queue row and the checkpoint are
one transaction, the thread follows the checkpoint, writes do not grow with history, and
two writers racing on PostgreSQL cannot both win."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import DataError, connection, connections
from django.test.utils import CaptureQueriesContext

from agents.checkpoint import CheckpointConflict, CheckpointWrite, ThreadStatus
from portal.models import Checkpoint, Interrupt, Notification, Run, Thread
from portal.models.db import aconnect
from portal.notify import broadcast
from portal.runs.checkpointer import DjangoCheckpointer, thread_pk

REQUEST = {
    "id": "int_abc",
    "key": "TOOL:call_1:0",
    "node": "TOOL",
    "value": {"amount": 10},
    "message": "Approve?",
    "reason": "tool_approval",
    "response_schema": {"type": "object"},
    "tool_call_id": "call_1",
}


def step(n: int = 0, **fields) -> CheckpointWrite:
    fields.setdefault("status", ThreadStatus.RUNNING)
    fields.setdefault("next_node", "MAIN")
    return CheckpointWrite(
        new_messages=[{"id": f"m{n}", "role": "user", "content": f"hi {n}"}], **fields
    )


def pause(**fields) -> CheckpointWrite:
    fields.setdefault("interrupt", REQUEST)
    return step(status=ThreadStatus.INTERRUPTED, next_node="TOOL", **fields)


@pytest.fixture
def thread(db) -> Thread:
    return Thread.objects.create(agent="refunds", status=Thread.Status.RUNNING)


@pytest.mark.django_db
def test_free_string_thread_ids_map_to_stable_uuids():
    assert thread_pk("t") == thread_pk("t") != thread_pk("u")
    uuid_text = "6f1c0a52-2d4e-4b8e-9a57-3c1f0d9e8b21"
    assert str(thread_pk(uuid_text)) == uuid_text


def test_a_pause_writes_the_queue_row_with_the_checkpoint(thread):
    store = DjangoCheckpointer()
    store.put_sync(str(thread.pk), step(1), parent_seq=None)
    seq = store.put_sync(str(thread.pk), pause(), parent_seq=1)

    thread.refresh_from_db()
    request = Interrupt.objects.get(pk="int_abc")
    assert (thread.status, thread.last_seq) == (Thread.Status.INTERRUPTED, seq)
    assert (request.thread_id, request.agent, request.status) == (thread.pk, "refunds", "pending")
    assert (request.checkpoint_seq, request.tool_call_id, request.message) == (
        seq,
        "call_1",
        "Approve?",
    )
    assert request.expires_at is None
    assert Checkpoint.objects.get(thread=thread, seq=seq).interrupt_id == "int_abc"


def test_a_failure_after_the_checkpoint_insert_leaves_neither_checkpoint_nor_request(
    thread, monkeypatch
):
    store = DjangoCheckpointer()
    store.put_sync(str(thread.pk), step(1), parent_seq=None)
    if connection.vendor == "postgresql":
        # One statement writes the step and the queue row: a queue row the database
        # refuses (tool_call_id is at most 128 characters) takes the step down with it.
        request = {**REQUEST, "tool_call_id": "x" * 200}
        with pytest.raises(DataError):
            store.put_sync(str(thread.pk), pause(interrupt=request), parent_seq=1)
    else:
        original = DjangoCheckpointer._sync_queue

        def then_fail(self, *args):
            original(self, *args)
            assert Interrupt.objects.filter(pk="int_abc").exists()  # written, not committed
            raise RuntimeError("disk full")

        monkeypatch.setattr(DjangoCheckpointer, "_sync_queue", then_fail)
        with pytest.raises(RuntimeError, match="disk full"):
            store.put_sync(str(thread.pk), pause(), parent_seq=1)

    thread.refresh_from_db()
    assert (thread.last_seq, thread.status) == (1, Thread.Status.RUNNING)
    assert not Interrupt.objects.exists()
    assert list(Checkpoint.objects.values_list("seq", flat=True)) == [1]


def test_the_queue_hears_of_a_new_request_only_after_commit(
    thread, monkeypatch, django_capture_on_commit_callbacks
):
    published = []
    monkeypatch.setattr(broadcast, "publish_queue_change", lambda **kw: published.append(kw))
    store = DjangoCheckpointer()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        store.put_sync(str(thread.pk), pause(), parent_seq=None)
    assert published == []
    for callback in callbacks:
        callback()
    assert [(p["interrupt_id"], p["status"], p["agent"]) for p in published] == [
        ("int_abc", "pending", "refunds")
    ]


def test_a_request_the_new_checkpoint_no_longer_names_leaves_the_queue(thread):
    store = DjangoCheckpointer()
    store.put_sync(str(thread.pk), pause(), parent_seq=None)
    store.put_sync(str(thread.pk), step(2), parent_seq=1)
    store.put_sync(str(thread.pk), step(3, status=ThreadStatus.DONE, next_node=None), parent_seq=2)

    request = Interrupt.objects.get(pk="int_abc")
    assert request.status == Interrupt.Status.RESOLVED
    assert request.resolved_at is not None
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE


def test_each_checkpoint_records_the_run_that_wrote_it(thread):
    run = Run.objects.create(thread=thread, kind="start")
    DjangoCheckpointer(run=run).put_sync(str(thread.pk), step(), parent_seq=None)
    DjangoCheckpointer().put_sync(str(thread.pk), step(), parent_seq=1)
    assert list(Checkpoint.objects.order_by("seq").values_list("run", flat=True)) == [run.pk, None]


def test_writing_a_step_costs_the_same_queries_at_any_history_length(thread):
    store = DjangoCheckpointer()
    seq = None
    costs = []
    for n in range(40):
        with CaptureQueriesContext(connection) as queries:
            seq = store.put_sync(str(thread.pk), step(n), parent_seq=seq)
        costs.append(len(queries))
        assert not any(q["sql"].lstrip().upper().startswith("DELETE") for q in queries)
    assert len(set(costs[1:])) == 1, costs
    sql = " ".join(q["sql"] for q in queries)
    assert re.search(r'UPDATE\s+"?portal_thread"?\s+SET', sql)  # the compare-and-swap
    assert not re.search(r'UPDATE\s+"?portal_checkpoint', sql)  # never an earlier checkpoint
    if connection.vendor == "postgresql":
        # (The test's transaction adds a savepoint around it.)
        work = [q for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
        assert len(work) == 1, "on PostgreSQL a step is one statement"


@pytest.mark.postgres
def test_two_writers_racing_from_the_same_checkpoint_cannot_both_append(transactional_db):
    thread = Thread.objects.create(agent="refunds")
    DjangoCheckpointer().put_sync(str(thread.pk), step(0), parent_seq=None)
    barrier = threading.Barrier(8)
    results: list[object] = []

    def writer(n: int) -> None:
        try:
            barrier.wait()
            results.append(DjangoCheckpointer().put_sync(str(thread.pk), step(n), parent_seq=1))
        except CheckpointConflict as exc:
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert results.count(2) == 1
    assert sum(isinstance(r, CheckpointConflict) for r in results) == 7
    seqs = Checkpoint.objects.filter(thread=thread).order_by("seq").values_list("seq", flat=True)
    assert list(seqs) == [1, 2]


@pytest.mark.django_db
def test_a_step_between_pauses_skips_the_queue_but_a_step_after_a_pause_syncs_it(thread):
    """Most steps of a run neither follow nor make a pause: they must not query the
    queue. The first step after a pause still takes stale requests out of it."""
    store = DjangoCheckpointer()
    seq = store.put_sync(str(thread.pk), step(0), parent_seq=None)

    with CaptureQueriesContext(connection) as queries:
        seq = store.put_sync(str(thread.pk), step(1), parent_seq=seq)
    assert not [q for q in queries if "portal_interrupt" in q["sql"]]

    seq = store.put_sync(str(thread.pk), pause(), parent_seq=seq)
    assert Interrupt.objects.get(pk=REQUEST["id"]).status == Interrupt.Status.PENDING
    # The step after the pause takes the request out of the queue...
    seq = store.put_sync(str(thread.pk), step(2), parent_seq=seq)
    assert Interrupt.objects.get(pk=REQUEST["id"]).status == Interrupt.Status.RESOLVED
    # ...and a fresh instance, which knows nothing of the thread's past, checks anyway.
    Interrupt.objects.filter(pk=REQUEST["id"]).update(status=Interrupt.Status.PENDING)
    DjangoCheckpointer().put_sync(str(thread.pk), step(3), parent_seq=seq)
    assert Interrupt.objects.get(pk=REQUEST["id"]).status == Interrupt.Status.RESOLVED


def test_an_own_connection_must_commit_each_statement(db):
    class Manual:
        autocommit = False

    with pytest.raises(ValueError, match="autocommit"):
        DjangoCheckpointer(connection=Manual())


@pytest.mark.postgres
def test_on_its_own_connection_a_pause_fills_the_queue_and_announces_it_after_commit(
    transactional_db, monkeypatch
):
    from asgiref.sync import async_to_sync

    thread = Thread.objects.create(agent="refunds", title="Broken mug")
    announced = []

    def send(group, message):
        # Sent after the statement committed: another connection already sees the row.
        seen = Interrupt.objects.filter(pk=message["interrupt_id"]).exists()
        announced.append((group, message, seen))

    monkeypatch.setattr(broadcast, "group_send", send)
    # As if a queue were open: with no socket subscribed nothing is rendered or sent.
    monkeypatch.setattr(broadcast, "listening", lambda *groups: [True for _ in groups])

    async def scenario():
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn)
        try:
            await store.aput(str(thread.pk), step(0), parent_seq=None)
            await store.aput(str(thread.pk), pause(), parent_seq=1)
            await store.aclose()  # (the pause ends a run: it is announced before the next)
            snapshot = await store.aget(str(thread.pk))
            await store.aput(str(thread.pk), step(2), parent_seq=2)  # leaves the queue
        finally:
            await store.aclose()  # waits for the announcements
            await conn.close()
        return snapshot

    snapshot = async_to_sync(scenario)()
    assert (snapshot.seq, snapshot.status, snapshot.interrupt["id"]) == (
        2,
        ThreadStatus.INTERRUPTED,
        "int_abc",
    )
    assert [m["id"] for m in snapshot.messages] == ["m0", "m0"]
    request = Interrupt.objects.get(pk="int_abc")
    assert (request.agent, request.checkpoint_seq, request.status) == ("refunds", 2, "resolved")
    assert [(g, m["interrupt_id"], m["status"], m["agent"], seen) for g, m, seen in announced] == [
        (broadcast.QUEUE_GROUP, "int_abc", "pending", "refunds", True),
        (broadcast.QUEUE_GROUP, "int_abc", "resolved", "refunds", True),
    ]
    entered, left = ("".join(m["html"]) for _, m, _ in announced)
    # Rendered by broadcast after the commit: the new row, then its removal with no row.
    assert 'id="q-int_abc"' in entered and "Broken mug" in entered and "Approve?" in entered
    assert 'class="queue-row"' not in left
    thread.refresh_from_db()
    assert (thread.last_seq, thread.status, thread.title) == (
        3,
        Thread.Status.RUNNING,
        "Broken mug",
    )


@pytest.mark.postgres
def test_on_its_own_connection_a_statement_carries_the_queues_part_only_when_it_may_need_it(
    transactional_db, monkeypatch
):
    """A step after one that was not a pause, which pauses nothing itself, cannot change
    the queue: its statement leaves the queue's part out (it costs the server the
    interrupt table's indexes even when it writes nothing). What the queue then holds is
    right after each kind of step, including a pause that replaces a pause and an
    instance that knows nothing of the thread."""
    import psycopg
    from asgiref.sync import async_to_sync, sync_to_async

    thread = Thread.objects.create(agent="refunds")
    tid = str(thread.pk)
    second = {**REQUEST, "id": "int_def", "key": "TOOL:call_2:0", "tool_call_id": "call_2"}
    sent = []
    execute = psycopg.AsyncCursor.execute

    async def watched(cursor, query, params=None, **kwargs):
        sent.append(query)
        return await execute(cursor, query, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", watched)
    monkeypatch.setattr(broadcast, "group_send", lambda group, message: None)
    statuses = sync_to_async(
        lambda: dict(Interrupt.objects.filter(thread=thread).values_list("id", "status"))
    )
    # (Left without a decision: not the history's, so not marked decided.)
    decided = sync_to_async(lambda: Interrupt.objects.filter(thread=thread, decided=True).count())
    reopen = sync_to_async(
        lambda: Interrupt.objects.filter(pk="int_def").update(status=Interrupt.Status.PENDING)
    )

    async def scenario():
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn)
        fresh = DjangoCheckpointer(connection=conn)
        seen = []
        try:
            await store.aput(tid, pause(), parent_seq=None)  # a first step that pauses
            seen.append(await statuses())
            await store.aput(tid, pause(interrupt=second), parent_seq=1)  # replaces it
            seen.append(await statuses())
            await store.aput(tid, step(3), parent_seq=2)  # the resume
            seen.append(await statuses())
            await store.aput(tid, step(4), parent_seq=3)  # known running: no queue part
            await reopen()
            await fresh.aput(tid, step(5), parent_seq=4)  # knows nothing: checks the queue
            seen.append(await statuses())
            seen.append(await decided())
        finally:
            await store.aclose()
            await fresh.aclose()
            await conn.close()
        return seen

    assert async_to_sync(scenario)() == [
        {"int_abc": "pending"},
        {"int_abc": "resolved", "int_def": "pending"},
        {"int_abc": "resolved", "int_def": "resolved"},
        {"int_abc": "resolved", "int_def": "resolved"},
        0,
    ]
    writes = [sql for sql in sent if "INSERT INTO portal_checkpoint" in sql]
    parts = [
        ("UPDATE portal_interrupt" in sql, "INSERT INTO portal_interrupt" in sql) for sql in writes
    ]
    assert parts == [(True, True), (True, True), (True, True), (False, False), (True, True)]


def test_the_postgresql_statements_fill_every_column_of_the_rows_they_insert():
    """The statements name their tables' columns by hand: a new model field must be
    added there too, or PostgreSQL writes would fail (SQLite's ORM path would not)."""
    from portal.runs import sql as checkpoint_sql

    def inserted(sql: str, table: str) -> set[str]:
        match = re.search(rf"INSERT INTO {table} \(([^)]*)\)", sql)
        assert match, f"no INSERT INTO {table}"
        return {c.strip() for c in match.group(1).split(",")}

    for model, sql in (
        (Thread, checkpoint_sql.MOVE_FIRST),
        (Checkpoint, checkpoint_sql.STEP),
        (Interrupt, checkpoint_sql.QUEUE),
        (Notification, checkpoint_sql.QUEUE),
    ):
        columns = {f.column for f in model._meta.concrete_fields}
        auto = {model._meta.pk.column} if model is Checkpoint else set()  # its serial id
        assert model._meta.db_table in sql
        assert inserted(sql, model._meta.db_table) == columns - auto, model.__name__


def test_the_claim_returns_every_column_of_the_run_by_name():
    """A new Run field must be named in the claim too, or the claimed run would read it
    with a query of its own (and a ``r.*`` would break the prepared claim, see
    tests/runs/test_worker_processes.py)."""
    from portal.runs import sql as queue_sql

    match = re.search(r"RETURNING ([^)]*)\n\)", queue_sql.CLAIM)
    assert match, "no RETURNING in the claim"
    returned = [c.strip() for c in match.group(1).split(",")]
    assert returned == [f"r.{f.column}" for f in Run._meta.concrete_fields]


@pytest.mark.postgres
def test_a_pause_on_a_thread_not_loaded_still_expires_by_its_agents_policy(
    transactional_db, settings, monkeypatch
):
    """A checkpointer that has not loaded the thread does not know its agent at the
    pause; a policy that names agents makes it look the agent up first."""
    from datetime import timedelta

    from asgiref.sync import async_to_sync

    monkeypatch.setattr(broadcast, "group_send", lambda group, message: None)
    settings.PORTAL_POLICIES = {"refunds:tool_approval": {"expires_after": 600}}
    thread = Thread.objects.create(agent="refunds")

    async def scenario() -> None:
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn)
        try:
            await store.aput_steps(str(thread.pk), [step(0), pause()], parent_seq=None)
        finally:
            await store.aclose()
            await conn.close()

    async_to_sync(scenario)()
    request = Interrupt.objects.get(pk="int_abc")
    assert request.agent == "refunds"
    left = request.expires_at - request.created_at
    assert timedelta(seconds=599) < left <= timedelta(seconds=600)


@pytest.mark.postgres
def test_on_its_own_connection_every_step_commits_durably(transactional_db, monkeypatch):
    """The runtime acts, and people are told, on what it wrote: a failed run's input (the
    run's failure is shown) as much as the write before a tool call. A trigger in this
    test's database notes ``synchronous_commit`` as each checkpoint's transaction sees it."""
    from asgiref.sync import async_to_sync

    from agents import ModelError, ReactAgent
    from tests.agents.conftest import FakeModel, call, say, user

    monkeypatch.setattr(broadcast, "group_send", lambda group, message: None)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE durability_seen (seq integer, setting text);"
            "CREATE FUNCTION note_durability() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO durability_seen VALUES (NEW.seq, current_setting('synchronous_commit'));"
            " RETURN NEW; END $$;"
            "CREATE TRIGGER note_durability AFTER INSERT ON portal_checkpoint"
            " FOR EACH ROW EXECUTE FUNCTION note_durability();"
        )
    failing, paused = Thread.objects.create(agent="refunds"), Thread.objects.create(agent="refunds")

    async def scenario() -> None:
        conn = await aconnect()
        try:
            down = ReactAgent(FakeModel(ModelError("the model is down")))
            with pytest.raises(ModelError):
                await down.compile(checkpointer=DjangoCheckpointer(connection=conn)).ainvoke(
                    user("hi"), {"thread_id": str(failing.pk)}
                )

            def issue_refund(order_id: str) -> str:
                """Refund an order."""
                return f"refunded {order_id}"

            model = FakeModel(call(("issue_refund", {"order_id": "A-1"})), say("Done."))
            graph = ReactAgent(model, tools=[issue_refund]).compile(
                checkpointer=DjangoCheckpointer(connection=conn)
            )
            await graph.ainvoke(user("refund A-1"), {"thread_id": str(paused.pk)})
        finally:
            await conn.close()

    try:
        async_to_sync(scenario)()
        with connection.cursor() as cursor:
            cursor.execute("SELECT setting, count(*) FROM durability_seen GROUP BY setting")
            seen = dict(cursor.fetchall())
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER note_durability ON portal_checkpoint;"
                "DROP FUNCTION note_durability(); DROP TABLE durability_seen;"
            )
    assert seen == {"on": 1 + 5}
