"""Pausing a graph from inside a node or a tool, and answering the pause.

The re-run rule: ``interrupt()`` pauses by raising ``GraphInterrupt``; the graph saves the
thread and stops. When the thread is resumed, the node (or, inside a ``ToolNode``, the one
tool call) that paused runs again from its first line, and this time ``interrupt()`` returns
the answer instead of raising (``None`` when the request was cancelled). Code before the
call therefore runs twice; keep side effects such as payments after it.

The ordering rule: a node or tool may call ``interrupt()`` several times. The calls are
answered in order: on each re-run the answered calls return their answers and the first
unanswered one pauses again, with its own interrupt id. Answers are matched by position,
so the calls must happen in the same order on every run.

Answers live in the checkpoint's ``meta["answers"]``, keyed ``"<node>:<tool_call_id or
->:<n>"`` where ``n`` counts ``interrupt()`` calls in that scope during the current run of
the node; they are dropped when the node completes. The runtime's own question about a tool
call a crash cut short (see ``agents.tools``) is keyed ``"<node>:<tool_call_id>:outcome"``,
outside that count.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from jsonschema import ValidationError

from agents import inbox
from agents.errors import InvalidInterruptError
from agents.schema import (
    SchemaRefused,
    extra_properties,
    json_problem,
    schema_problem,
    validator_for,
)
from agents.state import AgentState, Message, StreamChunk, StreamEvent, new_id


@dataclass
class Interrupt:
    """A pending request for a person (or another system) to answer."""

    id: str
    key: str
    node: str
    value: Any = None
    message: str | None = None
    reason: str = "input_required"
    response_schema: dict[str, Any] | None = None
    tool_call_id: str | None = None
    tool: str | None = None  # the name of the tool whose call raised it
    # Who should answer, as "user:<name>"/"group:<name>" (the portal routes it there).
    assign_to: list[str] | None = None
    # What the agent wants, in one plain line ("Refund $120.00 to order 1234"), shown
    # beside the message; ``interrupt()`` fills it in when the caller gives none.
    summary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        extra = {"assign_to": list(self.assign_to)} if self.assign_to else {}
        return extra | {
            "id": self.id,
            "key": self.key,
            "node": self.node,
            "value": self.value,
            "message": self.message,
            "reason": self.reason,
            "response_schema": self.response_schema,
            "tool_call_id": self.tool_call_id,
            "tool": self.tool,
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interrupt:
        return cls(
            id=data["id"],
            key=data["key"],
            node=data["node"],
            value=data.get("value"),
            message=data.get("message"),
            reason=data.get("reason") or "input_required",
            response_schema=data.get("response_schema"),
            tool_call_id=data.get("tool_call_id"),
            tool=data.get("tool"),
            assign_to=data.get("assign_to"),
            summary=data.get("summary"),
        )


# What a summary may hold: one line a queue row shows whole.
MAX_SUMMARY_CHARS = 200
_MARKDOWN_MARKS = re.compile(r"[*_`#>~]+|\[([^\]]*)\]\([^)]*\)")


def fallback_summary(message: str | None, reason: str) -> str:
    """A summary for a request whose agent wrote none: the message's first line without
    its Markdown marks, cut to fit; or, without a message, the reason in words."""
    for line in (message or "").splitlines():
        text = " ".join(_MARKDOWN_MARKS.sub(lambda m: m.group(1) or "", line).split())
        if text:
            if len(text) > MAX_SUMMARY_CHARS:
                text = text[: MAX_SUMMARY_CHARS - 1].rstrip() + "…"
            return text
    text = " ".join((reason or "request").replace("-", "_").split("_")).strip()
    return text[:1].upper() + text[1:MAX_SUMMARY_CHARS]


# A BaseException, not an Exception: tools routinely wrap their work in `except Exception`
# (and ToolNode turns a tool's Exception into an error result for the model). A pause must
# get past all of those to reach the graph, or the pause would be reported as a failure.
class GraphInterrupt(BaseException):
    """Raised by ``interrupt()``; the graph catches it and saves the pause."""

    def __init__(self, interrupt: Interrupt) -> None:
        super().__init__(interrupt.message or f"interrupt {interrupt.id} in {interrupt.node}")
        self.interrupt = interrupt


class RunContext:
    """What a running node can reach through ``current_run()``.

    ``emit_delta`` streams model text, ``append_messages`` adds messages to the thread and
    checkpoints them at once (the node stays current, so a crash resumes inside it),
    ``tool_scope`` scopes ``interrupt()`` calls to one tool call, and ``call_starting`` /
    ``call_finished`` / ``in_flight`` bracket a tool call (see ``agents.tools.ToolNode``).
    """

    def __init__(
        self,
        *,
        node: str,
        thread_id: str,
        run_id: str,
        config: dict[str, Any],
        answers: dict[str, Any],
        emit: Callable[[StreamChunk], None] | None,
        append: Callable[[list[Message]], Awaitable[None]],
        mark: Callable[[], Awaitable[int | None]] | None = None,
        in_flight: list[str] | None = None,
    ) -> None:
        self.node = node
        self.thread_id = thread_id
        self.run_id = run_id
        self.config = config
        self.answers = answers
        self.tool_call_id: str | None = None
        self.tool: str | None = None
        self.call_key: str | None = None  # the running tool call's idempotency key
        self.call_fence: int | None = None  # and this attempt's fencing token
        # The running tool call's arguments and their schema: what an edit may change.
        self.call_args: dict[str, Any] | None = None
        self.call_schema: dict[str, Any] | None = None
        # The running tool call in a reviewer's words: the summary of a request it raises
        # without one of its own.
        self.call_summary: str | None = None
        # The id of the interrupt whose answer interrupt() returned last.
        self.last_interrupt_id: str | None = None
        self._counts: dict[str, int] = {}
        self._emit = emit
        self._append = append
        self._mark = mark
        # Tool calls recorded as started whose results are not saved yet: shared with the
        # run, whose checkpoints carry it (``meta["in_flight"]``).
        self._in_flight = in_flight if in_flight is not None else []

    @property
    def streaming(self) -> bool:
        return self._emit is not None

    def emit_delta(self, message: Message, text: str) -> None:
        """Stream a fragment of ``message`` (a partial assistant message, final id)."""
        if self._emit is not None:
            self._emit(
                StreamChunk(
                    event=StreamEvent.MESSAGE,
                    message=message,
                    data={"delta": text},
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                )
            )

    async def append_messages(self, messages: list[Message]) -> None:
        """Add messages to the thread and checkpoint them now (next_node stays this node)."""
        await self._append(messages)

    def in_flight(self, tool_call_id: str) -> bool:
        """Whether an earlier run recorded this call as started and saved no result for
        it: it may or may not have taken effect (its worker died, or lost the thread)."""
        return tool_call_id in self._in_flight

    async def call_starting(self, tool_call_id: str) -> int:
        """Record the call as in flight, durably, with the steps the run kept for later.
        Nothing may act before this returns: the write is the proof, after a crash, that
        the call may have run, and its compare-and-swap that this run owns the thread.

        Returns the attempt's fencing token: the sequence number of that write. Every later
        attempt at the call writes its own record after it, so gets a higher one (0 when
        the graph keeps no checkpoints, and no attempt can follow a crash)."""
        if tool_call_id not in self._in_flight:
            self._in_flight.append(tool_call_id)
        seq = await self._mark() if self._mark is not None else None
        return seq or 0

    def call_finished(self, tool_call_id: str) -> None:
        """The call is over (its result is about to be saved, or it paused before acting):
        the next checkpoint no longer names it."""
        if tool_call_id in self._in_flight:
            self._in_flight.remove(tool_call_id)

    @contextmanager
    def tool_scope(
        self,
        tool_call_id: str,
        key: str | None = None,
        tool: str | None = None,
        *,
        fence: int | None = None,
        args: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        summary: str | None = None,
    ) -> Iterator[None]:
        """Inside it, ``interrupt()`` belongs to this call of ``tool``, ``agents.tools.
        idempotency_key()`` returns ``key`` and ``fencing_token()`` ``fence``, an
        ``interrupt()`` allowing "edit" offers
        ``args`` for editing, checked against ``schema`` (the tool's parameters), and one
        without a summary of its own is summarised as ``summary`` (the call in words)."""
        previous = (
            self.tool_call_id,
            self.call_key,
            self.call_fence,
            self.tool,
            self.call_args,
            self.call_schema,
            self.call_summary,
        )
        self.tool_call_id, self.call_key, self.call_fence = tool_call_id, key, fence
        self.tool = tool
        self.call_args, self.call_schema, self.call_summary = args, schema, summary
        try:
            yield
        finally:
            (
                self.tool_call_id,
                self.call_key,
                self.call_fence,
                self.tool,
                self.call_args,
                self.call_schema,
                self.call_summary,
            ) = previous

    def ask(
        self,
        key: str,
        value: Any = None,
        *,
        message: str | None = None,
        reason: str = "input_required",
        response_schema: dict[str, Any] | None = None,
        assign_to: Iterable[str] | None = None,
        summary: str | None = None,
    ) -> Any:
        """``interrupt()`` under an explicit answer key (the runtime's own questions use
        keys of their own, so they never take a position in a tool's ordering)."""
        answer = self.answers.get(key)
        if answer is not None:
            self.last_interrupt_id = answer["id"]
            return answer["value"]
        raise GraphInterrupt(
            Interrupt(
                id=new_id("int"),
                key=key,
                node=self.node,
                value=value,
                message=message,
                reason=reason,
                response_schema=response_schema,
                tool_call_id=self.tool_call_id,
                tool=self.tool,
                assign_to=list(assign_to) if assign_to else None,
                summary=summary
                or self.call_summary
                or fallback_summary(message if isinstance(message, str) else None, reason),
            )
        )

    def next_key(self) -> str:
        scope = f"{self.node}:{self.tool_call_id or '-'}"
        n = self._counts.get(scope, 0)
        self._counts[scope] = n + 1
        return f"{scope}:{n}"


_current: ContextVar[RunContext | None] = ContextVar("agents_current_run", default=None)


def current_run() -> RunContext:
    """The context of the node running now; RuntimeError outside a running node."""
    run = _current.get()
    if run is None:
        raise RuntimeError(
            "no graph node is running here; interrupt() and current_run() only work inside "
            "a node or a tool that a compiled graph is executing (graph.ainvoke/astream)"
        )
    return run


def interrupt(
    value: Any = None,
    *,
    message: str | None = None,
    reason: str = "input_required",
    response_schema: dict[str, Any] | None = None,
    actions: Iterable[str] | None = None,
    args: dict[str, Any] | None = None,
    args_schema: dict[str, Any] | None = None,
    assign_to: Iterable[str] | None = None,
    summary: str | None = None,
) -> Any:
    """Pause the graph and return the answer once the thread is resumed.

    ``value`` (JSON-serialisable) is what the person needs to see, ``message`` the prompt
    (Markdown), ``response_schema`` a JSON schema every answer must satisfy. ``summary``
    says what the agent wants in one plain line ("Refund $120.00 to order 1234"; at most
    200 characters); without it, a tool's call is summarised by its ``summary=`` template
    (or in words), and anything else by the message's first line. Returns
    ``None`` when the request was cancelled. See the module docstring for the re-run and
    ordering rules. The graph checks the request before saving the pause
    (``check_interrupt``): an unsafe schema or an over-long ``reason`` fails the run instead.

    ``actions`` instead of a schema: the answers a person may give, any of "accept",
    "edit", "response" and "ignore" (``agents.inbox``); the answer is then a
    ``HumanResponse``. An edit changes ``args`` and must fit ``args_schema``; inside a
    tool both default to the tool call's arguments and the tool's parameters.

    ``assign_to`` names who should answer, as ``"user:<username>"`` or ``"group:<name>"``
    strings; the portal routes the request to them (beside any its policy names).
    """
    run = current_run()
    if actions is not None:
        if response_schema is not None:
            raise ValueError(
                "pass either actions= or response_schema=, not both: the actions define "
                "the answer's schema"
            )
        if args is None:
            args = run.call_args
        if args_schema is None:
            args_schema = run.call_schema
        response_schema = inbox.response_schema(actions, args=args, args_schema=args_schema)
    return run.ask(
        run.next_key(),
        value,
        message=message,
        reason=reason,
        response_schema=response_schema,
        assign_to=assign_to,
        summary=summary,
    )


def pending_interrupt(state: AgentState) -> Interrupt | None:
    """The interrupt a paused thread waits on, or None."""
    return Interrupt.from_dict(state.interrupt) if state.interrupt else None


def _path(error: ValidationError) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _lines(error: ValidationError) -> list[str]:
    path, kind, expected = _path(error), error.validator, cast(Any, error.validator_value)
    instance = error.instance
    if kind == "type":
        names = " or ".join(expected) if isinstance(expected, list) else expected
        return [f"{path}: expected {names}, got {type(instance).__name__}"]
    if kind == "required" and isinstance(instance, dict):
        return [f"{path}.{name}: required" for name in expected if name not in instance]
    if kind == "additionalProperties" and expected is False and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        return [f"{path}: unexpected field {k!r}" for k in extra_properties(instance, schema)]
    if kind == "enum":
        return [f"{path}: expected one of {expected!r}, got {instance!r}"]
    return [f"{path}: {error.message}"]


def validate_resume(value: Any, schema: dict[str, Any] | None) -> list[str]:
    """Readable problems with ``value`` against ``schema`` ([] when valid).

    ``None`` is always valid: it means the request was cancelled.
    """
    if value is None or not schema:
        return []
    refused = inbox.not_allowed(value, schema)
    if refused is not None:
        return [refused]
    try:
        validator = validator_for(schema)
    except SchemaRefused as exc:
        return [f"the request's response_schema cannot be used, so no answer fits it: {exc}"]
    if validator.is_valid(value):
        return []
    lines: list[str] = []
    for error in validator.iter_errors(value):
        for line in _lines(error):
            if line not in lines:
                lines.append(line)
    return lines


# What the portal's queue stores for a reason (and shows as a label).
MAX_REASON_CHARS = 64


def check_interrupt(interrupt: Interrupt) -> None:
    """Refuse an interrupt that cannot be stored or answered safely.

    Called by the graph when a node pauses, before anything is saved, so a bad request
    fails the run (``InvalidInterruptError``, saying what to fix) instead of reaching a
    person. It is checked there and not in ``interrupt()``: tools catch ``Exception``, and
    a schema error caught by a tool would go back to the model as a tool result.
    """
    where = f"the interrupt raised in node `{interrupt.node}`"
    problems: list[str] = []
    if not isinstance(interrupt.reason, str) or not interrupt.reason:
        problems.append(f"reason must be a non-empty string, got {interrupt.reason!r}")
    elif len(interrupt.reason) > MAX_REASON_CHARS:
        problems.append(
            f"reason is {len(interrupt.reason)} characters, over the limit of "
            f"{MAX_REASON_CHARS}; use a short label and put the detail in `message`"
        )
    if interrupt.message is not None and not isinstance(interrupt.message, str):
        problems.append(f"message must be a string, got {type(interrupt.message).__name__}")
    for name, data in (("reason", interrupt.reason), ("message", interrupt.message)):
        if isinstance(data, str) and (bad := json_problem(data)) is not None:
            problems.append(f"{name} {bad.removeprefix('$: ')}")
    if interrupt.summary is not None:
        if not isinstance(interrupt.summary, str) or not interrupt.summary.strip():
            problems.append(f"summary must be a non-empty string, got {interrupt.summary!r}")
        elif len(interrupt.summary) > MAX_SUMMARY_CHARS or "\n" in interrupt.summary:
            problems.append(
                f"summary is {len(interrupt.summary)} characters on "
                f"{interrupt.summary.count(chr(10)) + 1} line(s); it must be one line of at "
                f"most {MAX_SUMMARY_CHARS}; put the detail in `message`"
            )
        elif (bad := json_problem(interrupt.summary)) is not None:
            problems.append(f"summary {bad.removeprefix('$: ')}")
    if (bad := json_problem(interrupt.value)) is not None:
        problems.append(f"value {bad}")
    for name in interrupt.assign_to or []:
        kind, _, rest = name.partition(":") if isinstance(name, str) else ("", "", "")
        if kind not in ("user", "group") or not rest or len(name) > 200:
            problems.append(
                f"assign_to has {name!r}; each entry is 'user:<username>' or 'group:<name>'"
            )
    if interrupt.response_schema is not None:
        if (bad := schema_problem(interrupt.response_schema)) is not None:
            problems.append(f"response_schema {bad}")
    if problems:
        raise InvalidInterruptError(
            f"{where} cannot be sent to a person: " + "; ".join(problems),
            interrupt_id=interrupt.id,
            node=interrupt.node,
            problems=problems,
        )
