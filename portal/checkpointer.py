"""``DjangoCheckpointer``: the runtime's checkpointer protocol on the portal's tables.

Writing a step costs the same whatever the thread's length: a compare-and-swap on the
thread (``UPDATE thread SET last_seq = n + 1 WHERE id = X AND last_seq = n``) and one
INSERT of the step's delta. The UPDATE is the commit point and the lock: on PostgreSQL it
row-locks the thread, and a concurrent writer that built on the same ``n`` re-checks the
WHERE after the first commits, matches nothing and gets ``CheckpointConflict``; SQLite
serialises writers outright. Earlier rows are never touched.

When a step pauses, the ``Interrupt`` row (the reviewers' queue) is inserted in the same
transaction, so the queue can never show a request the checkpoint does not; pending rows
of the same thread that the new checkpoint no longer names leave the queue in that
transaction too. Queue broadcasts go out after the commit.

Two executors, one set of rules:

- On PostgreSQL each write is one SQL statement (``_PG_WRITES``: the compare-and-swap, the
  insert and the queue's changes as data-modifying CTEs, atomic as any statement) and a
  load is one SELECT. Round trips, not rows, are what a step costs, so this is the path
  that keeps a pause and a resume within a few milliseconds.
- On SQLite (the embedded demo) the same steps are ORM calls in one transaction.

The protocol is async. Given ``connection=`` (a psycopg ``AsyncConnection`` in
autocommit mode, see ``aconnect``), the async methods run their statements on it directly,
with no thread hop: the worker does this; they go through libpq itself, each prepared
once per connection (``portal.pg.fetch``). Without one they run the synchronous halves
through ``sync_to_async(thread_sensitive=True)``, on the caller's Django connection, so a
caller that holds a transaction (a test, a script) keeps its writes inside it.

Thread ids are strings in the runtime and UUIDs here. A UUID string maps to itself; any
other string (the contract suite's ``"t1"``) maps to a stable ``uuid5``, so every method
agrees on it. A write to a thread with no ``Thread`` row creates one on the first write
(``parent_seq=None``) with ``agent=""`` and no owner: the portal's own threads are created
by ``services.thread_start``, so only tests and scripts reach that path.

Recall. A worker passes the thread's seq as it read it when it took the run
(``expected_seq``), and the runtime then asks ``recall`` before it loads. This process
remembers the threads it last wrote durably on the worker's path (``RECENT``, a bounded
LRU): a resume taken by the worker that paused the thread needs no load. A recalled
thread is exactly what was committed at that seq, since checkpoints are append-only and a
durable commit is not lost (one that skipped the disk could be, and a seq then be written
again with other steps, so those are not remembered). That holds with the server's
``synchronous_commit`` on, as it ships; a failover to an asynchronous standby can lose
commits too, so the worker forgets everything when its connection breaks. That
the thread is still at that seq is checked by the compare-and-swap of the run's first
write, or by a load for a run that writes nothing (see ``agents.graph``). A thread at seq
0 has nothing to recall. Thread ids are not reused after a delete (the portal's are
random UUIDs); ``adelete`` forgets the thread here too.

``adelete`` removes the thread with its checkpoints, interrupts and runs; a thread with
recorded decisions is kept (``ProtectedError``), because decisions are an audit record.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection as django_connection
from django.db import transaction
from django.utils import timezone

from agents.checkpoint import (
    CheckpointConflict,
    CheckpointRecord,
    CheckpointWrite,
    Snapshot,
    ThreadStatus,
    compact_json,
    encode_step,
    step_values,
)
from portal import broadcast, pg
from portal.models import Checkpoint, Interrupt, Run, Thread
from portal.policies import expires_at_for, expiry_names_agents

log = logging.getLogger(__name__)

_THREAD_NAMESPACE = uuid.UUID("6f1c0a52-2d4e-4b8e-9a57-3c1f0d9e8b21")


@functools.lru_cache(maxsize=1024)
def thread_pk(thread_id: str) -> uuid.UUID:
    """The ``Thread`` primary key for a runtime thread id (each write needs it: the
    recent ones are kept)."""
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        return uuid.uuid5(_THREAD_NAMESPACE, str(thread_id))


@dataclass
class _Known:
    """What one checkpointer instance last read or wrote of a thread."""

    status: ThreadStatus | None  # the newest checkpoint's status; None: none yet
    agent: str | None = None  # None: not read (the ORM path does not need it)
    title: str = ""


@dataclass(frozen=True)
class _Held:
    """A thread as committed at ``seq``, kept as the JSON text it is stored as (so whoever
    recalls it gets fresh objects, and nobody can change it through them)."""

    seq: int
    status: ThreadStatus
    next_node: str | None
    messages: tuple[str, ...]  # each checkpoint's messages, a JSON array each, in order
    meta: str
    interrupt: str | None
    agent: str | None
    title: str
    history: int  # characters of the messages' JSON

    @property
    def size(self) -> int:
        """Characters of JSON held: the messages, meta and interrupt."""
        return self.history + len(self.meta) + len(self.interrupt or "")

    def snapshot(self, thread_id: str) -> Snapshot:
        messages: list[dict[str, Any]] = []
        for chunk in self.messages:
            messages.extend(json.loads(chunk) or [])
        return Snapshot(
            thread_id=thread_id,
            seq=self.seq,
            status=self.status,
            next_node=self.next_node,
            messages=messages,
            meta=json.loads(self.meta) if self.meta else {},
            interrupt=json.loads(self.interrupt) if self.interrupt else None,
        )

    def then(
        self, writes: Sequence[CheckpointWrite], step: _PgStep, *, agent: str | None, title: str
    ) -> _Held:
        """This thread after ``writes`` were appended by ``step``."""
        last = writes[-1]
        added = tuple(m for (m, _), w in zip(step.encoded, writes, strict=True) if w.new_messages)
        return _Held(
            seq=int(step.params["seq"]),
            status=ThreadStatus(last.status),
            next_node=last.next_node,
            messages=self.messages + added,
            meta=step.encoded[-1][1],
            interrupt=_dump(step.pending),
            agent=agent,
            title=title,
            history=self.history + sum(map(len, added)),
        )


# A thread with no checkpoint yet (seq 0), which the first write builds on.
_NOTHING = _Held(0, ThreadStatus.RUNNING, None, (), "", None, None, "", history=0)


class _Recent:
    """The threads this process last wrote durably on the worker's path, newest
    last, at most ``MAX_THREADS`` of them and ``MAX_BYTES`` of history in all."""

    MAX_THREADS = 512
    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._held: OrderedDict[uuid.UUID, _Held] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, pk: uuid.UUID, seq: int) -> _Held | None:
        with self._lock:
            held = self._held.get(pk)
            if held is None or held.seq != seq:
                return None
            self._held.move_to_end(pk)
            return held

    def put(self, pk: uuid.UUID, held: _Held) -> None:
        with self._lock:
            self._drop(pk)
            if held.size > self.MAX_BYTES // 8:
                return  # a history this long is loaded each time instead
            self._held[pk] = held
            self._bytes += held.size
            while len(self._held) > self.MAX_THREADS or self._bytes > self.MAX_BYTES:
                self._drop(next(iter(self._held)))

    def forget(self, pk: uuid.UUID) -> None:
        with self._lock:
            self._drop(pk)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._bytes = 0

    def _drop(self, pk: uuid.UUID) -> None:
        held = self._held.pop(pk, None)
        if held is not None:
            self._bytes -= held.size


RECENT = _Recent()


# --- PostgreSQL: one statement per load and per step --------------------------------------
# (The tables are the models' default names; tests/portal/test_checkpointer.py checks.)
# The whole history up to the thread's last_seq, in one consistent snapshot, with the
# newest row's fields. A thread with no checkpoint gives one row of NULLs; no thread, none.
_PG_LOAD = """
SELECT t.agent, t.title, c.seq, c.status, c.next_node, c.messages::text,
       CASE WHEN c.seq = t.last_seq THEN c.meta::text END,
       CASE WHEN c.seq = t.last_seq THEN c.interrupt::text END
