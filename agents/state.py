"""State, messages and stream chunks: the data every part of the runtime passes around.

Everything here is plain data that round-trips through JSON (``to_dict`` / ``from_dict``),
because checkpointers store it and the portal sends it over websockets.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

JSON = Any


def new_id(prefix: str) -> str:
    """``prefix_`` and 16 random hex digits: 64 bits from the OS's generator."""
    return f"{prefix}_{os.urandom(8).hex()}"


@dataclass
class Message:
    """One chat message in OpenAI's shape.

    ``tools_calls`` holds the assistant's tool calls exactly as the chat completions API
    writes them: ``[{"id": ..., "type": "function", "function": {"name": ..., "arguments":
    "<json text>"}}]``. A tool result carries the ``tool_call_id`` it answers.
    """

    role: str
    content: str = ""
    tools_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    id: str = field(default_factory=lambda: new_id("msg"))
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def text_message(cls, content: str, role: str = "user") -> Message:
        return cls(role=role, content=content)

    def text(self) -> str:
        return self.content or ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "role": self.role, "content": self.content}
        if self.tools_calls:
            data["tools_calls"] = self.tools_calls
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        if self.meta:
            data["meta"] = self.meta
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tools_calls=data.get("tools_calls"),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            id=data.get("id") or new_id("msg"),
            meta=data.get("meta") or {},
        )

    def to_openai(self) -> dict[str, Any]:
        """The message as the chat completions API expects it."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tools_calls:
            data["tool_calls"] = self.tools_calls
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        return data

    def tool_call_arguments(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(id, name, parsed arguments or None when the JSON is malformed) per tool call."""
        calls = []
        for call in self.tools_calls or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
                if not isinstance(args, dict):
                    args = None
            except ValueError:
                args = None
            calls.append((call.get("id", ""), fn.get("name", ""), args))
        return calls


class Conversation(list[Message]):
    """A thread's messages as loaded (``AgentState.context``): a list whose stored
    messages (dicts) become ``Message`` objects only when read, one at a time, and stay
    built. A node that reads the last message builds one, not the whole history; a model
    node that reads every message builds each once. Lives as long as the run's state."""

    __slots__ = ()

    def __init__(self, items: Iterable[Message | dict[str, Any]] = ()) -> None:
        super().__init__(items)  # type: ignore[arg-type]  # dicts are built when read

    def _at(self, index: int) -> Message:
        item: Any = list.__getitem__(self, index)
        if type(item) is dict:
            item = Message.from_dict(item)
            list.__setitem__(self, index, item)
        return item  # type: ignore[no-any-return]

    def _build(self) -> None:
        for index in range(len(self)):
            self._at(index)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._at(k) for k in range(*index.indices(len(self)))]
        return self._at(index)

    def __iter__(self) -> Iterator[Message]:
        index = 0
        while index < len(self):  # as a list's iterator: appends while iterating are seen
            yield self._at(index)
            index += 1

    def __reversed__(self) -> Iterator[Message]:
        for index in range(len(self) - 1, -1, -1):
            yield self._at(index)


def _built(name: str) -> Any:
    method = getattr(list, name)

    def whole(self: Conversation, *args: Any, **kwargs: Any) -> Any:
        self._build()
        return method(self, *args, **kwargs)

    whole.__name__ = name
    return whole


# Everything else a list does reads the items directly: they are all built first.
for _name in (
    "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__",
    "__mul__", "__rmul__", "__repr__", "copy", "count", "index", "pop", "remove", "sort",
):  # fmt: skip
    setattr(Conversation, _name, _built(_name))


@dataclass
class ExecutionMeta:
    """Where a thread stands. ``interrupted_node`` names the node a pause happened in (or
    before/after, for breakpoints); ``step`` counts node runs in the current invocation."""

    interrupted_node: str | None = None
    breakpoint: str | None = None  # "before" or "after" when paused on a breakpoint
    step: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "interrupted_node": self.interrupted_node,
            "breakpoint": self.breakpoint,
            "step": self.step,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ExecutionMeta:
        data = data or {}
        return cls(
            interrupted_node=data.get("interrupted_node"),
            breakpoint=data.get("breakpoint"),
            step=int(data.get("step") or 0),
        )


@dataclass
class AgentState:
    """The state a graph runs on. ``context`` is the conversation; subclasses may add
    JSON-serialisable fields, which are checkpointed as small values beside the history."""

    context: list[Message] = field(default_factory=list)
    execution_meta: ExecutionMeta = field(default_factory=ExecutionMeta)
    # The pending interrupt's fields while the thread is paused, else None.
    interrupt: dict[str, Any] | None = None


class StreamEvent(StrEnum):
    STATE = "state"
    MESSAGE = "message"
    ERROR = "error"
    UPDATES = "updates"


class ResponseGranularity(Enum):
    LOW = "low"  # messages only
    PARTIAL = "partial"  # messages and the context summary
    FULL = "full"  # messages and the whole state


@dataclass
class StreamChunk:
    """One item of ``astream()``. A message delta is a MESSAGE chunk whose ``data`` has
    ``{"delta": "<text>"}`` and whose ``message`` is the partial assistant message."""

    event: StreamEvent
    message: Message | None = None
    state: AgentState | None = None
    data: dict[str, Any] = field(default_factory=dict)
    thread_id: str | None = None
    run_id: str | None = None
    timestamp: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the wire (the state is left out: it can be large)."""
        return {
            "event": self.event.value,
            "message": self.message.to_dict() if self.message else None,
            "data": self.data,
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "timestamp": self.timestamp,
        }
