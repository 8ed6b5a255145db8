"""Graphs: build with ``StateGraph``, ``compile()`` into an immutable ``CompiledGraph``, run.

A compiled graph runs one thread at a time per call. ``_execute`` is the whole runtime: load
the thread, accept the input, then step node by node, checkpointing at every boundary, until
END or a pause. ``ainvoke`` and ``astream`` are two views of that one loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agents import inbox
from agents.checkpoint import (
    CheckpointConflict,
    Checkpointer,
    CheckpointRecord,
    CheckpointWrite,
    Snapshot,
    ThreadStatus,
)
from agents.errors import (
    CheckpointerRequiredError,
    GraphRecursionError,
    GraphSetupError,
    InterruptMismatchError,
    InvalidInputError,
    ResumeValidationError,
    ThreadNotPausedError,
)
from agents.interrupt import (
    MAX_SUMMARY_CHARS,
    GraphInterrupt,
    Interrupt,
    RunContext,
    _current,
    check_interrupt,
    current_run,
    validate_resume,
)
from agents.state import (
    AgentState,
    Conversation,
    ExecutionMeta,
    Message,
    ResponseGranularity,
    StreamChunk,
    StreamEvent,
    new_id,
)
from agents.tools import (
    ToolNode,
    approval_schema,
    decline_reason,
    describe_call,
    edits_key,
    summarize_call,
)

__all__ = ["END", "CompiledGraph", "StateGraph", "current_run"]

END = "__end__"
_CORE_FIELDS = frozenset({"context", "execution_meta", "interrupt"})
# A step leaves out of its stored meta the fields still at these values.
_DEFAULT_EXECUTION = ExecutionMeta().to_dict()
BREAKPOINT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}
_NEEDS_CHECKPOINTER = "pausing needs a checkpointer: compile(checkpointer=InMemoryCheckpointer())"

Emit = Callable[[StreamChunk], None]


@dataclass(frozen=True)
class _Branch:
    path: Callable[[Any], Any]
    path_map: Mapping[Any, str] | None

    def targets(self) -> list[str]:
        return list(self.path_map.values()) if self.path_map is not None else []


class StateGraph:
    """A graph under construction. Nodes take ``(state)`` or ``(state, config)``, may be
    sync or async, and return None, a Message, a list of Messages, or a dict with
    ``"messages"`` (appended) and/or fields of the state type (replaced)."""

    def __init__(self, state_type: type[AgentState] = AgentState) -> None:
        if not (isinstance(state_type, type) and issubclass(state_type, AgentState)):
            raise GraphSetupError(
                f"StateGraph({state_type!r}): the state type must be AgentState or a "
                "dataclass subclass of it"
            )
        self.state_type = state_type
        self.nodes: dict[str, Callable[..., Any]] = {}
        self.edges: dict[str, str | _Branch] = {}
        self.entry: str | None = None

    def add_node(self, name: str, fn: Callable[..., Any]) -> StateGraph:
        """Add a node: a function of the state, or a ``ToolNode`` for a model's tool calls."""
        if name == END:
            raise GraphSetupError(
                f"{END!r} is reserved for the end of the graph; name the node otherwise"
            )
        if name in self.nodes:
            raise GraphSetupError(
                f"there is already a node `{name}`; give the second node another name"
            )
        if not callable(fn):
            raise GraphSetupError(f"node `{name}` must be a function or callable, got {fn!r}")
        self.nodes[name] = fn
        return self

    def add_edge(self, source: str, target: str) -> StateGraph:
        self._set_edge(source, target)
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable[[Any], Any],
        path_map: Mapping[Any, str] | Iterable[str] | None = None,
    ) -> StateGraph:
        """Route from ``source`` to ``path(state)`` (looked up in ``path_map`` if given)."""
        if path_map is not None and not isinstance(path_map, Mapping):
            path_map = {name: name for name in path_map}
        self._set_edge(source, _Branch(path, dict(path_map) if path_map is not None else None))
        return self

    def set_entry_point(self, name: str) -> StateGraph:
        self.entry = name
        return self

    def _set_edge(self, source: str, edge: str | _Branch) -> None:
        if source in self.edges:
            raise GraphSetupError(
                f"node `{source}` already has an outgoing edge; a node has one add_edge(...) "
                "or one add_conditional_edges(...) router that picks among several targets"
            )
        self.edges[source] = edge

    def compile(
        self,
        checkpointer: Checkpointer | None = None,
        interrupt_before: Iterable[str] = (),
        interrupt_after: Iterable[str] = (),
    ) -> CompiledGraph:
        """Validate the graph and freeze it. Every node needs an outgoing edge; use
        ``add_edge(name, END)`` to finish after a node."""
        before, after = frozenset(interrupt_before), frozenset(interrupt_after)
        self._validate(checkpointer, before, after)
        return CompiledGraph(
            state_type=self.state_type,
            nodes=MappingProxyType(dict(self.nodes)),
            edges=MappingProxyType(dict(self.edges)),
            entry=str(self.entry),
            checkpointer=checkpointer,
            interrupt_before=before,
            interrupt_after=after,
            wants_config=frozenset(n for n, fn in self.nodes.items() if _wants_config(fn)),
            extra_fields=tuple(
                f.name for f in dataclasses.fields(self.state_type) if f.name not in _CORE_FIELDS
            ),
        )

    def _validate(
        self, checkpointer: Checkpointer | None, before: frozenset[str], after: frozenset[str]
    ) -> None:
        def no_node(name: str) -> str:
            return f"no node `{name}`; add it with add_node({name!r}, fn)"

        if self.entry is None:
            raise GraphSetupError("the graph has no entry point; call set_entry_point('NODE')")
        if self.entry not in self.nodes:
            raise GraphSetupError(
                f"the entry point is `{self.entry}`, but there is {no_node(self.entry)}"
            )
        for source, edge in self.edges.items():
            if source not in self.nodes:
                raise GraphSetupError(
                    f"an edge starts at `{source}`, but there is {no_node(source)}"
                )
            for target in [edge] if isinstance(edge, str) else edge.targets():
                if target != END and target not in self.nodes:
                    raise GraphSetupError(
                        f"edge from `{source}` to `{target}`, but there is {no_node(target)}"
                    )
        for name in self.nodes:
            if name not in self.edges:
                raise GraphSetupError(
                    f"node `{name}` has no outgoing edge; add_edge({name!r}, END) to finish there"
                )
        for label, names in (("interrupt_before", before), ("interrupt_after", after)):
            for name in sorted(names - set(self.nodes)):
                raise GraphSetupError(
                    f"{label} names `{name}`, but there is no such node; nodes: "
                    + ", ".join(sorted(self.nodes))
                )
        if (before or after) and checkpointer is None:
            raise GraphSetupError(f"interrupt_before/interrupt_after: {_NEEDS_CHECKPOINTER}")
        try:
            self.state_type()
        except TypeError as exc:
            raise GraphSetupError(
                f"{self.state_type.__name__}() failed ({exc}); give every field a default"
            ) from exc