FROM portal_thread t LEFT JOIN portal_checkpoint c ON c.thread_id = t.id AND c.seq <= t.last_seq
WHERE t.id = %(thread)s
ORDER BY c.seq
"""

# The compare-and-swap, as `moved`: the thread's row if it was still at the seq the step
# built on, else nothing (another writer moved it on). A thread's first step
# (parent_seq=None) creates the row or takes one still at 0, in the same statement.
_PG_MOVE = """
WITH moved AS (
    UPDATE portal_thread SET last_seq = %(seq)s, status = %(status)s, updated_at = %(now)s
    WHERE id = %(thread)s AND last_seq = %(expected)s
    RETURNING id, agent, title
)"""
_PG_MOVE_FIRST = """
WITH moved AS (
    INSERT INTO portal_thread (id, agent, status, owner_id, title, created_at, updated_at,
                               last_seq)
    VALUES (%(thread)s, '', %(status)s, NULL, '', %(now)s, %(now)s, %(seq)s)
    ON CONFLICT (id) DO UPDATE SET last_seq = EXCLUDED.last_seq, status = EXCLUDED.status,
                                   updated_at = EXCLUDED.updated_at
    WHERE portal_thread.last_seq = 0
    RETURNING id, agent, title
)"""

# The steps' rows (one JSON array of them, numbered on from the seq the write built on),
# inserted only if `moved` has the thread: a conflict writes nothing and reports 0 steps.
_PG_STEP = """, step AS (
    INSERT INTO portal_checkpoint (thread_id, seq, node, status, next_node, messages, meta,
                                   interrupt, interrupt_id, run_id, created_at)
    SELECT moved.id, %(expected)s + s.n, s.node, s.status, s.next_node, s.messages, s.meta,
           s.interrupt, s.interrupt_id, %(run)s, to_timestamp(s.at)
    FROM moved, ROWS FROM (
             jsonb_to_recordset(%(steps)s::jsonb) AS (node text, status text, next_node text,
                                                    messages jsonb, meta jsonb,
                                                    interrupt jsonb, interrupt_id text,
                                                    at double precision)
         ) WITH ORDINALITY AS s(node, status, next_node, messages, meta, interrupt,
                                interrupt_id, at, n)
    RETURNING seq
)"""

_PG_RESULT = " SELECT (SELECT count(*) FROM step), NULL, NULL, '[]', 0, {commit}"

# Keeping the queue equal to the checkpoint, in two parts a statement has only when they
# can change something (each part costs the server its table's indexes to set up, even when
# it writes no row): pending requests of the thread that the step no longer names leave
# the queue (``stale``: not on a thread's first step, which has no request yet), and the
# step's own request enters it (``entered``: only when the step pauses).
_PG_STALE = """, stale AS (
    UPDATE portal_interrupt SET status = %(resolved)s, resolved_at = %(now)s
    WHERE thread_id = %(thread)s AND status = %(pending)s AND id <> %(pending_key)s
      AND EXISTS (SELECT 1 FROM moved)
    RETURNING id, reason
)"""
_PG_ENTERED = """, entered AS (
    INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message, reason,
                                  response_schema, tool_call_id, tool, status, created_at,
                                  expires_at, claimed_by_id, claimed_at, resolved_at,
                                  decided, checkpoint_seq)
    SELECT %(pending_key)s, id, agent, %(key)s, %(request_node)s, %(value)s::jsonb,
           %(message)s, %(reason)s, %(schema)s::jsonb, %(tool_call_id)s, %(tool)s, %(pending)s,
           %(now)s, %(expires_at)s, NULL, NULL, NULL, false, %(seq)s
    FROM moved WHERE %(pending_key)s::varchar <> ''
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)"""
_PG_QUEUE_RESULT = """
SELECT (SELECT count(*) FROM step), (SELECT agent FROM moved), (SELECT title FROM moved),
       {stale}, {entered}, {commit}
