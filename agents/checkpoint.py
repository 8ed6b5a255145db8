"""The persistence protocol: what a graph needs from storage, and an in-memory store.

A thread's checkpoints form an append-only log. Each checkpoint is written at a node
boundary (or a pause) and carries only what that step added: the new messages, plus a
small bounded ``meta`` (execution meta, recorded resume answers, extra state values) and
the pending interrupt. Loading a thread concatenates the messages of its checkpoints and
takes everything else from the newest one. So writing a checkpoint costs the same whether
the conversation holds ten messages or ten thousand, and history is never rewritten.

Writers name the checkpoint they built on (``parent_seq``). If another writer got there
first the store raises ``CheckpointConflict`` instead of forking the thread: two workers
can never both continue one thread.

Status values are explicit: a thread is ``running`` (``next_node`` is what runs next;
a crashed or failed run continues from there), ``interrupted`` (``interrupt`` holds the
pending request) or ``done``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ThreadStatus(StrEnum):
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    DONE = "done"


class CheckpointConflict(Exception):
    """Another writer appended to this thread since ``parent_seq`` was read."""

    def __init__(self, thread_id: str, expected: int | None, actual: int | None) -> None:
        super().__init__(
            f"thread {thread_id!r} moved on: expected latest checkpoint {expected}, found "
            f"{actual}. Another process is running this thread; load it again before writing."
        )
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class CheckpointWrite:
    """What one step adds to a thread."""

    status: ThreadStatus
    next_node: str | None
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # The pending interrupt's fields (see ``agents.interrupt.Interrupt.to_dict``) when
    # status is INTERRUPTED, else None.
    interrupt: dict[str, Any] | None = None
    node: str | None = None  # the node whose boundary this is, for timelines
    # When the step happened (epoch seconds): a step written later, with the next one,
    # keeps its own time.
    at: float = field(default_factory=time.time)


# ``json.dumps(value, separators=(",", ":"))`` without building an encoder per call
# (which costs about as much as encoding a step's few small dicts). The encoder keeps no
# state between calls, so one serves every thread.
compact_json = json.JSONEncoder(separators=(",", ":")).encode


def encode_step(write: CheckpointWrite) -> tuple[str, str]:
    """``write``'s messages and meta as compact JSON (raises TypeError for what JSON
    cannot hold)."""
    return compact_json(write.new_messages), compact_json(write.meta)


@dataclass(frozen=True)
class Snapshot:
    """A thread as loaded: the whole history and the newest checkpoint's fields."""

    thread_id: str
    seq: int
    status: ThreadStatus
    next_node: str | None
    messages: list[dict[str, Any]]
    meta: dict[str, Any]
    interrupt: dict[str, Any] | None


@dataclass(frozen=True)
class CheckpointRecord:
    """One entry of a thread's log, without its messages (for timelines)."""

    seq: int
    node: str | None
    status: ThreadStatus
    next_node: str | None
    message_count: int
    interrupt_id: str | None
    created_at: float


@runtime_checkable
class Checkpointer(Protocol):
    """Storage for threads. Implementations: ``InMemoryCheckpointer`` here and the
    portal's ``DjangoCheckpointer``; both pass ``agents.testing.checkpointer_contract``."""

    async def aget(self, thread_id: str) -> Snapshot | None:
        """The thread as of its newest checkpoint, or None if it has none."""
        ...

    async def aput(self, thread_id: str, write: CheckpointWrite, *, parent_seq: int | None) -> int:
        """Append a checkpoint and return its seq (1, 2, ...). ``parent_seq`` is the seq
        the writer loaded (None for a new thread); raise CheckpointConflict otherwise.
        Committed durably before it returns: the runtime acts, and tells people, on what
        it wrote."""
        ...

    async def aput_steps(
        self, thread_id: str, writes: Sequence[CheckpointWrite], *, parent_seq: int | None
    ) -> int:
        """Append several checkpoints in one go, all or none, numbered on from
        ``parent_seq``; return the last one's seq. (The runtime sends the steps that
        nothing could act on in between, such as a run's input, with the next one.)"""
        ...

    async def alist(self, thread_id: str) -> list[CheckpointRecord]:
        """The thread's checkpoints, oldest first."""
        ...

    async def adelete(self, thread_id: str) -> None:
        """Forget a thread entirely."""
        ...

    async def aclose(self) -> None:
        """Release connections or other resources."""
        ...


