"""Tools: plain functions with a JSON schema, and the node that runs a model's tool calls.

Exactly-once effects, or an honest question. Before a tool runs, the ``ToolNode`` records
the call as in flight in a durable checkpoint; its result, saved as soon as it returns,
ends that. A call found in flight when a run starts (its worker died, or lost the thread,
between the two) may or may not have acted. A tool declared ``idempotent`` is then run
again with the same ``idempotency_key()``, which it passes to a system that deduplicates.
Any other tool is never run again blindly: the run pauses with a question to a person
(confirm it happened, retry it, or mark it failed), and only "retry" runs it again.
Each attempt also has a ``fencing_token()``, higher for every later attempt at the call,
so a target can refuse an attempt that arrives after a newer one.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from agents import inbox
from agents.interrupt import MAX_SUMMARY_CHARS, GraphInterrupt, current_run, interrupt
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
    graph for it first, allowing Agent Inbox's four answers (``agents.inbox``), and fails
    closed: only ``{"type": "accept"}`` or ``{"type": "edit", "args": {call_id: {...}}}``
    runs the calls; a response, ignore, no answer or anything else declines them.

    ``idempotent`` says running the call twice with the same ``idempotency_key()`` acts
    once. Only such a tool is run again when a crash leaves its outcome unknown; for any
    other, a person is asked first (the default, because it is the safe one).

    ``title`` says what one call does in a reviewer's words, as a noun phrase: a format
    string filled with the call's arguments (``"a ${amount:,.2f} transfer to {recipient}"``)
    or a function of them. Without one (or when it does not fit the arguments), requests
    name the tool in words and list its arguments (see ``describe_call``).

    ``summary`` says what one call wants, as a short plain sentence a queue row shows
    (``"Refund ${amount:,.2f} to order {order_id}"``), the same way; without one, the
    call's title (or its words) stands in (see ``summarize_call``).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    high_risk: bool = False
    idempotent: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    title: str | Callable[[dict[str, Any]], str] | None = None
    summary: str | Callable[[dict[str, Any]], str] | None = None

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        high_risk: bool = False,
        idempotent: bool = False,
        title: str | Callable[[dict[str, Any]], str] | None = None,
        summary: str | Callable[[dict[str, Any]], str] | None = None,
    ) -> Tool:
        """Build a tool from a sync or async function's signature, hints and docstring."""
        first_paragraph, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
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
            description=description or first_paragraph,
            parameters={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            fn=fn,
            high_risk=high_risk,
            idempotent=idempotent,
            title=title,
            summary=summary,
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
    *,
    name: str | None = None,
    description: str | None = None,
    high_risk: bool = False,
    idempotent: bool = False,
    title: str | Callable[[dict[str, Any]], str] | None = None,
    summary: str | Callable[[dict[str, Any]], str] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    high_risk: bool = False,
    idempotent: bool = False,
    title: str | Callable[[dict[str, Any]], str] | None = None,
    summary: str | Callable[[dict[str, Any]], str] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: ``@tool``, ``@tool(high_risk=True)`` or ``@tool(idempotent=True)`` turns a
    function into a ``Tool``; ``title=`` and ``summary=`` word its calls for reviewers (see
    ``Tool``)."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f,
            name=name,
            description=description,
            high_risk=high_risk,
            idempotent=idempotent,
            title=title,
            summary=summary,
        )

    return wrap(fn) if fn is not None else wrap


def idempotency_key() -> str:
    """The key of the tool call running now: the same each time this call runs (after a
    crash, or a reviewer's "retry"), different for every other call. Pass it to the system
    the tool acts on (a payment API's idempotency key, a unique column) so that it acts
    once. RuntimeError outside a tool call."""
    key = current_run().call_key
    if key is None:
        raise RuntimeError(
            "idempotency_key() names a tool call; call it inside a tool that a ToolNode runs"
        )
    return key


def fencing_token() -> int:
    """This attempt at the running tool call, as a number that only grows: every later
    attempt at the same call (after a crash, a takeover, or a reviewer's "retry") gets a
    higher one. Send it with ``idempotency_key()`` to a system that keeps the highest token
    it has seen for each key and refuses a lower one: a stale attempt that acts late (its
    worker frozen while another one took the run over) is then refused instead of acting
    twice. RuntimeError outside a tool call."""
    fence = current_run().call_fence
    if fence is None:
        raise RuntimeError(
            "fencing_token() numbers a tool call's attempt; call it inside a tool that a "
            "ToolNode runs"
        )
    return fence