"""
_PG_STALE_RESULT = {
    True: "(SELECT coalesce(json_agg(json_build_array(id, reason)), '[]')::text FROM stale)",
    False: "'[]'",
}
_PG_ENTERED_RESULT = {True: "(SELECT count(*) FROM entered)", False: "0"}

# How the statement's own transaction commits: as the server is set (durable steps), or,
# for a step that need not be durable, without waiting for the WAL to reach the disk. The
# setting is local to the statement's transaction; the step is visible and its
# compare-and-swap holds either way, and the next durable commit flushes it too (the WAL
# is written in order).
_PG_COMMIT = {True: "NULL", False: "set_config('synchronous_commit', 'off', true)"}


def _pg_write(first: bool, queue: tuple[bool, bool] | None, durable: bool) -> str:
    """The statement for a step: ``queue`` is None (no queue part) or (stale?, entered?).
    Constant strings joined, no input in them."""
    sql = (_PG_MOVE_FIRST if first else _PG_MOVE) + _PG_STEP
    commit = _PG_COMMIT[durable]
    if queue is None:
        return sql + _PG_RESULT.format(commit=commit)
    stale, entered = queue
    return (
        sql
        + (_PG_STALE if stale else "")
        + (_PG_ENTERED if entered else "")
        + _PG_QUEUE_RESULT.format(
            stale=_PG_STALE_RESULT[stale], entered=_PG_ENTERED_RESULT[entered], commit=commit
        )
    )


# Every statement a step can be: (first step?, queue part, durable?) -> SQL. A first step
# has no stale part.
_PG_QUEUE_PARTS: tuple[tuple[bool, bool] | None, ...] = (
    None,
    (False, False),
    (False, True),
    (True, False),
    (True, True),
)
_PG_WRITES = {
    (first, queue, durable): _pg_write(first, queue, durable)
    for first in (False, True)
    for queue in _PG_QUEUE_PARTS
    if not (first and queue is not None and queue[0])
    for durable in (False, True)
}
# The same, as the worker's connection sends them (``portal.pg.fetch``), with the types of
# the parameters that are not text.
_PG_TYPES = {
    "thread": pg.UUID,
    "run": pg.UUID,
    "expected": pg.INT4,
    "seq": pg.INT4,
    "now": pg.TIMESTAMPTZ,
    "expires_at": pg.TIMESTAMPTZ,
}
_PG_WIRE = {key: pg.Statement.of(sql, _PG_TYPES) for key, sql in _PG_WRITES.items()}

_PG_LAST_SEQ = "SELECT last_seq FROM portal_thread WHERE id = %(thread)s"
_PG_AGENT = "SELECT agent, title FROM portal_thread WHERE id = %(thread)s"
_PG_LOAD_WIRE, _PG_LAST_SEQ_WIRE, _PG_AGENT_WIRE = (
    pg.Statement.of(sql, _PG_TYPES) for sql in (_PG_LOAD, _PG_LAST_SEQ, _PG_AGENT)
)


def _dump(value: Any) -> str | None:
    return None if value is None else compact_json(value)


def _pending(write: CheckpointWrite) -> dict[str, Any] | None:
    """The request a step pauses on (only a pause names one)."""
    return write.interrupt if ThreadStatus(write.status) is ThreadStatus.INTERRUPTED else None


def _step_head(write: CheckpointWrite) -> dict[str, Any]:
    """The checkpoint columns a step fills itself, but its messages and meta."""
    pending = _pending(write)
    return {
        "node": write.node,
        "status": ThreadStatus(write.status).value,
        "next_node": write.next_node,
        "interrupt": pending,
        "interrupt_id": (pending or {}).get("id"),
    }


def _step_row(write: CheckpointWrite) -> dict[str, Any]:
    """The checkpoint columns a step fills itself (the ORM's; see ``_steps_json``)."""
    messages, meta = step_values(write)
    return {**_step_head(write), "messages": messages, "meta": meta}


def _steps_json(writes: Sequence[CheckpointWrite]) -> tuple[str, list[tuple[str, str]]]:
    """The steps' rows as one JSON array (for ``_PG_STEP``), and each step's messages and
    meta as JSON, which a step the runtime kept for later brings encoded already."""
    rows, encoded = [], []
    for write in writes:
        messages, meta = encode_step(write)
        head = compact_json({**_step_head(write), "at": write.at})
        rows.append(f'{head[:-1]},"messages":{messages},"meta":{meta}}}')
        encoded.append((messages, meta))
    return "[" + ",".join(rows) + "]", encoded


def _durable(writes: Sequence[CheckpointWrite]) -> bool:
    """Steps written together are durable if any of them must be."""
    return any(write.durable for write in writes)


@dataclass(frozen=True)
class _Titled:
    title: str


@dataclass(frozen=True)
class _Entered:
    """A request a step just put in the queue, as much of an ``Interrupt`` as its queue
    row shows (``portal_live.queue_row``): building a model instance cost more."""

    pk: str
    agent: str
    reason: str
    message: str
    created_at: datetime
    thread: _Titled
    claimed_by: None = None


@dataclass(frozen=True)
class _PgStep:
    """One step's statement and parameters, and what to make of its result."""

    key: tuple[bool, tuple[bool, bool] | None, bool]  # see _PG_WRITES
    params: dict[str, Any]
    pending: dict[str, Any] | None
    durable: bool = True
    encoded: Sequence[tuple[str, str]] = ()  # each step's messages and meta, as JSON


class DjangoCheckpointer:
    """Checkpoints in the portal's tables. ``run``, when given, is recorded on every
    checkpoint this instance writes (the worker uses it to recover crashed runs).
    ``connection``: a psycopg ``AsyncConnection`` (autocommit) for the async methods to
    use directly on PostgreSQL; see the module docstring."""

    def __init__(
        self, *, run: Run | None = None, connection: Any = None, thread: Thread | None = None
    ) -> None:
        if connection is not None and not connection.autocommit:
            raise ValueError(
                "DjangoCheckpointer(connection=...) needs an autocommit connection: each "
                "write is its own transaction (open it with portal.checkpointer.aconnect())"
            )
        self.run_id = run.pk if run is not None else None
        self._aconn = connection
        # What this instance last read or wrote of each thread. A write that follows a
        # step that was not a pause, and pauses nothing itself, cannot change the queue,
        # so it skips the queue's part (most steps are such).
        self._known: dict[uuid.UUID, _Known] = {}
        if thread is not None:  # the caller read the thread already (the worker does)
            self._known[thread.pk] = _Known(None, thread.agent, thread.title)
        # The threads as of what this instance last read or wrote on the async path, to
        # build what RECENT keeps (see "Recall" in the module docstring).
        self._held: dict[uuid.UUID, _Held] = {}
        # Queue broadcasts scheduled by the async path (awaited by aclose).
        self._announcing: set[asyncio.Task[None]] = set()

    # --- the async protocol -------------------------------------------------------------

    def recall(self, thread_id: str, seq: int | None) -> Snapshot | None:
        """The thread as of checkpoint ``seq`` without a round trip (see "Recall" in the
        module docstring); ``LookupError`` when this process does not hold it."""
        pk = thread_pk(thread_id)
        if self._aconn is None:
            raise LookupError(f"thread {thread_id}: recall is for the worker's path only")
        known = self._known.get(pk) or _Known(None)
        if not seq:
            self._known[pk] = _Known(None, known.agent, known.title)
            self._held[pk] = _NOTHING
            return None
        held = RECENT.get(pk, seq)
        if held is None:
            raise LookupError(f"thread {thread_id} at checkpoint {seq} is not held here")
        agent = held.agent if held.agent is not None else known.agent
        self._known[pk] = _Known(held.status, agent, held.title)
        self._held[pk] = held
        return held.snapshot(thread_id)

    async def aget(self, thread_id: str) -> Snapshot | None:
        if self._aconn is None:
            return await sync_to_async(self.get_sync, thread_sensitive=True)(thread_id)
        pk = thread_pk(thread_id)
        rows = await pg.fetch(self._aconn, _PG_LOAD_WIRE, {"thread": pk})
        return self._snapshot(thread_id, pk, rows)

    async def aput(self, thread_id: str, write: CheckpointWrite, *, parent_seq: int | None) -> int:
        return await self.aput_steps(thread_id, [write], parent_seq=parent_seq)

    async def aput_steps(
        self, thread_id: str, writes: Sequence[CheckpointWrite], *, parent_seq: int | None
    ) -> int:
        if not writes:
            raise ValueError("aput_steps needs at least one step")
        if self._aconn is None:
            put = partial(self.put_steps_sync, thread_id, writes, parent_seq=parent_seq)
            return await sync_to_async(put, thread_sensitive=True)()
        pk = thread_pk(thread_id)
        conn = self._aconn
        if self._needs_agent(pk, writes[-1]):
            self._remember(pk, await pg.fetch_first(conn, _PG_AGENT_WIRE, {"thread": pk}))
        step = self._pg_step(pk, writes, parent_seq, durable=_durable(writes))
        # While the server runs the statement, from what this instance knows of the
        # thread: the thread as it will be after the write (for recall), and a pause's
        # queue row. Both are corrected from the statement's answer should it differ, and
        # the row is announced only once the statement has committed.
        early: list[tuple[_Entered, str]] = []
        held: list[_Held | None] = []

        def meanwhile() -> None:
            held.append(self._next_held(pk, writes, parent_seq, step))
            if step.pending is not None:
                entered = self._entered(pk, step)
                early.append((entered, _row_html(entered)))

        row = await pg.fetch_first(conn, _PG_WIRE[step.key], step.params, meanwhile=meanwhile)
        if not row or not row[0]:
            self._held.pop(pk, None)
            RECENT.forget(pk)
            last = await pg.fetch_first(conn, _PG_LAST_SEQ_WIRE, {"thread": pk})
            raise CheckpointConflict(thread_id, parent_seq, _first(last))
        changes = self._pg_done(pk, step, row)
        self._hold_written(pk, writes, parent_seq, step, held)
        if changes:
            entered = self._entered(pk, step) if row[4] else None
            html = early[0][1] if entered is not None and early and early[0][0] == entered else None
            task = asyncio.get_running_loop().create_task(_announce(changes, entered, html))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)
        return int(step.params["seq"])

    async def alist(self, thread_id: str) -> list[CheckpointRecord]:
        return await sync_to_async(self.list_sync, thread_sensitive=True)(thread_id)

    async def adelete(self, thread_id: str) -> None:
        pk = thread_pk(thread_id)
        self._known.pop(pk, None)
        self._held.pop(pk, None)
        RECENT.forget(pk)
        await sync_to_async(self.delete_sync, thread_sensitive=True)(thread_id)

    async def aclose(self) -> None:
        # The connection belongs to whoever passed it (the worker keeps one for its life);
        # Django's own are closed by close_old_connections. Finish the announcements.
        if self._announcing:
            await asyncio.gather(*self._announcing, return_exceptions=True)

    # --- the synchronous halves, usable directly from sync code -----------------------

    def get_sync(self, thread_id: str) -> Snapshot | None:
        pk = thread_pk(thread_id)
        if django_connection.vendor == "postgresql":
            with django_connection.cursor() as cursor:
                cursor.execute(_PG_LOAD, {"thread": pk})
                return self._snapshot(thread_id, pk, cursor.fetchall())
        last = Checkpoint.objects.filter(thread_id=pk).order_by("-seq").first()
        if last is None:
            return None
        messages: list[dict[str, Any]] = []
        # Bounded by last.seq: a step appended meanwhile is not half-read.
        for chunk in (
            Checkpoint.objects.filter(thread_id=pk, seq__lte=last.seq)
            .order_by("seq")
            .values_list("messages", flat=True)
        ):
            messages.extend(chunk or [])
        self._known[pk] = _Known(ThreadStatus(last.status))
        return Snapshot(
            thread_id=thread_id,
            seq=last.seq,
            status=ThreadStatus(last.status),
            next_node=last.next_node,
            messages=messages,
            meta=last.meta or {},
            interrupt=last.interrupt,
        )

    def put_sync(self, thread_id: str, write: CheckpointWrite, *, parent_seq: int | None) -> int:
        return self.put_steps_sync(thread_id, [write], parent_seq=parent_seq)

    def put_steps_sync(
        self, thread_id: str, writes: Sequence[CheckpointWrite], *, parent_seq: int | None
    ) -> int:
        if not writes:
            raise ValueError("put_steps_sync needs at least one step")
        if django_connection.vendor == "postgresql":
            return self._put_pg_sync(thread_id, writes, parent_seq)
        pk = thread_pk(thread_id)
        expected = parent_seq or 0
        seq = expected + len(writes)
        status = ThreadStatus(writes[-1].status)
        now = timezone.now()
        with transaction.atomic():
            if parent_seq is None:
                Thread.objects.get_or_create(id=pk, defaults={"agent": ""})
            # The compare-and-swap that keeps two workers from forking one thread: the
            # UPDATE row-locks the thread, and whoever built on a stale seq matches nothing.
            moved = Thread.objects.filter(id=pk, last_seq=expected).update(
                last_seq=seq, status=status.value, updated_at=now
            )
            if not moved:
                actual = Thread.objects.filter(id=pk).values_list("last_seq", flat=True).first()
                raise CheckpointConflict(thread_id, parent_seq, actual or None)
            Checkpoint.objects.bulk_create(
                Checkpoint(
                    thread_id=pk,
                    seq=expected + n,
                    run_id=self.run_id,
                    created_at=datetime.fromtimestamp(write.at, tz=UTC),
                    **_step_row(write),
                )
                for n, write in enumerate(writes, start=1)
            )
            pending = _pending(writes[-1])
            if pending is not None or self._may_have_pending(pk):
                self._sync_queue(pk, seq, pending)
        self._known[pk] = _Known(status)
        return seq

    def _put_pg_sync(
        self, thread_id: str, writes: Sequence[CheckpointWrite], parent_seq: int | None
    ) -> int:
        pk = thread_pk(thread_id)
        # Alone, the statement is its own transaction. Inside a caller's transaction it
        # gets a savepoint, so a refused step leaves that transaction usable; and it is
        # durable, since how that transaction commits is the caller's business.
        inside = django_connection.in_atomic_block
        scope = transaction.atomic() if inside else nullcontext()
        with scope, django_connection.cursor() as cursor:
            if self._needs_agent(pk, writes[-1]):
                cursor.execute(_PG_AGENT, {"thread": pk})
                self._remember(pk, cursor.fetchone())
            step = self._pg_step(pk, writes, parent_seq, durable=_durable(writes) or inside)
            cursor.execute(_PG_WRITES[step.key], step.params)
            row = cursor.fetchone()
            if not row or not row[0]:
                cursor.execute(_PG_LAST_SEQ, {"thread": pk})
                raise CheckpointConflict(thread_id, parent_seq, _first(cursor.fetchone()))
        for change in self._pg_done(pk, step, row):
            transaction.on_commit(partial(broadcast.publish_queue_change, **change), robust=True)
        return int(step.params["seq"])

    # --- shared by both PostgreSQL executors --------------------------------------------

    def _snapshot(self, thread_id: str, pk: uuid.UUID, rows: Sequence[Any]) -> Snapshot | None:
        """The thread from ``_PG_LOAD``'s rows; what is known of it is noted, and held as
        the base of this instance's next write (not in RECENT: what a load finds may be a
        commit that skipped the disk)."""
        if not rows:
            # No thread row: the first write creates one, with no agent (see the module's
            # docstring), so there is none to look up before it.
            self._known[pk] = _Known(None, "", "")
            self._held[pk] = _NOTHING
            return None
        agent, title = rows[0][0], rows[0][1]
        if rows[0][2] is None:
            self._known[pk] = _Known(None, agent, title)
            self._held[pk] = _NOTHING
            return None
        chunks = tuple(row[5] for row in rows)
        _agent, _title, seq, status, next_node, _messages, meta, interrupt = rows[-1]
        held = _Held(
            seq=seq,
            status=ThreadStatus(status),
            next_node=next_node,
            messages=chunks,
            meta=meta or "",
            interrupt=interrupt,
            agent=agent,
            title=title or "",
            history=sum(map(len, chunks)),
        )
        self._known[pk] = _Known(held.status, agent, title)
        self._held[pk] = held
        return held.snapshot(thread_id)

    def _next_held(
        self,
        pk: uuid.UUID,
        writes: Sequence[CheckpointWrite],
        parent_seq: int | None,
        step: _PgStep,
    ) -> _Held | None:
        """The thread as it will be once ``writes`` are in, if this instance held it at
        the seq they build on (None otherwise)."""
        base = self._held.get(pk)
        if base is None or base.seq != (parent_seq or 0):
            return None
        known = self._known.get(pk) or _Known(None, base.agent, base.title)
        return base.then(writes, step, agent=known.agent, title=known.title)

    def _hold_written(
        self,
        pk: uuid.UUID,
        writes: Sequence[CheckpointWrite],
        parent_seq: int | None,
        step: _PgStep,
        early: list[_Held | None],
    ) -> None:
        """Follow the thread through a write built on what this instance held; only a
        durable one reaches RECENT (a commit that skipped the disk could yet be lost).
        ``early`` has ``_next_held`` as worked out while the statement ran, unless it did
        not run: then it is worked out now. The statement says the thread's agent and
        title, which the early one may not have known."""
        held = early[0] if early else self._next_held(pk, writes, parent_seq, step)
        if held is None:
            self._held.pop(pk, None)
            return
        known = self._known[pk]  # (``_pg_done`` set it from the statement's answer)
        if (held.agent, held.title) != (known.agent, known.title):
            held = replace(held, agent=known.agent, title=known.title)
        self._held[pk] = held
        if step.durable:
            RECENT.put(pk, held)

    def _needs_agent(self, pk: uuid.UUID, write: CheckpointWrite) -> bool:
        """A pause needs the thread's agent before its statement, for the request's expiry
        policy, when a policy for its reason names agents; a load normally brought it."""
        if write.status is not ThreadStatus.INTERRUPTED:
            return False
        known = self._known.get(pk)
        if known is not None and known.agent is not None:
            return False
        return expiry_names_agents((write.interrupt or {}).get("reason") or "input_required")

    def _remember(self, pk: uuid.UUID, row: Any) -> None:
        """Record the thread's agent and title (``row``) next to what was known."""
        agent, title = row if row else ("", "")
        known = self._known.get(pk)
        self._known[pk] = _Known(known.status if known else None, agent, title)

    def _may_have_pending(self, pk: uuid.UUID) -> bool:
        """Whether the thread may have a pending request: unless this instance knows its
        last status, and it was not a pause (each write that is not a pause resolves the
        thread's pending requests, and only a pause makes one)."""
        known = self._known.get(pk)
        previous = known.status if known is not None else None
        return previous in (None, ThreadStatus.INTERRUPTED)

    def _pg_step(
        self,
        pk: uuid.UUID,
        writes: Sequence[CheckpointWrite],
        parent_seq: int | None,
        *,
        durable: bool,
    ) -> _PgStep:
        """The statement for ``writes`` (one or more steps, appended in one go)."""
        last = writes[-1]
        status = ThreadStatus(last.status)
        pending = _pending(last)
        expected = parent_seq or 0
        now = timezone.now()
        steps, encoded = _steps_json(writes)
        params: dict[str, Any] = {
            "thread": pk,
            "expected": expected,
            "seq": expected + len(writes),
            "status": status.value,
            "now": now,
            "steps": steps,
            "run": self.run_id,
        }
        first = parent_seq is None
        # A thread's first step has no request to resolve yet.
        stale = not first and self._may_have_pending(pk)
        if not stale and pending is None:
            return _PgStep((first, None, durable), params, pending, durable, encoded)
        request = pending or {}
        reason = request.get("reason") or "input_required"
        known = self._known.get(pk)
        agent = known.agent if known is not None and known.agent is not None else ""
        params.update(
            pending_key=request.get("id") or "",
            resolved=Interrupt.Status.RESOLVED.value,
            pending=Interrupt.Status.PENDING.value,
            key=request.get("key") or "",
            request_node=request.get("node") or "",
            value=_dump(request.get("value")),
            message=request.get("message") or "",
            reason=reason,
            schema=_dump(request.get("response_schema")),
            tool_call_id=request.get("tool_call_id"),
            tool=request.get("tool") or "",
            expires_at=expires_at_for(agent, reason, now=now) if pending else None,
        )
        queue = (stale, pending is not None)
        return _PgStep((first, queue, durable), params, pending, durable, encoded)

    def _pg_done(self, pk: uuid.UUID, step: _PgStep, row: Sequence[Any]) -> list[dict[str, Any]]:
        """Remember the step; the queue changes to announce once it is committed."""
        _count, agent, title, stale_json, entered = row[:5]
        known = self._known.get(pk)
        if agent is None:  # the queue's part did not run: the thread is as it was
            agent, title = (known.agent, known.title) if known is not None else (None, "")
        self._known[pk] = _Known(ThreadStatus(step.params["status"]), agent, title or "")
        base = {"thread_id": pk, "agent": agent or ""}
        changes = [
            {**base, "interrupt_id": i, "reason": reason, "status": Interrupt.Status.RESOLVED.value}
            for i, reason in (json.loads(stale_json) if stale_json != "[]" else ())
        ]
        if entered and step.pending is not None:
            changes.append(
                {
                    **base,
                    "interrupt_id": step.params["pending_key"],
                    "reason": step.params["reason"],
                    "status": Interrupt.Status.PENDING.value,
                }
            )
        return changes

    def _entered(self, pk: uuid.UUID, step: _PgStep) -> _Entered:
        """The queue row the step inserted, as what its rendering reads."""
        known = self._known.get(pk) or _Known(None)
        params = step.params
        return _Entered(
            pk=params["pending_key"],
            agent=known.agent or "",
            reason=params["reason"],
            message=params["message"],
            created_at=params["now"],
            thread=_Titled(known.title),
        )

    # --- SQLite: the ORM ----------------------------------------------------------------

    def _sync_queue(self, pk: uuid.UUID, seq: int, pending: dict[str, Any] | None) -> None:
        # Keep the queue equal to what the checkpoint says: requests the new step no longer
        # names leave it (normally the decision service resolved them already), the new
        # one enters it. The partial index on pending rows keeps this independent of the
        # thread's length.
        pending_id = (pending or {}).get("id")
        stale = list(
            Interrupt.objects.filter(thread_id=pk, status=Interrupt.Status.PENDING)
            .exclude(id=pending_id or "")
            .values_list("id", "reason")
        )
        if not stale and not pending_id:
            return  # the usual step: nothing enters or leaves the queue
        agent = Thread.objects.filter(id=pk).values_list("agent", flat=True).get()
        if stale:
            Interrupt.objects.filter(id__in=[i for i, _ in stale]).update(
                status=Interrupt.Status.RESOLVED, resolved_at=timezone.now()
            )
        changes = [(i, reason, Interrupt.Status.RESOLVED.value) for i, reason in stale]
        if pending is not None and pending_id:
            reason = pending.get("reason") or "input_required"
            _, created = Interrupt.objects.get_or_create(
                id=pending_id,
                defaults={
                    "thread_id": pk,
                    "agent": agent,
                    "key": pending.get("key") or "",
                    "node": pending.get("node") or "",
                    "value": pending.get("value"),
                    "message": pending.get("message") or "",
                    "reason": reason,
                    "response_schema": pending.get("response_schema"),
                    "tool_call_id": pending.get("tool_call_id"),
                    "tool": pending.get("tool") or "",
                    "checkpoint_seq": seq,
                    "expires_at": expires_at_for(agent, reason),
                },
            )
            if created:
                changes.append((pending_id, reason, Interrupt.Status.PENDING.value))
        for interrupt_id, reason, status in changes:
            transaction.on_commit(
                partial(
                    broadcast.publish_queue_change,
                    interrupt_id=interrupt_id,
                    thread_id=pk,
                    agent=agent,
                    reason=reason,
                    status=status,
                ),
                robust=True,
            )

    def list_sync(self, thread_id: str) -> list[CheckpointRecord]:
        rows = Checkpoint.objects.filter(thread_id=thread_pk(thread_id)).order_by("seq")
        return [
            CheckpointRecord(
                seq=row.seq,
                node=row.node,
                status=ThreadStatus(row.status),
                next_node=row.next_node,
                message_count=len(row.messages or []),
                interrupt_id=row.interrupt_id,
                created_at=row.created_at.timestamp(),
            )
            for row in rows
        ]

    def delete_sync(self, thread_id: str) -> None:
        Thread.objects.filter(id=thread_pk(thread_id)).delete()


