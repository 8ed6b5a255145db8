"""Tools: plain functions with a JSON schema, and the node that runs a model's tool calls."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from agents.interrupt import current_run, interrupt
from agents.state import AgentState, Message

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is list or origin is list:
        return {"type": "array", "items": _schema_for(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        return {"type": "object"}
    if origin is Literal:
        schema: dict[str, Any] = {"enum": list(args)}
        kinds = {_SCALARS.get(type(a)) for a in args}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _schema_for(rest[0]) if len(rest) == 1 else {"anyOf": [_schema_for(a) for a in rest]}
    return {}


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {arg: description}) from a Google-style docstring."""
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    args: dict[str, str] = {}
    in_args, current, indent, args_depth = False, None, 0, 0
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args, indent = True, len(line) - len(line.lstrip())
            continue
        if not in_args:
            continue
        if not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        if depth <= indent:  # the next section (Returns:, Raises:, ...)
            break
        match = re.match(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
        if match and (current is None or depth <= args_depth):
            current, args_depth = match.group(1), depth
            args[current] = match.group(3)
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return summary, args


@dataclass
class Tool:
    """A function the model may call. ``parameters`` is the JSON schema of its arguments.

    ``high_risk`` tools never run without a person's approval: ``ToolNode`` pauses the
    graph for it first and fails closed (anything but ``{"approved": True}`` declines).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    high_risk: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        high_risk: bool = False,
    ) -> Tool:
        """Build a tool from a sync or async function's signature, hints and docstring."""
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        try:
            hints = typing.get_type_hints(fn)
        except (NameError, TypeError):
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            hint = hints.get(param.name, Any)
            prop = _schema_for(hint)
            if arg_docs.get(param.name):
                prop["description"] = arg_docs[param.name]
            properties[param.name] = prop
            if param.default is param.empty and not _is_optional(hint):
                required.append(param.name)
        return cls(
            name=name or fn.__name__,
            description=description or summary,
            parameters={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            fn=fn,
            high_risk=high_risk,
        )

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-tool spec."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, high_risk: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    high_risk: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: ``@tool`` or ``@tool(high_risk=True)`` turns a function into a ``Tool``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, high_risk=high_risk)

    return wrap(fn) if fn is not None else wrap


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    return obj if isinstance(obj, Tool) else Tool.from_function(obj)


def _result(payload: dict[str, Any]) -> str:
    return json.dumps(payload)


def call_text(name: str, args: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


@dataclass
class _Call:
    id: str
    name: str
    raw: str
    args: dict[str, Any] | None
    problem: str | None


def _approval_schema(risky: list[tuple[_Call, Tool]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "note": {"type": "string"},
            "args": {
                "type": "object",
                "properties": {call.id: t.parameters for call, t in risky},
                "additionalProperties": False,
            },
        },
        "required": ["approved"],
    }


class ToolNode:
    """A node that runs the last assistant message's tool calls, in order.

    Each finished call's result is checkpointed at once, and calls that already have a
    result in the thread are skipped, so a pause or a crash later in the turn never makes
    a finished call run twice. A tool's exception becomes an error result for the model;
    a pause (``GraphInterrupt``) passes through. Sync tools run in a worker thread, so a
    blocking call never stalls the event loop the run (and its heartbeat) lives on.

    Before it calls a tool it writes the run's deferred steps (``guards_effects``): asking
    for approval comes first and acts on nothing, so a turn that pauses for approval goes
    to the store in one write with the pause; a reviewer's answer to it waits for that
    write too, so a declined call goes with its declined result.
    """

    guards_effects = True

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self.tools: dict[str, Tool] = {}
        for t in map(as_tool, tools):
            self.tools[t.name] = t

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]

    def pending_calls(self, state: AgentState) -> list[_Call]:
        """Tool calls of the last assistant message that have no result yet."""
        for index in range(len(state.context) - 1, -1, -1):
            if state.context[index].role == "assistant":
                break
        else:
            return []
        last = state.context[index]
        answered = {m.tool_call_id for m in state.context[index + 1 :] if m.role == "tool"}
        calls = []
        for raw_call in last.tools_calls or []:
            call_id = raw_call.get("id", "")
            if call_id in answered:
                continue
            fn = raw_call.get("function") or {}
            name, raw = fn.get("name", ""), fn.get("arguments") or "{}"
            args, problem = None, None
            try:
                args = json.loads(raw)
            except ValueError as exc:
                problem = f"arguments for {name!r} are not valid JSON ({exc}): {raw[:200]}"
            if problem is None and not isinstance(args, dict):
                problem = f"arguments for {name!r} must be a JSON object, got {type(args).__name__}"
                args = None
            calls.append(_Call(call_id, name, raw, args, problem))
        return calls

    async def __call__(self, state: AgentState) -> None:
        run = current_run()
        calls = self.pending_calls(state)
        risky = [
            (c, self.tools[c.name])
            for c in calls
            if c.problem is None and c.name in self.tools and self.tools[c.name].high_risk
        ]
        decision: Any = None
        approval_id: str | None = None
        if risky:
            # One approval for the whole turn. Asked again on a re-run, it returns the
            # recorded answer, which stays in the checkpoint until this node completes.
            decision = interrupt(
                {
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.args} for c, _ in risky
                    ],
                    "parameters": {c.id: t.parameters for c, t in risky},
                },
                message="Approve "
                + ", ".join(call_text(c.name, c.args or {}) for c, _ in risky)
                + "?",
                reason="tool_approval",
                response_schema=_approval_schema(risky),
            )
            approval_id = run.last_interrupt_id
        risky_ids = {c.id for c, _ in risky}
        for call in calls:
            if call.id in risky_ids:
                message = await self._run_approved(call, decision, approval_id)
            else:
                message = await self._run_call(call, call.args)
            await run.append_messages([message])

    def decline(self, state: AgentState, note: str | None = None) -> list[Message]:
        """Declined results for every pending call (a reviewer said no to the turn)."""
        return [self._declined(call, note) for call in self.pending_calls(state)]

    def _declined(self, call: _Call, note: str | None) -> Message:
        content = _result({"status": "declined", "reason": note or "No approval was given."})
        return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)

    async def _run_approved(self, call: _Call, decision: Any, approval_id: str | None) -> Message:
        # Fail closed: only an explicit dict with approved exactly True lets the call run.
        if not (isinstance(decision, dict) and decision.get("approved") is True):
            note = decision.get("note") if isinstance(decision, dict) else None
            return self._declined(call, note if isinstance(note, str) else None)
        edited = (decision.get("args") or {}).get(call.id)
        args = edited if isinstance(edited, dict) else call.args
        message = await self._run_call(call, args)
        message.meta["original_args"] = call.args
        message.meta["executed_args"] = args
        message.meta["approved_by_interrupt"] = approval_id
        return message

    async def _run_call(self, call: _Call, args: dict[str, Any] | None) -> Message:
        def reply(content: str) -> Message:
            return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)

        if call.name not in self.tools:
            known = ", ".join(sorted(self.tools)) or "(none)"
            return reply(
                _result(
                    {
                        "status": "error",
                        "error": f"unknown tool {call.name!r}; known tools: {known}",
                    }
                )
            )
        if call.problem is not None or args is None:
            return reply(_result({"status": "error", "error": call.problem or "no arguments"}))
        # The compare-and-swap on the thread first: a tool acts only for the run that owns
        # it (a conflict propagates: it is not the tool's failure).
        await current_run().before_effects()
        with current_run().tool_scope(call.id):
            try:
                fn = self.tools[call.name].fn
                if inspect.iscoroutinefunction(fn):
                    result = await fn(**args)
                else:
                    # A sync tool runs in a thread: a slow one (a payment API call) must
                    # not stall the event loop, where the worker's lease heartbeat and
                    # stream publishing run. The context (and so interrupt()) goes along.
                    result = await asyncio.to_thread(fn, **args)
                    if inspect.isawaitable(result):
                        result = await result
            except Exception as exc:  # the model sees the failure and can react to it
                return reply(_result({"status": "error", "error": f"{type(exc).__name__}: {exc}"}))
        return reply(result if isinstance(result, str) else json.dumps(result, default=str))
