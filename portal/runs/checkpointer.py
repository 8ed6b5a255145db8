"""``DjangoCheckpointer``: the runtime's checkpointer protocol on the portal's tables.

A step is a compare-and-swap on the thread's ``last_seq`` and one INSERT of its delta (on
PostgreSQL one statement, ``portal.runs.sql``; on SQLite ORM calls in one transaction); a
pause's request enters the queue, with its outbox row, in the same write. Given
``connection=`` (an autocommit psycopg ``AsyncConnection``, ``portal.models.db.aconnect``:
the worker's) the async methods write through it; otherwise through the caller's Django
connection. docs/architecture.md (## runs, Checkpointing) tells the rules.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
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
)
from portal.models import Checkpoint, Interrupt, Notification, Run, Thread, conversation, waiting
from portal.models.policies import expires_at_for, expiry_names_agents
from portal.notify import broadcast, outbox
from portal.runs import sql

_THREAD_NAMESPACE = uuid.UUID("6f1c0a52-2d4e-4b8e-9a57-3c1f0d9e8b21")


@functools.lru_cache(maxsize=1024)
def thread_pk(thread_id: str) -> uuid.UUID:
    """The ``Thread`` primary key for a runtime thread id (each write needs it: the
    recent ones are kept)."""
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        return uuid.uuid5(_THREAD_NAMESPACE, str(thread_id))


class ThreadCancelled(CheckpointConflict):
    """The thread was cancelled (``services.thread_cancel``): none of its steps is written
    again, so a tool call that was about to be recorded never runs."""

    def __init__(self, thread_id: str, expected: int | None) -> None:
        Exception.__init__(
            self,
            f"thread {thread_id!r} was cancelled: no further step of it is recorded, and "
            "nothing it was about to do runs",
        )
        self.thread_id, self.expected, self.actual = thread_id, expected, expected


def _refused(thread_id: str, parent_seq: int | None, found: Sequence[Any] | None) -> Exception:
    actual, cancelled = found or (None, False)
    if cancelled:
        return ThreadCancelled(thread_id, parent_seq)
    return CheckpointConflict(thread_id, parent_seq, actual)


@dataclass
class _Known:
    """What one checkpointer instance last read or wrote of a thread."""

    status: ThreadStatus | None  # the newest checkpoint's status; None: not known
    agent: str | None = None  # None: not read


def _dump(value: Any) -> str | None:
    return None if value is None else compact_json(value)


def _summary(request: dict[str, Any]) -> str:
    # The runtime keeps a summary to one line of the column's size; a request written by
    # an older or foreign runtime is cut to fit rather than failing its step.
    summary = request.get("summary")
    return " ".join(summary.split())[:200] if isinstance(summary, str) else ""


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


def _steps_json(writes: Sequence[CheckpointWrite]) -> str:
    """The steps' rows as one JSON array, for ``checkpoint_sql.STEP``."""
    rows = []
    for write in writes:
        messages, meta = encode_step(write)
        head = compact_json({**_step_head(write), "at": write.at})
        rows.append(f'{head[:-1]},"messages":{messages},"meta":{meta}}}')
    return "[" + ",".join(rows) + "]"


@dataclass(frozen=True)
class _Step:
    """One write's statement and parameters."""

    sql: str
    params: dict[str, Any]
    pending: dict[str, Any] | None