def call_key(thread_id: str, message_id: str, tool_call_id: str) -> str:
    """sha256 of the thread, the assistant message that asked and the call's id (hex)."""
    # The message's id too: some models number their calls afresh each turn (call_0,
    # call_1, ...), so a call id alone may repeat within a thread.
    text = f"{thread_id}\n{message_id}\n{tool_call_id}"
    return hashlib.sha256(text.encode()).hexdigest()


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    return obj if isinstance(obj, Tool) else Tool.from_function(obj)


def _result(payload: dict[str, Any]) -> str:
    return json.dumps(payload)


def edits_key(node: str) -> str:
    """Where a breakpoint before ``node`` keeps a reviewer's edited arguments among the
    checkpoint's answers ({tool_call_id: args})."""
    return f"{node}:args"


def call_text(name: str, args: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def words(identifier: str) -> str:
    """``delete_account`` -> ``delete account``: a name as a reviewer reads it."""
    return " ".join(identifier.replace("-", "_").split("_")).strip() or identifier


# Argument names whose numbers are sums of money, written one way everywhere: $1,234.50.
_MONEY = ("amount", "price", "total", "balance", "refund", "fee", "cost")


def value_words(name: str, value: Any) -> str:
    """One argument's value as a reviewer reads it: ``amount``, 42.5 -> ``$42.50``
    (every page and every request's message write money this one way)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if any(part in _MONEY for part in name.lower().split("_")):
            return f"${value:,.2f}"
        return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def describe_call(name: str, args: dict[str, Any] | None, tool: Tool | None = None) -> str:
    """One call in words: the tool's ``title`` filled in with ``args``, or else the tool's
    name in words and its arguments, readably (``delete account (user id: u-381)``)."""
    args = args or {}
    text = _filled(tool.title if tool is not None else None, args)
    if text:
        return text
    listed = ", ".join(f"{words(k)}: {value_words(k, v)}" for k, v in args.items())
    return f"{words(name)} ({listed})" if listed else words(name)


def _filled(template: str | Callable[[dict[str, Any]], str] | None, args: dict[str, Any]) -> str:
    if template is None:
        return ""
    try:
        text = template(args) if callable(template) else template.format(**args)
    except Exception:  # a template that does not fit these arguments falls back
        return ""
    return " ".join(text.split()) if isinstance(text, str) else ""


def summarize_call(name: str, args: dict[str, Any] | None, tool: Tool | None = None) -> str:
    """One call as a request's summary: the tool's ``summary`` filled in with ``args``, or
    else the call in words (``describe_call``), starting with a capital."""
    text = _filled(tool.summary if tool is not None else None, args or {})
    text = text or describe_call(name, args, tool)
    return text[:1].upper() + text[1:]


@dataclass
class _Call:
    id: str
    name: str
    raw: str
    args: dict[str, Any] | None
    problem: str | None
    message_id: str = ""  # the assistant message that asked for it
    requested: dict[str, Any] | None = None  # what the model asked, when a reviewer edited it
    edited_by: str | None = None  # the breakpoint whose answer edited the arguments


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


# What a person answers about a call whose outcome a crash left unknown.
OUTCOME_REASON = "uncertain_outcome"
OUTCOME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "outcome": {
            "type": "string",
            "enum": ["confirm", "retry", "fail"],
            "description": "confirm: it happened; retry: run it again; fail: it did not happen",
        },
        "note": {"type": "string"},
    },
    "required": ["outcome"],
    "additionalProperties": False,
}


# The answers an approval of tool calls allows (a high-risk tool's, a breakpoint's before
# the tools), as in Agent Inbox: run the calls as asked, run them with edited arguments,
# send the model a response instead, or ignore it.
APPROVAL_ACTIONS = ("accept", "edit", "response", "ignore")


def approval_schema(editable: dict[str, tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """The answers to a request to run tool calls: accept, respond or ignore, and edit when
    some call has arguments to edit (``editable``: call id -> (its arguments, its tool's
    parameters)). An edit's arguments are keyed by call id, each checked against its
    tool's parameters; calls left out run as asked."""
    if not editable:
        return inbox.response_schema([a for a in APPROVAL_ACTIONS if a != "edit"])
    return inbox.response_schema(
        APPROVAL_ACTIONS,
        args={call_id: args for call_id, (args, _) in editable.items()},
        args_schema={
            "type": "object",
            "properties": {call_id: params for call_id, (_, params) in editable.items()},
            "additionalProperties": False,
        },
    )


WITHDRAWN = "The request was withdrawn before anyone decided; nothing was done."


def withdrawn_result() -> str:
    """A tool's result when its request came back with no answer (``interrupt()``
    returned None: its requester withdrew it): not done, and nobody declined it."""
    return _result({"status": "withdrawn", "reason": WITHDRAWN})


def decline_reason(decision: Any) -> str | None:
    """What the model is told about a declined approval: a reviewer's response (with
    their note), or their note; None when they said nothing."""
    if not isinstance(decision, dict):
        return None
    raw_note = decision.get("note")
    note = raw_note.strip() if isinstance(raw_note, str) else ""
    said = decision.get("args") if decision.get("type") == "response" else None
    if isinstance(said, str) and said.strip():
        return f"{said.strip()} ({note})" if note else said.strip()
    return note or None


class ToolNode:
    """A node that runs the last assistant message's tool calls, in order.

    Each finished call's result is checkpointed at once (the last one with the node's end),
    and calls that already have a result in the thread are skipped, so a pause or a crash
    later in the turn never makes a finished call run twice. A tool's exception becomes an
    error result for the model; a pause (``GraphInterrupt``) passes through. Sync tools run
    in a worker thread, so a blocking call never stalls the event loop the run (and its
    heartbeat) lives on.

    Right before it calls a tool it records the call in flight, durably, together with the
    steps the run kept for later; see the module docstring for what a call found in flight
    becomes. Asking for approval comes first and acts on nothing, so a turn that pauses for
    approval goes to the store in one write with the pause; a reviewer's answer waits for
    the next write too, so a declined call goes with its declined result.
    """

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
        # Calls that share an id would share their key and their in-flight record: none
        # of them runs.
        ids = Counter(raw_call.get("id", "") for raw_call in last.tools_calls or [])
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
            if problem is None and ids[call_id] > 1:
                problem = (
                    f"the model gave {ids[call_id]} calls the id {call_id!r} in one turn; each "
                    "call needs an id of its own, so none of them was run"
                )
            calls.append(_Call(call_id, name, raw, args, problem, last.id))
        return calls

    async def __call__(self, state: AgentState) -> Message | None:
        run = current_run()
        calls = self.pending_calls(state)
        self._apply_edits(run.answers.get(edits_key(run.node)), calls)
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
                + "; ".join(describe_call(c.name, c.args, t) for c, t in risky)
                + "?",
                reason="tool_approval",
                response_schema=approval_schema(
                    {call.id: (call.args, t.parameters) for call, t in risky}
                ),
                summary=_cut("; ".join(summarize_call(c.name, c.args, t) for c, t in risky)),
            )
            approval_id = run.last_interrupt_id
        risky_ids = {c.id for c, _ in risky}
        for n, call in enumerate(calls, start=1):
            if call.id in risky_ids:
                message = await self._run_approved(call, decision, approval_id)
            else:
                message = await self._run_call(call, call.args)
                if call.edited_by is not None:
                    message.meta["original_args"] = call.requested
                    message.meta["executed_args"] = call.args
                    message.meta["approved_by_interrupt"] = call.edited_by
            if n == len(calls):
                return message  # saved with the node's end: one write
            await run.append_messages([message])
        return None

    @staticmethod
    def _apply_edits(answer: Any, calls: list[_Call]) -> None:
        # A reviewer's edit at a breakpoint before this node (kept in the checkpoint with
        # the answers until the node completes): the calls run with the edited arguments.
        if not isinstance(answer, dict) or not isinstance(answer.get("value"), dict):
            return
        for call in calls:
            edited = answer["value"].get(call.id)
            if isinstance(edited, dict) and call.problem is None and edited != call.args:
                call.requested, call.args = call.args, edited
                call.edited_by = answer.get("id")

    def decline(self, state: AgentState, note: str | None = None) -> list[Message]:
        """Declined results for every pending call (a reviewer said no to the turn)."""
        return [self._declined(call, note) for call in self.pending_calls(state)]

    def _declined(self, call: _Call, note: str | None) -> Message:
        content = _result({"status": "declined", "reason": note or "No approval was given."})
        return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)

    async def _run_approved(self, call: _Call, decision: Any, approval_id: str | None) -> Message:
        # Fail closed: only an explicit accept or edit lets the call run; a response,
        # ignore, no answer (cancelled, expired) or anything malformed declines it.
        if decision is None:
            # No answer at all: the request was withdrawn before anyone decided (its
            # requester took it back); the result says so, not that a reviewer said no.
            content = withdrawn_result()
            return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)
        if not inbox.goes_ahead(decision):
            return self._declined(call, decline_reason(decision))
        edits = decision.get("args") if decision.get("type") == "edit" else None
        edited = edits.get(call.id) if isinstance(edits, dict) else None
        args = edited if isinstance(edited, dict) else call.args
        message = await self._run_call(call, args)
        message.meta["original_args"] = call.requested if call.edited_by else call.args
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
        run, tool = current_run(), self.tools[call.name]
        key = call_key(run.thread_id, call.message_id, call.id)
        if run.in_flight(call.id) and not tool.idempotent:
            settled = self._settle_unknown(call, args, key)
            if settled is not None:
                run.call_finished(call.id)
                return reply(_result(settled))
        # Recorded in flight before it acts; the write's compare-and-swap also makes sure
        # this run owns the thread (a conflict propagates: it is not the tool's failure).
        fence = await run.call_starting(call.id)
        with run.tool_scope(
            call.id,
            key,
            call.name,
            fence=fence,
            args=args,
            schema=tool.parameters,
            summary=_cut(summarize_call(call.name, args, tool)),
        ):
            try:
                if inspect.iscoroutinefunction(tool.fn):
                    result = await tool.fn(**args)
                else:
                    # A sync tool runs in a thread: a slow one (a payment API call) must
                    # not stall the event loop, where the worker's lease heartbeat and
                    # stream publishing run. The context (and so interrupt()) goes along.
                    result = await asyncio.to_thread(tool.fn, **args)
                    if inspect.isawaitable(result):
                        result = await result
            except GraphInterrupt:
                # It paused before acting (side effects belong after interrupt()): when
                # resumed it starts over, from its first line, as a call not yet made.
                run.call_finished(call.id)
                raise
            except Exception as exc:  # the model sees the failure and can react to it
                result = _result({"status": "error", "error": f"{type(exc).__name__}: {exc}"})
        run.call_finished(call.id)
        return reply(result if isinstance(result, str) else json.dumps(result, default=str))

    def _settle_unknown(self, call: _Call, args: dict[str, Any], key: str) -> dict[str, Any] | None:
        """Ask a person about a call that may have acted; the result for the model, or
        None to run it again (the answer "retry")."""
        run = current_run()
        # A key of its own, so the tool's interrupt() calls keep their positions.
        ask = f"{run.node}:{call.id}:outcome"
        tool = self.tools.get(call.name)
        with run.tool_scope(call.id, key, call.name):
            answer = run.ask(
                ask,
                {"tool_call": {"id": call.id, "name": call.name, "arguments": args}, "key": key},
                message=(
                    f"{describe_call(call.name, args, self.tools.get(call.name))} may already "
                    "have taken effect: the run "
                    "stopped after it started and before its result was saved. Check, then "
                    "confirm it happened, retry it, or mark it failed."
                ),
                reason=OUTCOME_REASON,
                response_schema=OUTCOME_SCHEMA,
                summary=_cut(f"Did this take effect? {summarize_call(call.name, args, tool)}"),
            )
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        note = answer.get("note") if isinstance(answer, dict) else None
        by = {"reviewer_note": note} if isinstance(note, str) and note else {}
        if outcome == "retry":
            # Answered once: should this attempt be cut short too, the question is asked
            # again rather than answered with this "retry".
            run.answers.pop(ask, None)
            return None
        if outcome == "confirm":
            return {"status": "done", "detail": "a reviewer confirmed the call took effect", **by}
        # "fail", and fail closed: no answer (cancelled, expired) never runs it again.
        if outcome == "fail":
            why = "a reviewer marked the call as failed: it did not take effect"
        else:
            why = "nobody confirmed whether the call took effect, so it was not run again"
        return {"status": "error", "error": why, **by}
