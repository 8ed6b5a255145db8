"""What a decision records: its outcome, and the tool arguments asked for and run.

``outcome_and_args`` reads them from the request and the answer (and, for a question
asked inside a tool, from the thread's checkpoints); both the decision path and the
expiry use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agents import inbox
from agents.state import Message
from agents.tools import OUTCOME_REASON
from portal.models import Checkpoint, Decision, Interrupt
from portal.reviews import sql

__all__ = ["asking_steps_columns", "outcome_and_args"]

# The steps read with the locked request: the call an in-tool question belongs to is in
# the step that paused or one of the two before it. The runtime writes the model's step
# (the call), then a step of the call's own that marks it in flight, then the pause.
_STEPS_WITH_THE_LOCK = 3


def asking_steps_columns() -> dict[str, Any]:
    """Annotations of an interrupt query: the messages of the steps ``_asking_call_args``
    looks in first, for a request asked inside a tool (read in the query that locks it).
    Read for every request: a condition on ``tool_call_id`` costs Django more to build
    than the messages cost to fetch."""
    return {f"asking_step_{back}": sql.asking_step(back) for back in range(_STEPS_WITH_THE_LOCK)}


def _messages_newest_first(interrupt: Interrupt) -> Iterator[Any]:
    steps = Checkpoint.objects.filter(thread_id=interrupt.thread_id)
    seq = interrupt.checkpoint_seq
    if "asking_step_0" not in interrupt.__dict__:
        yield from steps.filter(seq__lte=seq).messages_newest_first()
        return
    for back in range(_STEPS_WITH_THE_LOCK):
        yield from reversed(interrupt.__dict__[f"asking_step_{back}"] or [])
    yield from steps.filter(seq__lte=seq - _STEPS_WITH_THE_LOCK).messages_newest_first()


def _asking_call_args(interrupt: Interrupt) -> dict[str, Any] | None:
    """Arguments of the tool call an in-tool ``interrupt()`` belongs to, from the thread's
    checkpoints (newest first: the call is in the step that paused or just before). The
    question about a call a crash cut short names the arguments the call ran with, which
    an approval's edit may have changed from the model's, and those are what a "retry"
    runs again."""
    asked = interrupt.value if isinstance(interrupt.value, dict) else {}
    call = asked.get("tool_call")
    ran_with = call.get("arguments") if isinstance(call, dict) else None
    if interrupt.reason == OUTCOME_REASON and isinstance(ran_with, dict):
        return ran_with
    for data in _messages_newest_first(interrupt):
        if not isinstance(data, dict) or data.get("role") != "assistant":
            continue
        for call_id, _name, args in Message.from_dict(data).tool_call_arguments():
            if call_id == interrupt.tool_call_id:
                return args
    return None


def outcome_and_args(
    interrupt: Interrupt, value: Any, *, said_no: bool = False
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(outcome, original_args, executed_args), args keyed by tool call id.

    Args are recorded when the request approves tool calls: the ToolNode's high-risk
    approval or a breakpoint before the tools (``value["tool_calls"]``, editable through
    ``value["args"]``), or an ``interrupt()`` inside a tool (``tool_call_id`` set;
    editable when it allows "edit"). Executed args are None unless it goes ahead.
    ``said_no``: ``value`` is the typed answer of a yes/no "no" (``from_approval``).
    """
    declared = inbox.declared(interrupt.response_schema)
    if declared is not None:
        outcome, original, executed = _typed_outcome(interrupt, declared, value)
        # A yes/no "no" reaches the agent as an ignore, but the reviewer refused: it is
        # recorded as the rejection a "no" always is; only an explicit ignore is ignored.
        return (Decision.Outcome.REJECTED if said_no else outcome), original, executed
    if value is None:
        outcome = Decision.Outcome.CANCELLED
    elif isinstance(value, dict) and "approved" in value:
        outcome = (
            Decision.Outcome.APPROVED if value["approved"] is True else Decision.Outcome.REJECTED
        )
    elif interrupt.reason == OUTCOME_REASON and isinstance(value, dict):
        # A call a crash cut short: "fail" says it did not happen, so nothing was executed.
        failed = value.get("outcome") == "fail"
        outcome = Decision.Outcome.REJECTED if failed else Decision.Outcome.APPROVED
    else:
        outcome = Decision.Outcome.APPROVED  # an answer to a question, not a yes/no
    calls = interrupt.tool_calls
    if calls:
        original = {call.id: call.args for call in calls}
    elif interrupt.tool_call_id:
        original = {interrupt.tool_call_id: _asking_call_args(interrupt)}
    else:
        return outcome, None, None
    if outcome != Decision.Outcome.APPROVED:
        return outcome, original, None
    executed = dict(original)
    edits = value.get("args") if isinstance(value, dict) else None
    if isinstance(edits, dict) and calls:
        for call_id, args in edits.items():
            if call_id in executed and isinstance(args, dict):
                executed[call_id] = args
    elif isinstance(edits, dict) and edits and interrupt.tool_call_id:
        # A tool that asked itself and let its arguments be changed (the refunds demo's
        # amount): what it runs with is what it asked with, changed by the edit.
        asked = original[interrupt.tool_call_id]
        executed[interrupt.tool_call_id] = {**(asked or {}), **edits}
    if executed != original:
        outcome = Decision.Outcome.EDITED
    return outcome, original, executed


# What each answer of a request that declared its actions is recorded as.
_TYPED_OUTCOMES = {
    "accept": Decision.Outcome.APPROVED,
    "edit": Decision.Outcome.EDITED,
    "response": Decision.Outcome.RESPONDED,
    "ignore": Decision.Outcome.IGNORED,
}


def _typed_outcome(
    interrupt: Interrupt, declared: inbox.Declared, value: Any
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    kind = value.get("type") if isinstance(value, dict) else None
    # None (cancelled) is the only answer without a type that reaches here.
    outcome = _TYPED_OUTCOMES.get(str(kind), Decision.Outcome.CANCELLED)
    calls = interrupt.tool_calls
    if calls:
        # An approval of tool calls (a high-risk tool's, a breakpoint's): arguments keyed
        # by call id, and an edit may change some calls and leave the others as asked.
        asked = {call.id: call.args for call in calls}
        if kind == "accept":
            return outcome, asked, dict(asked)
        if kind == "edit":
            edits = value.get("args") if isinstance(value.get("args"), dict) else {}
            return outcome, asked, {k: edits.get(k, v) for k, v in asked.items()}
        return outcome, asked, None
    offered = declared.args
    if interrupt.tool_call_id:
        offered = _asking_call_args(interrupt) if offered is None else offered
        key = interrupt.tool_call_id
    else:
        key = interrupt.node or "args"
    if offered is None and kind != "edit":
        return outcome, None, None
    original = {key: offered}
    if kind == "accept":
        return outcome, original, dict(original)
    if kind == "edit":
        return outcome, original, {key: value.get("args")}
    return outcome, original, None