class DjangoCheckpointer:
    """Checkpoints in the portal's tables. ``run``, when given, is recorded on every
    checkpoint this instance writes (the worker uses it to recover crashed runs).
    ``connection``: a psycopg ``AsyncConnection`` (autocommit) for the async methods to
    use directly on PostgreSQL; ``thread``: the thread's row, when the caller has read it
    already (the worker has). See the module docstring."""

    def __init__(
        self, *, run: Run | None = None, connection: Any = None, thread: Thread | None = None
    ) -> None:
        if connection is not None and not connection.autocommit:
            raise ValueError(
                "DjangoCheckpointer(connection=...) needs an autocommit connection: each "
                "write is its own transaction (open it with portal.models.db.aconnect())"
            )
        self.run_id = run.pk if run is not None else None
        self._aconn = connection
        # What this instance last read or wrote of each thread: a write after a step that
        # was not a pause, and pausing nothing itself, skips the queue's part.
        self._known: dict[uuid.UUID, _Known] = {}
        if thread is not None:
            self._known[thread.pk] = _Known(None, thread.agent)
        # Queue announcements scheduled by the async path (awaited by aclose).
        self._announcing: set[asyncio.Future[None]] = set()

    # --- the async protocol -------------------------------------------------------------

    async def aget(self, thread_id: str) -> Snapshot | None:
        if self._aconn is None:
            return await sync_to_async(self.get_sync, thread_sensitive=True)(thread_id)
        pk = thread_pk(thread_id)
        async with self._aconn.cursor() as cursor:
            await cursor.execute(sql.LOAD, {"thread": pk})
            return self._snapshot(thread_id, pk, await cursor.fetchall())

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
        async with self._aconn.cursor() as cursor:
            if self._needs_agent(pk, writes[-1]):
                await cursor.execute(sql.AGENT, {"thread": pk})
                self._known[pk] = _Known(None, ((await cursor.fetchone()) or ("",))[0])
            step = self._step(pk, writes, parent_seq)
            await cursor.execute(step.sql, step.params)
            row = await cursor.fetchone()
            if not row or not row[0]:
                await cursor.execute(sql.REFUSED, {"thread": pk})
                raise _refused(thread_id, parent_seq, await cursor.fetchone())
        changes = self._done(pk, step, row)
        if changes:  # committed already: the connection is in autocommit mode
            sent = asyncio.ensure_future(broadcast.apublish_queue_changes(changes))
            self._announcing.add(sent)
            sent.add_done_callback(self._announcing.discard)
        return int(step.params["seq"])

    async def alist(self, thread_id: str) -> list[CheckpointRecord]:
        return await sync_to_async(self.list_sync, thread_sensitive=True)(thread_id)

    async def adelete(self, thread_id: str) -> None:
        self._known.pop(thread_pk(thread_id), None)
        await sync_to_async(self.delete_sync, thread_sensitive=True)(thread_id)

    async def aclose(self) -> None:
        # The connection is the caller's (the worker keeps one for its life).
        if self._announcing:
            await asyncio.gather(*self._announcing, return_exceptions=True)

    # --- the synchronous halves, usable directly from sync code -----------------------

    def get_sync(self, thread_id: str) -> Snapshot | None:
        pk = thread_pk(thread_id)
        if django_connection.vendor == "postgresql":
            with django_connection.cursor() as cursor:
                cursor.execute(sql.LOAD, {"thread": pk})
                return self._snapshot(thread_id, pk, cursor.fetchall())
        # One query, so a step appended meanwhile is not half-read.
        fields = ("seq", "status", "next_node", "messages", "meta", "interrupt")
        query = Checkpoint.objects.filter(thread_id=pk).order_by("seq")
        rows: list[Any] = list(query.values_list(*fields))
        if not rows:
            return None
        seq, status, next_node, _, meta, interrupt = rows[-1]
        self._known[pk] = _Known(ThreadStatus(status))
        messages = conversation(row[3] for row in rows)
        return Snapshot(
            thread_id, seq, ThreadStatus(status), next_node, messages, meta or {}, interrupt
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
        return self._put_orm(thread_id, writes, parent_seq)

    def _put_pg_sync(
        self, thread_id: str, writes: Sequence[CheckpointWrite], parent_seq: int | None
    ) -> int:
        pk = thread_pk(thread_id)
        # Alone, the statement is its own transaction. Inside a caller's transaction it
        # gets a savepoint, so a refused step leaves that transaction usable.
        scope = transaction.atomic() if django_connection.in_atomic_block else nullcontext()
        with scope, django_connection.cursor() as cursor:
            if self._needs_agent(pk, writes[-1]):
                cursor.execute(sql.AGENT, {"thread": pk})
                self._known[pk] = _Known(None, (cursor.fetchone() or ("",))[0])
            step = self._step(pk, writes, parent_seq)
            cursor.execute(step.sql, step.params)
            row = cursor.fetchone()
            if not row or not row[0]:
                cursor.execute(sql.REFUSED, {"thread": pk})
                raise _refused(thread_id, parent_seq, cursor.fetchone())
        for change in self._done(pk, step, row):
            transaction.on_commit(partial(broadcast.publish_queue_change, **change), robust=True)
        return int(step.params["seq"])

    # --- PostgreSQL: building a step's statement and reading its answer -----------------

    def _snapshot(self, thread_id: str, pk: uuid.UUID, rows: Sequence[Any]) -> Snapshot | None:
        """The thread from ``sql.LOAD``'s rows; what is known of it is noted."""
        if not rows:
            # No thread row: the first write creates one, with no agent (see the module's
            # docstring), so there is none to look up before it.
            self._known[pk] = _Known(None, "")
            return None
        agent = rows[0][0]
        if rows[0][1] is None:
            self._known[pk] = _Known(None, agent)
            return None
        messages = conversation(json.loads(row[4]) for row in rows)
        _agent, seq, status, next_node, _messages, meta, interrupt = rows[-1]
        self._known[pk] = _Known(ThreadStatus(status), agent)
        meta, interrupt = json.loads(meta or "{}"), json.loads(interrupt or "null")
        return Snapshot(thread_id, seq, ThreadStatus(status), next_node, messages, meta, interrupt)

    def _needs_agent(self, pk: uuid.UUID, write: CheckpointWrite) -> bool:
        """A pause needs the thread's agent before its statement, for the request's expiry
        policy, when a policy for its reason names agents; a load normally brought it."""
        if write.status is not ThreadStatus.INTERRUPTED:
            return False
        known = self._known.get(pk)
        if known is not None and known.agent is not None:
            return False
        return expiry_names_agents((write.interrupt or {}).get("reason") or "input_required")

    def _may_have_pending(self, pk: uuid.UUID) -> bool:
        """Whether the thread may have a pending request: unless this instance knows its
        last status, and it was not a pause (each write that is not a pause resolves the
        thread's pending requests, and only a pause makes one)."""
        known = self._known.get(pk)
        previous = known.status if known is not None else None
        return previous in (None, ThreadStatus.INTERRUPTED)

    def _step(
        self, pk: uuid.UUID, writes: Sequence[CheckpointWrite], parent_seq: int | None
    ) -> _Step:
        """The statement for ``writes`` (one or more steps, appended in one go)."""
        last = writes[-1]
        pending = _pending(last)
        expected = parent_seq or 0
        now = timezone.now()
        params: dict[str, Any] = {
            "thread": pk,
            "expected": expected,
            "seq": expected + len(writes),
            "status": ThreadStatus(last.status).value,
            "now": now,
            "steps": _steps_json(writes),
            "run": self.run_id,
        }
        first = parent_seq is None
        # A thread's first step has no request to resolve yet.
        if pending is None and (first or not self._may_have_pending(pk)):
            return _Step(sql.WRITES[first, False], params, None)
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
            summary=_summary(request),
            expires_at=expires_at_for(agent, reason, now=now) if pending else None,
            created_kind=outbox.REQUEST_CREATED,
            wake_channel=waiting.CHANNEL,
            wake_key=waiting.OUTBOX_KEY,
        )
        return _Step(sql.WRITES[first, True], params, pending)

    def _done(self, pk: uuid.UUID, step: _Step, row: Sequence[Any]) -> list[dict[str, Any]]:
        """Note the step; the queue changes to announce once it is committed."""
        _count, agent, stale_json, entered = row[:4]
        known = self._known.get(pk)
        if agent is None:  # the queue's part did not run: the thread is as it was
            agent = known.agent if known is not None else None
        self._known[pk] = _Known(ThreadStatus(step.params["status"]), agent)
        changes = [(i, reason, Interrupt.Status.RESOLVED) for i, reason in json.loads(stale_json)]
        if entered and step.pending is not None:
            changes.append(
                (step.params["pending_key"], step.params["reason"], Interrupt.Status.PENDING)
            )
        base = {"thread_id": pk, "agent": agent or ""}
        return [
            {**base, "interrupt_id": i, "reason": reason, "status": status.value}
            for i, reason, status in changes
        ]

    # --- SQLite: the ORM ----------------------------------------------------------------

    def _put_orm(
        self, thread_id: str, writes: Sequence[CheckpointWrite], parent_seq: int | None
    ) -> int:
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
            # A cancelled thread matches nothing either (see sql.MOVE).
            moved = Thread.objects.filter(
                id=pk, last_seq=expected, cancelled_at__isnull=True
            ).update(last_seq=seq, status=status.value, updated_at=now)
            if not moved:
                found = Thread.objects.filter(id=pk).values_list("last_seq", "cancelled_at")
                actual, cancelled = found.first() or (None, None)
                raise _refused(thread_id, parent_seq, (actual or None, cancelled is not None))
            Checkpoint.objects.bulk_create(
                Checkpoint(
                    thread_id=pk,
                    seq=expected + n,
                    run_id=self.run_id,
                    created_at=datetime.fromtimestamp(write.at, tz=UTC),
                    messages=list(write.new_messages),
                    meta=dict(write.meta),
                    **_step_head(write),
                )
                for n, write in enumerate(writes, start=1)
            )
            pending = _pending(writes[-1])
            if pending is not None or self._may_have_pending(pk):
                self._sync_queue(pk, seq, pending)
        self._known[pk] = _Known(status)
        return seq

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
        changes = [(i, reason, Interrupt.Status.RESOLVED) for i, reason in stale]
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
                    "summary": _summary(pending),
                    "checkpoint_seq": seq,
                    "expires_at": expires_at_for(agent, reason),
                },
            )
            if created:
                changes.append((pending_id, reason, Interrupt.Status.PENDING))
                # The new request's event, in the transaction that queues it.
                Notification.objects.create(
                    kind=outbox.REQUEST_CREATED,
                    agent=agent,
                    reason=reason,
                    interrupt_id=pending_id,
                    thread_id=pk,
                )
                outbox.wake_on_commit()
        for i, reason, status in changes:
            change: dict[str, Any] = {"interrupt_id": i, "thread_id": pk, "reason": reason}
            announce = partial(
                broadcast.publish_queue_change, **change, agent=agent, status=status.value
            )
            transaction.on_commit(announce, robust=True)

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
