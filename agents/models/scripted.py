"""A deterministic offline model: demos, tests and the default portal setup run on it.

A *script* decides each assistant turn from the conversation so far:
``script(messages, tools) -> Message | Reply | CallTool | list[CallTool]``. ``RuleScript``
covers the usual case (match the latest user message, call a tool, then answer from the
tool's result). Same conversation in, same message out, including tool call ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.models.base import DeltaCallback
from agents.state import Message


@dataclass(frozen=True, init=False)
class CallTool:
    """One tool call: ``CallTool("transfer_funds", amount=5000.0, recipient="Alice")``."""

    name: str
    args: dict[str, Any]

    def __init__(self, name: str, /, **args: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)


@dataclass(frozen=True, init=False)
class Reply:
    """An assistant turn: text, optionally followed by tool calls.

    ``Reply("Let me check.", CallTool("check_balance"))``.
    """

    text: str
    calls: tuple[CallTool, ...] = ()

    def __init__(self, text: str, /, *calls: CallTool) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "calls", calls)


Step = Message | Reply | CallTool | Sequence[CallTool]
Script = Callable[[list[Message], list[dict[str, Any]]], Step]
# Receives the regex match on the latest user message; None lets the next rule try.
RuleAction = Callable[["re.Match[str]"], Step | None]
AfterTool = Callable[[list[Message]], str]

_TOKEN = re.compile(r"\s*\S+|\s+")


def tokens(text: str) -> list[str]:
    """Split text into word-sized deltas that join back to exactly ``text``."""
    return _TOKEN.findall(text)


def latest_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            return message.text()
    return ""


def trailing_tool_results(messages: Sequence[Message]) -> list[Message]:
    """The tool messages answering the latest assistant turn (empty if it was not tools)."""
    results: list[Message] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.append(message)
    return results[::-1]


def describe_tool_result(content: str) -> str:
    """Words for one tool result: declined and error results are said as such."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict):
        status = data.get("status")
        if status == "declined":
            reason = data.get("reason") or data.get("note")
            note = f" Note: {str(reason).rstrip('.')}." if reason else ""
            return f"I could not do that: the reviewer declined.{note}"
        if status == "withdrawn":
            return "I did not do that: the request was withdrawn before a reviewer decided."
        if status == "error":
            detail = data.get("error") or data.get("message") or data.get("reason") or "unknown"
            return f"That did not work: the tool reported an error ({detail})."
    if content.lower().startswith("error"):
        return f"That did not work: {content}"
    return f"Done. {content}"


def answer_from_tool_results(results: Sequence[Message]) -> str:
    """The default answer after tools ran: one sentence per result."""
    return " ".join(describe_tool_result(result.text()) for result in results)


@dataclass
class RuleScript:
    """A script of ``(pattern, action)`` rules on the latest user message.

    The first rule whose regex matches (case-insensitive) and whose action returns a step
    wins. After tool results the script answers in words (``after_tool``, by default
    ``answer_from_tool_results``). With no rule matching it replies ``fallback``.
    """

    rules: list[tuple[str, RuleAction]]
    fallback: str = "I can't help with that request."
    after_tool: AfterTool = field(default=answer_from_tool_results)

    def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Step:
        results = trailing_tool_results(messages)
        if results:
            return Reply(self.after_tool(results))
        text = latest_user_text(messages)
        for pattern, action in self.rules:
            match = re.search(pattern, text, re.IGNORECASE)
            if match is None:
                continue
            step = action(match)
            if step is not None:
                return step
        return Reply(self.fallback)


def echo_script(messages: list[Message], tools: list[dict[str, Any]]) -> Step:
    """The generic script: repeats the user, or reports tool results."""
    results = trailing_tool_results(messages)
    if results:
        return Reply(answer_from_tool_results(results))
    text = latest_user_text(messages)
    return Reply(f"You said: {text}" if text else "Hello! What can I do for you?")


def tool_call_id(messages: Sequence[Message], index: int, name: str) -> str:
    # Every model turn in a thread sees a longer history than the one before, so the
    # message count makes ids unique within the thread while staying reproducible.
    digest = hashlib.sha256(f"{len(messages)}:{index}:{name}".encode()).hexdigest()
    return f"call_{digest[:12]}"


class ScriptedModel:
    """``ChatModel`` that runs a script instead of a network model.

    Text replies stream word by word through ``on_delta``, ``delay`` seconds apart
    (0 by default; a demo may use 0.02 so streaming is visible).
    """

    def __init__(self, script: Script, name: str = "scripted", *, delay: float = 0.0) -> None:
        self.script = script
        self.name = name
        self.delay = delay
        self.calls = 0  # how many turns were generated; tests read it

    async def agenerate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> Message:
        self.calls += 1
        message = self._to_message(self.script(list(messages), tools), messages)
        if on_delta is not None and message.content:
            for index, token in enumerate(tokens(message.content)):
                if self.delay and index:
                    await asyncio.sleep(self.delay)
                await on_delta(token)
        return message

    def _to_message(self, step: Step, messages: Sequence[Message]) -> Message:
        if isinstance(step, Message):
            return step
        if isinstance(step, CallTool):
            step = Reply("", step)
        elif not isinstance(step, Reply):
            step = Reply("", *step)
        calls = [
            {
                "id": tool_call_id(messages, index, call.name),
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.args)},
            }
            for index, call in enumerate(step.calls)
        ]
        return Message(
            role="assistant",
            content=step.text,
            tools_calls=calls or None,
            meta={"model": self.name},
        )

    async def aclose(self) -> None:
        return None
