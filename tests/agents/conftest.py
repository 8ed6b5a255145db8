"""A scripted chat model and small helpers for the runtime tests (no database, no network)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agents import InMemoryCheckpointer, Message, ModelError

Turn = Message | Callable[[list[Message]], Message] | Exception


class FakeModel:
    """Answers with scripted turns in order; streams each answer word by word."""

    name = "fake"

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.seen: list[list[Message]] = []
        self.tools_seen: list[list[dict[str, Any]]] = []
        self.closed = False

    async def agenerate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        on_delta: Callable[[str], Any] | None = None,
    ) -> Message:
        self.seen.append(list(messages))
        self.tools_seen.append(tools)
        if not self.turns:
            raise ModelError("the fake model has no scripted turn left")
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        reply = turn(messages) if callable(turn) else turn
        if on_delta is not None and reply.content:
            words = reply.content.split(" ")
            for i, word in enumerate(words):
                await on_delta(word if i == len(words) - 1 else word + " ")
        return Message(role="assistant", content=reply.content, tools_calls=reply.tools_calls)

    async def aclose(self) -> None:
        self.closed = True


def say(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(*calls: tuple[str, dict[str, Any] | str], text: str = "") -> Message:
    """An assistant turn calling tools; ids are call_1, call_2, ... in order."""
    return Message(
        role="assistant",
        content=text,
        tools_calls=[
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(calls, start=1)
        ],
    )


def user(text: str) -> dict[str, Any]:
    return {"messages": [Message.text_message(text)]}


def tool_results(messages: list[Message]) -> dict[str, Any]:
    """tool_call_id -> parsed content (JSON when it parses, else the text)."""
    out: dict[str, Any] = {}
    for m in messages:
        if m.role == "tool":
            try:
                out[m.tool_call_id or ""] = json.loads(m.content)
            except ValueError:
                out[m.tool_call_id or ""] = m.content
    return out


@pytest.fixture
def store() -> InMemoryCheckpointer:
    return InMemoryCheckpointer()


@pytest.fixture
def config() -> dict[str, Any]:
    return {"thread_id": "t-1", "user_id": "u-1"}