def _first(row: Any) -> int | None:
    return (row[0] or None) if row else None


def _row_html(entered: _Entered) -> str:
    """The queue row of a request a step put in the queue, or "" if it cannot be rendered
    (the watchers then re-fetch their queue)."""
    try:
        return broadcast.render_queue_item(entered)
    except Exception:
        log.warning("rendering the queue row of %s failed", entered.pk, exc_info=True)
        return ""


async def _announce(
    changes: list[dict[str, Any]], entered: _Entered | None, rendered: str | None = None
) -> None:
    """Queue broadcasts for a step written on the async path (already committed). A task
    on the run's own loop. It neither queries nor leaves the loop: the new row is
    ``rendered`` already (while the statement ran), or renders from what the step wrote
    (work in another thread would fight the run for the GIL)."""
    for change in changes:
        html = ""
        if entered is not None and change["interrupt_id"] == entered.pk:
            html = _row_html(entered) if rendered is None else rendered
        await broadcast.agroup_send(
            broadcast.QUEUE_GROUP, broadcast.queue_changed(**change, html=html)
        )


async def aconnect() -> Any:
    """A new autocommit psycopg ``AsyncConnection`` to Django's PostgreSQL database, for
    ``DjangoCheckpointer(connection=...)``. The caller closes it."""
    import psycopg

    from portal.pg import connect_kwargs

    return await psycopg.AsyncConnection.connect(**connect_kwargs(), autocommit=True)