def _wants_config(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


async def _load_at(
    store: Checkpointer, thread_id: str, expected: int | None, cause: BaseException | None = None
) -> Snapshot | None:
    """The thread, loaded, if its newest checkpoint is ``expected``; else, the thread having
    moved on, ``CheckpointConflict`` (from ``cause``) and nothing is applied or run."""
    snapshot = await store.aget(thread_id)
    actual = snapshot.seq if snapshot else None
    if actual != expected:
        raise CheckpointConflict(thread_id, expected, actual) from cause
    return snapshot


def _as_message(item: Any) -> Message:
    if isinstance(item, Message):
        return item
    if isinstance(item, dict) and "role" in item:
        return Message.from_dict(item)
    raise InvalidInputError(
        f"a message must be a Message or a dict with 'role' and 'content', got {item!r}"
    )


def _breakpoint(node: str, when: str, state: AgentState, tool_node: Any = None) -> Interrupt:
    last = state.context[-1] if state.context else None
    value = None
    schema = BREAKPOINT_SCHEMA
    # Say what is at stake in the reviewer's terms: the calls about to run, when there are.
    # The node's name is for developers; it stays in the request's ``node`` field.
    message = "The agent stopped for a check: approve to let it go on, or decline."
    summary = "Check before the agent goes on"
    if last is not None and last.role == "assistant" and last.tools_calls:
        calls = last.tool_call_arguments()
        value = {"tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in calls]}
        tools = tool_node.tools if isinstance(tool_node, ToolNode) else {}
        wanted = "; ".join(describe_call(n, a, tools.get(n)) for _, n, a in calls)
        message = f"Approve {wanted}?"
        summary = "; ".join(summarize_call(n, a, tools.get(n)) for _, n, a in calls)
        if when == "before" and isinstance(tool_node, ToolNode):
            # Before the tools run, the reviewer gives one of the answers a high-risk
            # tool's approval takes: accept, edit (the calls to known tools that have
            # arguments, each checked against its tool's parameters), respond or ignore.
            schema = approval_schema(
                {
                    i: (a, tool_node.tools[n].parameters)
                    for i, n, a in calls
                    if n in tool_node.tools and a
                }
            )
    return Interrupt(
        id=new_id("int"),
        key=f"{node}:{when}",
        node=node,
        value=value,
        message=message,
        reason="breakpoint",
        response_schema=schema,
        summary=summary if len(summary) <= MAX_SUMMARY_CHARS else summary[:199] + "…",
    )


def _breakpoint_answer(value: Any, schema: Any) -> tuple[bool, str | None, dict[str, Any] | None]:
    """(go on, what the model is told if not, edited arguments by call id) from an answer
    to a breakpoint: a typed one (before the tools) or a yes/no one (anywhere else, and
    breakpoints paused before they took typed answers). Fail closed either way."""
    if inbox.declared(schema) is not None:
        edits = (
            value.get("args") if isinstance(value, dict) and value.get("type") == "edit" else None
        )
        return inbox.goes_ahead(value), decline_reason(value), edits or None
    approved = isinstance(value, dict) and value.get("approved") is True
    note = value.get("note") if isinstance(value, dict) else None
    edits = value.get("args") if approved else None
    return approved, note, edits if isinstance(edits, dict) and edits else None


class _Run:
    """One invocation's view of a thread: the live state and what is not yet saved."""

    def __init__(
        self,
        graph: CompiledGraph,
        snapshot: Snapshot | None,
        *,
        thread_id: str,
        run_id: str,
        config: dict[str, Any],
        emit: Emit | None,
    ) -> None:
        self.graph, self.thread_id, self.run_id = graph, thread_id, run_id
        self.config, self.emit_fn = config, emit
        self.state = graph.state_from(snapshot)
        self.state.execution_meta.step = 0
        meta = snapshot.meta if snapshot else {}
        self.seq = snapshot.seq if snapshot else None
        self.status = snapshot.status if snapshot else None
        self.next_node = snapshot.next_node if snapshot else None
        self.answers: dict[str, Any] = dict(meta.get("answers") or {})
        self.passed: str | None = meta.get("breakpoint_passed")
        # Tool calls recorded as started with no result saved (see agents.tools): as
        # loaded, those an earlier run left, whose outcome is unknown.
        self.in_flight: list[str] = list(meta.get("in_flight") or [])
        self.unsaved: list[Message] = []
        # Steps kept for the next write, which comes before anything can act: one round
        # trip for several boundaries (see ``save``).
        self.deferred: list[CheckpointWrite] = []

    def emit(self, event: StreamEvent, message: Message | None = None, **data: Any) -> None:
        if self.emit_fn is not None:
            self.emit_fn(
                StreamChunk(
                    event=event,
                    message=message,
                    state=self.state if event is StreamEvent.STATE else None,
                    data=data,
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                )
            )

    def append(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self.state.context.append(message)
            self.unsaved.append(message)
            self.emit(StreamEvent.MESSAGE, message, complete=True)

    async def save(
        self,
        status: ThreadStatus,
        next_node: str | None,
        *,
        node: str | None,
        interrupt: dict[str, Any] | None = None,
        defer: bool = False,
    ) -> None:
        """Record a step: written now, with any kept before it, or with ``defer`` kept for
        the next write (see ``flush``). Only a step that nothing can act on before that
        write is kept: the input, and what comes right before a ``ToolNode``, which writes
        before it calls a tool."""
        self.state.interrupt = interrupt
        self.status, self.next_node = status, next_node
        store = self.graph.checkpointer
        if store is not None:
            # Defaults are left out (every reader falls back to them): most steps store
            # only their step number, and a long thread keeps many steps.
            meta: dict[str, Any] = {}
            fields = self.state.execution_meta.to_dict().items()
            execution = {k: v for k, v in fields if v != _DEFAULT_EXECUTION[k]}
            if execution:
                meta["execution_meta"] = execution
            if self.answers:
                meta["answers"] = dict(self.answers)
            if self.passed is not None:
                meta["breakpoint_passed"] = self.passed
            if self.in_flight:
                meta["in_flight"] = list(self.in_flight)
            if self.graph.extra_fields:
                meta["values"] = {k: getattr(self.state, k) for k in self.graph.extra_fields}
            write = CheckpointWrite(
                status=status,
                next_node=next_node,
                new_messages=[m.to_dict() for m in self.unsaved],
                meta=meta,
                interrupt=interrupt,
                node=node,
            )
            if defer:
                self.deferred.append(write)
            else:
                await self._put([*self.deferred, write])
        self.unsaved.clear()

    async def flush_after(self, error: Exception) -> None:
        """On a failure, write what was kept for later (the input, a node's end) so a retry
        goes on from it; a failure to write it is noted on ``error``, which is
        what the caller sees."""
        try:
            await self.flush()
        except Exception as failed:
            error.add_note(f"the run's last steps could not be saved either: {failed}")

    async def flush(self) -> None:
        """Write the kept steps now: their compare-and-swap comes before anything acts."""
        if self.deferred:
            await self._put(self.deferred)

    async def _put(self, writes: list[CheckpointWrite]) -> None:
        store = self.graph.checkpointer
        assert store is not None
        if len(writes) == 1:
            self.seq = await store.aput(self.thread_id, writes[0], parent_seq=self.seq)
        else:
            self.seq = await store.aput_steps(self.thread_id, writes, parent_seq=self.seq)
        self.deferred = []

    async def pause(self, pending: Interrupt, next_node: str, when: str | None = None) -> _Run:
        meta = self.state.execution_meta
        meta.interrupted_node, meta.breakpoint = pending.node, when
        data = pending.to_dict()
        await self.save(ThreadStatus.INTERRUPTED, next_node, node=pending.node, interrupt=data)
        self.emit(StreamEvent.UPDATES, status="interrupted", interrupt=data)
        return self

    def unpause(self) -> None:
        meta = self.state.execution_meta
        meta.interrupted_node = meta.breakpoint = None
        self.state.interrupt = None

    async def finish(self) -> _Run:
        self.emit(StreamEvent.UPDATES, status="done")
        self.emit(StreamEvent.STATE)
        return self

    def context_for(self, node: str) -> RunContext:
        async def append_and_save(messages: list[Message]) -> None:
            self.append(messages)
            await self.save(ThreadStatus.RUNNING, node, node=node)

        async def mark_in_flight() -> int | None:
            # A step of its own, with whatever the run kept for later; its seq fences the call.
            await self.save(ThreadStatus.RUNNING, node, node=node)
            return self.seq

        return RunContext(
            node=node,
            thread_id=self.thread_id,
            run_id=self.run_id,
            config=self.config,
            answers=self.answers,
            emit=self.emit_fn,
            append=append_and_save,
            mark=mark_in_flight,
            in_flight=self.in_flight,
        )


@dataclass(frozen=True, eq=False)
class CompiledGraph:
    """A validated, immutable graph bound to an optional checkpointer."""

    state_type: type[AgentState]
    nodes: Mapping[str, Callable[..., Any]]
    edges: Mapping[str, str | _Branch]
    entry: str
    checkpointer: Checkpointer | None
    interrupt_before: frozenset[str]
    interrupt_after: frozenset[str]
    wants_config: frozenset[str]
    extra_fields: tuple[str, ...]

    # -- the loop ----------------------------------------------------------------------

    async def _execute(self, input: Any, config: dict[str, Any] | None, emit: Emit | None) -> _Run:
        run = await self._open(config, emit)
        node = await self._accept(run, input)
        limit = int(run.config.get("recursion_limit", 25))
        try:
            while node is not None and node != END:
                if node in self.interrupt_before and run.passed != node:
                    return await run.pause(
                        _breakpoint(node, "before", run.state, self.nodes.get(node)),
                        node,
                        "before",
                    )
                run.state.execution_meta.step += 1
                if run.state.execution_meta.step > limit:
                    raise GraphRecursionError(
                        f"the graph ran {limit} steps without reaching END; raise "
                        "config['recursion_limit'] or check the routing for a loop",
                        limit=limit,
                    )
                if not isinstance(self.nodes[node], ToolNode):
                    # The kept steps' compare-and-swap comes first: a node that may act on
                    # the world runs only once its run is known to own the thread. (A
                    # ToolNode writes before each call it makes.)
                    await run.flush()
                run.emit(StreamEvent.UPDATES, status="node_start", node=node)
                try:
                    await self._call_node(run, node)
                except GraphInterrupt as paused:
                    if self.checkpointer is None:
                        raise CheckpointerRequiredError(_NEEDS_CHECKPOINTER) from None
                    check_interrupt(paused.interrupt)  # a bad request fails the run here
                    return await run.pause(paused.interrupt, node)
                run.emit(StreamEvent.UPDATES, status="node_end", node=node)
                run.answers.clear()
                run.in_flight.clear()
                run.passed = None
                after = self._route(node, run.state)
                if node in self.interrupt_after:
                    return await run.pause(_breakpoint(node, "after", run.state), after, "after")
                await self._save_boundary(run, node, after)
                node = after
        except Exception as exc:
            await run.flush_after(exc)
            run.emit(StreamEvent.ERROR, error=str(exc), type=type(exc).__name__, node=node)
            raise
        await run.flush()  # (the end is written at once: normally none is left)
        return await run.finish()

    async def _save_boundary(self, run: _Run, node: str | None, next_node: str | None) -> None:
        """The boundary after ``node``: written at once where the run ends, or kept for
        the next write when a ``ToolNode`` runs next (its first write comes before any
        call it makes, and a crash in between costs a replay of ``node`` at most)."""
        if next_node is None or next_node == END:
            await run.save(ThreadStatus.DONE, None, node=node)
        else:
            defer = isinstance(self.nodes[next_node], ToolNode)
            await run.save(ThreadStatus.RUNNING, next_node, node=node, defer=defer)

    async def _call_node(self, run: _Run, node: str) -> None:
        fn = self.nodes[node]
        token = _current.set(run.context_for(node))
        try:
            result = fn(run.state, run.config) if node in self.wants_config else fn(run.state)
            if inspect.isawaitable(result):
                result = await result
        finally:
            _current.reset(token)
        self._apply(run, node, result)

    def _apply(self, run: _Run, node: str, result: Any) -> None:
        if result is None:
            return
        if isinstance(result, Message):
            run.append([result])
        elif isinstance(result, list):
            run.append(_as_message(m) for m in result)
        elif isinstance(result, dict):
            for key, value in result.items():
                if key == "messages":
                    run.append(_as_message(m) for m in value or [])
                elif key in self.extra_fields:
                    setattr(run.state, key, value)
                else:
                    raise GraphSetupError(
                        f"node `{node}` returned {key!r}, which {self.state_type.__name__} has "
                        "no field for; add the field to your AgentState subclass, or return "
                        "{'messages': [...]} (history is append-only)"
                    )
        else:
            raise GraphSetupError(
                f"node `{node}` returned {type(result).__name__}; return None, a Message, a "
                "list of Messages, or a dict with 'messages' and/or state fields"
            )

    def _route(self, node: str, state: AgentState) -> str:
        edge = self.edges[node]
        if isinstance(edge, str):
            return edge
        key = edge.path(state)
        target = edge.path_map.get(key) if edge.path_map is not None else key
        if not isinstance(target, str) or (target != END and target not in self.nodes):
            options = edge.targets() or [*self.nodes, END]
            raise GraphSetupError(
                f"the router of `{node}` returned {key!r}, which leads to no node; return one "
                f"of {sorted(options)!r} (or add it to path_map)"
            )
        return target

    # -- inputs ------------------------------------------------------------------------

    async def _open(self, config: dict[str, Any] | None, emit: Emit | None) -> _Run:
        config = dict(config or {})
        thread_id = config.get("thread_id")
        if self.checkpointer is not None and not thread_id:
            raise InvalidInputError(
                "pass config={'thread_id': ...}: a graph with a checkpointer keeps each "
                "conversation under a thread id"
            )
        thread_id = str(thread_id or new_id("thread"))
        snapshot = await self._load(thread_id, config)
        run_id = str(config.get("run_id") or new_id("run"))
        return _Run(self, snapshot, thread_id=thread_id, run_id=run_id, config=config, emit=emit)

    async def _load(self, thread_id: str, config: dict[str, Any]) -> Snapshot | None:
        store = self.checkpointer
        if store is None:
            return None
        if "expected_seq" not in config:
            return await store.aget(thread_id)
        # The caller chose its input from the thread as of that checkpoint (a worker: the
        # thread's row when it took the run): if it moved on, nothing is applied.
        return await _load_at(store, thread_id, config["expected_seq"] or None)

    async def _accept(self, run: _Run, input: Any) -> str | None:
        """Check the input against the thread's status; return the node to run next."""
        if input is None:
            input = {"messages": []}
        if not isinstance(input, dict):
            raise InvalidInputError(
                "the input must be a dict: {'messages': [...]} to add messages or "
                "{'resume': value} to answer a pending interrupt"
            )
        if "resume" in input:
            return await self._accept_resume(run, input)
        extra = sorted(set(input) - {"messages"})
        if extra:
            raise InvalidInputError(
                f"unexpected input keys {extra}; pass {{'messages': [...]}} to add messages or "
                "{'resume': ...} to answer an interrupt. State cannot be set through the input.",
                keys=extra,
            )
        messages = [_as_message(m) for m in input.get("messages") or []]
        if run.status is ThreadStatus.INTERRUPTED and run.state.interrupt:
            pending = Interrupt.from_dict(run.state.interrupt)
            if messages or pending.reason != "breakpoint":
                hint = (
                    " (or continue it with {'messages': []})"
                    if pending.reason == "breakpoint"
                    else ""
                )
                raise InvalidInputError(
                    f"thread {run.thread_id!r} is paused on interrupt {pending.id}; answer it "
                    f"with {{'resume': ..., 'resume_interrupt_id': {pending.id!r}}}{hint}",
                    thread_id=run.thread_id,
                    interrupt_id=pending.id,
                )
            return await self._end_breakpoint(run, pending, approved=True, note=None)
        if run.status is ThreadStatus.RUNNING:
            if messages:
                raise InvalidInputError(
                    f"thread {run.thread_id!r} has an unfinished run (next node "
                    f"`{run.next_node}`); continue it with {{'messages': []}} first",
                    thread_id=run.thread_id,
                )
            # A step of its own, with no messages, kept for the next write like an input:
            # a run that continues the thread (a retry, a worker taking over) must own it,
            # by the compare-and-swap, before anything acts.
            await run.save(ThreadStatus.RUNNING, run.next_node, node=None, defer=True)
            return run.next_node
        if not messages:
            return None  # a new or finished thread, and nothing to add
        run.append(messages)
        # A step of its own, kept for the next write, which comes before anything acts (so
        # of two runs racing on the thread, the compare-and-swap stops one before it acts)
        # or when the run fails (so it can be retried).
        await run.save(ThreadStatus.RUNNING, self.entry, node=None, defer=True)
        return self.entry

    async def _accept_resume(self, run: _Run, input: dict[str, Any]) -> str | None:
        extra = sorted(set(input) - {"resume", "resume_interrupt_id"})
        if extra:
            raise InvalidInputError(
                f"a resume takes only 'resume' and 'resume_interrupt_id', got also {extra}; "
                "state edits and jumps to other nodes are not accepted",
                keys=extra,
            )
        if self.checkpointer is None:
            raise CheckpointerRequiredError(f"resuming a thread: {_NEEDS_CHECKPOINTER}")
        if run.status is not ThreadStatus.INTERRUPTED or not run.state.interrupt:
            status = run.status.value if run.status else "new"
            raise ThreadNotPausedError(
                f"thread {run.thread_id!r} is not paused on an interrupt (status: {status}); "
                "there is nothing to resume. Start a turn with {'messages': [...]}",
                thread_id=run.thread_id,
                status=status,
            )
        pending = Interrupt.from_dict(run.state.interrupt)
        given = input.get("resume_interrupt_id")
        if given is not None and given != pending.id:
            raise InterruptMismatchError(thread_id=run.thread_id, expected=pending.id, given=given)
        # A yes/no approval still answers a request that declares typed answers.
        value = inbox.from_approval(input["resume"], pending.response_schema)
        errors = validate_resume(value, pending.response_schema)
        if errors:
            raise ResumeValidationError(errors, interrupt_id=pending.id)
        if pending.reason == "breakpoint":
            approved, note, edits = _breakpoint_answer(value, pending.response_schema)
            if edits:
                # Kept with the answers until the node completes: its calls use them.
                run.answers[edits_key(pending.node)] = {"id": pending.id, "value": edits}
            return await self._end_breakpoint(run, pending, approved=approved, note=note)
        run.answers[pending.key] = {"id": pending.id, "value": value}
        run.unpause()
        # The compare-and-swap of the write that records the answer lets only one resume
        # act on it, so that write comes before the node may act: before it runs again,
        # or, for a ToolNode, with its first write, which comes before its first effect
        # (recording the call in flight).
        node = pending.node
        await run.save(
            ThreadStatus.RUNNING, node, node=node, defer=isinstance(self.nodes[node], ToolNode)
        )
        return node

    async def _end_breakpoint(
        self, run: _Run, pending: Interrupt, *, approved: bool, note: str | None
    ) -> str | None:
        when, next_node = run.state.execution_meta.breakpoint, run.next_node
        run.unpause()
        if approved:
            if when == "before":
                run.passed = pending.node
            await self._save_boundary(run, pending.node, next_node)
            return next_node
        fn = self.nodes[pending.node]
        if when == "before" and isinstance(fn, ToolNode):
            # The reviewer refused the calls: each gets a declined result, the model goes on.
            run.append(fn.decline(run.state, note))
            next_node = self._route(pending.node, run.state)
            await self._save_boundary(run, pending.node, next_node)
            return next_node
        await run.save(ThreadStatus.DONE, None, node=pending.node)
        return None

    # -- public API ----------------------------------------------------------------------

    def state_from(self, snapshot: Snapshot | None) -> AgentState:
        state = self.state_type()
        if snapshot is None:
            return state
        # Each message is built when a node first reads it (``Conversation``).
        state.context = Conversation(snapshot.messages)
        state.execution_meta = ExecutionMeta.from_dict(snapshot.meta.get("execution_meta"))
        state.interrupt = snapshot.interrupt
        for key, value in (snapshot.meta.get("values") or {}).items():
            if key in self.extra_fields:
                setattr(state, key, value)
        return state

    def _output(self, run: _Run, granularity: ResponseGranularity) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": run.state.context}
        if granularity is not ResponseGranularity.LOW:
            out["interrupt"] = run.state.interrupt
            out["thread_id"] = run.thread_id
            out["seq"] = run.seq
        if granularity is ResponseGranularity.FULL:
            out["state"] = run.state
        return out

    async def ainvoke(
        self,
        input: dict[str, Any] | None,
        config: dict[str, Any] | None = None,
        response_granularity: ResponseGranularity = ResponseGranularity.LOW,
    ) -> dict[str, Any]:
        """Run until END or a pause. Returns ``{"messages": <the whole context>}``; PARTIAL
        adds ``"interrupt"`` (the pending interrupt dict or None), ``"thread_id"`` and
        ``"seq"`` (the thread's newest checkpoint, None without a checkpointer);
        FULL adds ``"state"``.

        ``config``: ``thread_id`` (needed with a checkpointer), ``run_id``,
        ``recursion_limit`` (25), and ``expected_seq``: the thread's newest checkpoint the
        input was chosen for (0 for none; PARTIAL's ``"seq"`` is one); if the thread moved
        on, ``CheckpointConflict`` is raised and nothing is applied."""
        run = await self._execute(input, config, None)
        return self._output(run, response_granularity)

    def invoke(
        self,
        input: dict[str, Any] | None,
        config: dict[str, Any] | None = None,
        response_granularity: ResponseGranularity = ResponseGranularity.LOW,
    ) -> dict[str, Any]:
        """``ainvoke`` for synchronous code (not callable from inside an event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ainvoke(input, config, response_granularity))
        raise RuntimeError(
            "invoke() cannot run inside a running event loop; use `await graph.ainvoke(...)`"
        )

    async def astream(
        self,
        input: dict[str, Any] | None,
        config: dict[str, Any] | None = None,
        response_granularity: ResponseGranularity = ResponseGranularity.LOW,
    ) -> AsyncIterator[StreamChunk]:
        """Run and yield chunks as they happen: MESSAGE deltas and completed messages,
        UPDATES node_start/node_end, then either one UPDATES ``interrupted`` chunk, or
        UPDATES ``done`` (plus a STATE chunk above LOW). A node's exception yields one
        ERROR chunk and is then raised."""
        queue: asyncio.Queue[StreamChunk | None] = asyncio.Queue()
        task = asyncio.ensure_future(self._execute(input, config, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (chunk := await queue.get()) is not None:
                if (
                    chunk.event is StreamEvent.STATE
                    and response_granularity is ResponseGranularity.LOW
                ):
                    continue
                yield chunk
            task.result()
        finally:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task

    def _store(self) -> Checkpointer:
        if self.checkpointer is None:
            raise CheckpointerRequiredError(
                "threads are stored only with a checkpointer: compile(checkpointer=...)"
            )
        return self.checkpointer

    async def aget_state(self, thread_id: str) -> AgentState | None:
        """The thread's state as last checkpointed (``.interrupt`` set while paused)."""
        snapshot = await self._store().aget(thread_id)
        return None if snapshot is None else self.state_from(snapshot)

    async def aget_history(self, thread_id: str) -> list[CheckpointRecord]:
        return await self._store().alist(thread_id)

    async def aclose(self) -> None:
        """Close the nodes' models and the checkpointer."""
        seen: set[int] = set()
        for fn in self.nodes.values():
            close = getattr(fn, "aclose", None)
            if close is not None and id(fn) not in seen:
                seen.add(id(fn))
                await close()
        if self.checkpointer is not None:
            await self.checkpointer.aclose()

    async def __aenter__(self) -> CompiledGraph:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
