"""``DjangoCheckpointer``: the runtime's checkpointer protocol on the Django ORM.

Writing a step costs two statements whatever the thread's length: a conditional
``UPDATE thread SET last_seq = n + 1 WHERE id = X AND last_seq = n`` and one INSERT of the
step's delta. The UPDATE is the commit point and the lock: on PostgreSQL it row-locks the
thread, and a concurrent writer that built on the same ``n`` re-checks the WHERE after the
first commits, matches nothing and gets ``CheckpointConflict``; SQLite serialises writers
outright. Earlier rows are never touched.

When a step pauses, the ``Interrupt`` row (the reviewers' queue) is inserted in the same
transaction, so the queue can never show a request the checkpoint does not; pending rows
of the same thread that the new checkpoint no longer names leave the queue in that
transaction too. Queue broadcasts go out on commit.

Thread ids are strings in the runtime and UUIDs here. A UUID string maps to itself; any
other string (the contract suite's ``"t1"``) maps to a stable ``uuid5``, so every method
agrees on it. A write to a thread with no ``Thread`` row creates one on the first write
(``parent_seq=None``) with ``agent=""`` and no owner: the portal's own threads are created
by ``services.thread_start``, so only tests and scripts reach that path.

``adelete`` removes the thread with its checkpoints, interrupts and runs; a thread with
recorded decisions is kept (``ProtectedError``), because decisions are an audit record.

The protocol is async; the ORM is sync. Each method runs its ORM work through
``sync_to_async(thread_sensitive=True)``: under the worker (which drives the graph with
``async_to_sync``) that is the worker's own thread and database connection, so a run's
reads and writes share one connection and one transaction discipline.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from agents.checkpoint import (
    CheckpointConflict,
    CheckpointRecord,
    CheckpointWrite,
    Snapshot,
    ThreadStatus,
)
from portal import broadcast
from portal.models import Checkpoint, Interrupt, Run, Thread
from portal.policies import expires_at_for

_THREAD_NAMESPACE = uuid.UUID("6f1c0a52-2d4e-4b8e-9a57-3c1f0d9e8b21")


def thread_pk(thread_id: str) -> uuid.UUID:
    """The ``Thread`` primary key for a runtime thread id."""
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        return uuid.uuid5(_THREAD_NAMESPACE, str(thread_id))


class DjangoCheckpointer:
    """Checkpoints in the portal's tables. ``run``, when given, is recorded on every
    checkpoint this instance writes (the worker uses it to recover crashed runs)."""

    def __init__(self, *, run: Run | None = None) -> None:
        self.run_id = run.pk if run is not None else None
        # Status of each thread's newest checkpoint as this instance last read or wrote
        # it. A write that follows a step that was not a pause, and pauses nothing itself,
        # cannot change the queue, so it skips the queue's query (most steps are such).
        self._known_status: dict[uuid.UUID, ThreadStatus] = {}

    async def aget(self, thread_id: str) -> Snapshot | None:
        return await sync_to_async(self.get_sync, thread_sensitive=True)(thread_id)

    async def aput(self, thread_id: str, write: CheckpointWrite, *, parent_seq: int | None) -> int:
        put = partial(self.put_sync, thread_id, write, parent_seq=parent_seq)
        return await sync_to_async(put, thread_sensitive=True)()

    async def alist(self, thread_id: str) -> list[CheckpointRecord]:
        return await sync_to_async(self.list_sync, thread_sensitive=True)(thread_id)

    async def adelete(self, thread_id: str) -> None:
        await sync_to_async(self.delete_sync, thread_sensitive=True)(thread_id)

    async def aclose(self) -> None:
        # Connections belong to Django (closed by close_old_connections in the worker).
        return None

    # --- the synchronous halves, usable directly from sync code -----------------------

    def get_sync(self, thread_id: str) -> Snapshot | None:
        pk = thread_pk(thread_id)
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
        self._known_status[pk] = ThreadStatus(last.status)
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
        pk = thread_pk(thread_id)
        expected = parent_seq or 0
        seq = expected + 1
        status = ThreadStatus(write.status)
        pending = write.interrupt if status is ThreadStatus.INTERRUPTED else None
        with transaction.atomic():
            if parent_seq is None:
                Thread.objects.get_or_create(id=pk, defaults={"agent": ""})
            # The compare-and-swap that keeps two workers from forking one thread: the
            # UPDATE row-locks the thread, and whoever built on a stale seq matches nothing.
            moved = Thread.objects.filter(id=pk, last_seq=expected).update(
                last_seq=seq, status=status.value, updated_at=timezone.now()
            )
            if not moved:
                actual = Thread.objects.filter(id=pk).values_list("last_seq", flat=True).first()
                raise CheckpointConflict(thread_id, parent_seq, actual or None)
            Checkpoint.objects.create(
                thread_id=pk,
                seq=seq,
                node=write.node,
                status=status.value,
                next_node=write.next_node,
                messages=list(write.new_messages),
                meta=dict(write.meta),
                interrupt=pending,
                interrupt_id=(pending or {}).get("id"),
                run_id=self.run_id,
            )
            previous = self._known_status.get(pk)
            if pending is not None or previous in (None, ThreadStatus.INTERRUPTED):
                self._sync_queue(pk, seq, pending)
        self._known_status[pk] = status
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