@dataclass(frozen=True)
class _Entry:
    status: ThreadStatus
    next_node: str | None
    node: str | None
    message_count: int
    interrupt_id: str | None
    created_at: float
    # The step as a store would write it: JSON text, encoded once. Reads decode fresh
    # objects from it, so nobody can change stored history through what they were given,
    # and data a database could not store fails here too (json raises TypeError).
    state_json: str
    nbytes: int


class InMemoryCheckpointer:
    """A process-local checkpointer: for tests, examples and the benchmark.

    Each instance has its own storage; two compiled graphs never share threads by accident.
    """

    def __init__(self) -> None:
        self._threads: dict[str, list[_Entry]] = {}
        # Each step's new messages as JSON text, in order: loading decodes them, writing
        # appends one string and never touches the history before it.
        self._messages: dict[str, list[str]] = {}
        self.bytes_written = 0

    async def aget(self, thread_id: str) -> Snapshot | None:
        log = self._threads.get(thread_id)
        if not log:
            return None
        last = log[-1]
        meta, interrupt = json.loads(last.state_json)
        messages: list[dict[str, Any]] = []
        for blob in self._messages[thread_id]:
            messages.extend(json.loads(blob))
        return Snapshot(
            thread_id=thread_id,
            seq=len(log),
            status=last.status,
            next_node=last.next_node,
            messages=messages,
            meta=meta,
            interrupt=interrupt,
        )

    async def aput(self, thread_id: str, write: CheckpointWrite, *, parent_seq: int | None) -> int:
        return await self.aput_steps(thread_id, [write], parent_seq=parent_seq)

    async def aput_steps(
        self, thread_id: str, writes: Sequence[CheckpointWrite], *, parent_seq: int | None
    ) -> int:
        if not writes:
            raise ValueError("aput_steps needs at least one step")
        log = self._threads.setdefault(thread_id, [])
        latest = len(log) or None
        if latest != parent_seq:
            raise CheckpointConflict(thread_id, parent_seq, latest)
        # Encoded before any is kept: what JSON cannot store fails with nothing written.
        encoded = []
        for write in writes:
            messages_json, meta_json = encode_step(write)
            interrupt_json = compact_json(write.interrupt)
            encoded.append((write, messages_json, f"[{meta_json},{interrupt_json}]"))
        messages = self._messages.setdefault(thread_id, [])
        for write, messages_json, state_json in encoded:
            # What a real store writes for this step: the delta, never the history.
            nbytes = len(messages_json) + len(state_json) + len(write.next_node or "")
            self.bytes_written += nbytes
            log.append(
                _Entry(
                    status=ThreadStatus(write.status),
                    next_node=write.next_node,
                    node=write.node,
                    message_count=len(write.new_messages),
                    interrupt_id=(write.interrupt or {}).get("id"),
                    created_at=write.at,
                    state_json=state_json,
                    nbytes=nbytes,
                )
            )
            if write.new_messages:
                messages.append(messages_json)
        return len(log)

    async def alist(self, thread_id: str) -> list[CheckpointRecord]:
        return [
            CheckpointRecord(
                seq=i,
                node=e.node,
                status=e.status,
                next_node=e.next_node,
                message_count=e.message_count,
                interrupt_id=e.interrupt_id,
                created_at=e.created_at,
            )
            for i, e in enumerate(self._threads.get(thread_id, []), start=1)
        ]

    async def adelete(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        self._messages.pop(thread_id, None)

    async def aclose(self) -> None:
        return None

    def last_write_bytes(self, thread_id: str) -> int:
        """Bytes the newest checkpoint of a thread took (benchmarks read this)."""
        log = self._threads.get(thread_id)
        return log[-1].nbytes if log else 0
