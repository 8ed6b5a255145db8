"""The runtime's identifiers as people read them: reasons, tool names, outcomes.

Pages show these words; the identifiers stay in the data, the filters and the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.tools import describe_call, value_words, words
from portal.models import WITHDRAWN_WORDS, Decision, outcome_name

REASONS = {
    "tool_approval": "Tool approval",
    "transfer_approval": "Transfer approval",
    "breakpoint": "Check before a step",
    "input_required": "Question",
    "uncertain_outcome": "Uncertain outcome",
}


def recorded_words(result: Any) -> str:
    """What a reviewer is told once their answer is recorded: the decision, or (on a
    request that needs several reviewers) their vote and what the request waits for."""
    outcome = outcome_words(str(result.outcome)).lower()
    needed = getattr(result, "needed", None)
    if needed:
        return f"Recorded your answer ({outcome}); the request now waits for {needed}."
    return f"Recorded: {outcome}. The agent continues in the background."


def reason_words(reason: str) -> str:
    """``tool_approval`` -> ``Tool approval``; a reason we do not know, in words."""
    if reason in REASONS:
        return REASONS[reason]
    text = words(reason or "")
    return text[:1].upper() + text[1:]


def tool_words(name: str) -> str:
    """``delete_account`` -> ``Delete account``."""
    text = words(name or "")
    return text[:1].upper() + text[1:]


def call_words(name: str, args: dict[str, Any] | None) -> str:
    """A tool call as a sentence's start: ``Delete account (user id: u-381)``."""
    text = describe_call(name, args)
    return text[:1].upper() + text[1:]


def decided_by_words(decision: Any) -> str:
    """Who made ``decision``, as every page, the chat and the exports name them: the
    reviewer's username, "rule R v3" for a decision rule's version (never a person), or
    "the system" (an expiry, a cancelled thread)."""
    if decision.rule_version_id is not None:
        return str(decision.rule_version)
    if decision.reviewer_id is not None:
        return str(decision.reviewer.get_username())
    return "the system"


@dataclass(frozen=True)
class Decided:
    """Who answered the request a tool call waited on, and how."""

    who: str
    outcome: str
    withdrawn: bool  # its requester took it back (not a reviewer's decline)


def result_words(content: str, tool: str | None, decided: Decided | None = None) -> str:
    """A tool's result as a support agent reads it. Results that are JSON objects (a
    decline, an error, a record) become a sentence; plain text stays as it is."""
    try:
        data = json.loads(content) if content.lstrip().startswith("{") else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return content
    what = tool_words(tool or "the tool")
    status = data.get("status")
    reason = data.get("reason") or data.get("error")
    reason_text = f": {_sentence(str(reason))}" if reason else "."
    if status == "withdrawn":
        who = f", {decided.who}" if decided is not None and decided.withdrawn else ""
        return f"{what} withdrawn by its requester{who}."
    if status == "declined":
        if decided is not None and decided.withdrawn:
            return f"{what} withdrawn by its requester, {decided.who}."
        if decided is not None and decided.outcome == "expired":
            return f"{what} not done: the request expired."
        if decided is not None:
            return f"{what} declined by {decided.who}{reason_text}"
        return f"{what} declined{reason_text}"
    if status == "error":
        return f"{what} failed{reason_text}"
    listed = "; ".join(f"{words(str(k))}: {_plain(v)}" for k, v in data.items())
    return f"{what}: {listed}."


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


# The outcomes' names live on the model's choices, so the admin and every page agree.
OUTCOMES = dict(Decision.Outcome.choices)


def outcome_words(outcome: str) -> str:
    """``edited`` -> ``Approved with edited arguments``."""
    return outcome_name(outcome) or reason_words(outcome)


def answer_words(outcome: str, value: Any, *, withdrawn: bool = False) -> str:
    """What a reviewer answered, as a sentence: the outcome, and any text they wrote for
    the agent (a response, an answer to a question) in their words."""
    if withdrawn:
        return "Withdrawn by its requester."
    text = outcome_words(outcome)
    said = None
    if isinstance(value, dict):
        if value.get("type") == "response" and isinstance(value.get("args"), str):
            said = value["args"]
        elif "type" not in value and "approved" not in value and "outcome" not in value:
            # An answer to an agent's own question: its fields, readably.
            said = "; ".join(
                f"{words(str(k))}: {_plain(v)}" for k, v in value.items() if k != "note"
            )
        elif value.get("outcome") in ("confirm", "retry", "fail"):
            said = {
                "confirm": "it took effect",
                "retry": "run it again",
                "fail": "it did not take effect",
            }[value["outcome"]]
    return f"{text}: {_sentence(said)}" if said else f"{text}."


# --- the history's words: agents, outcomes, submitted answers and edits ----------------

WITHDRAWN = WITHDRAWN_WORDS


def agent_words(name: str) -> str:
    """``refunds`` -> ``Refunds``: an agent's name as the pages show it."""
    return tool_words(name)


def decision_words(outcome: str, *, withdrawn: bool = False) -> str:
    """A decision's outcome as every page names it; a withdrawal is never a reviewer's no."""
    return WITHDRAWN if withdrawn else outcome_words(outcome)


def ending_words(outcome: str, note: str = "", *, withdrawn: bool = False) -> str:
    """How a finished conversation's latest request ended, as support's list says it:
    the outcome, and a refusal (rejected, ignored) with its reason."""
    if withdrawn:
        return WITHDRAWN
    text = outcome_words(outcome)
    note = (note or "").strip()
    return f"{text}: {note}" if outcome in ("rejected", "ignored") and note else text


def outcome_choices() -> list[tuple[str, str]]:
    """(code, words) for an outcome filter: the words the pages show, the codes sent."""
    return list(OUTCOMES.items())


def field_value_words(name: str, value: Any) -> str:
    """One argument's value as a reviewer reads it (``amount``, 60 -> ``$60.00``): the
    runtime's ``value_words``, which request messages use too, so amounts read one way."""
    return "(none)" if value is None else value_words(name, value)


@dataclass(frozen=True)
class Change:
    """One argument a reviewer changed: ``amount: $120.00 → $60.00``."""

    field: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.field}: {self.before} → {self.after}"


def arg_changes(before: Any, after: Any) -> list[Change]:
    """The arguments that differ between ``before`` and ``after`` (two dicts), field by
    field, in the order the call named them; fields added or dropped read "(none)"."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    keys = [*old, *(k for k in new if k not in old)]
    return [
        Change(
            words(str(k)),
            field_value_words(str(k), old.get(k)),
            field_value_words(str(k), new.get(k)),
        )
        for k in keys
        if old.get(k) != new.get(k)
    ]


@dataclass(frozen=True)
class CallEdit:
    """One tool call a reviewer edited: the tool in words and its changes."""

    tool: str
    changes: list[Change]


def edits_in_words(
    requested: Any, executed: Any, names: dict[str, str] | None = None
) -> list[CallEdit]:
    """What a reviewer changed in each tool call (``requested`` and ``executed`` keyed by
    call id, as a decision stores them); ``names`` gives each call id's tool."""
    if not isinstance(requested, dict) or not isinstance(executed, dict):
        return []
    edits = []
    for call_id, asked in requested.items():
        ran = executed.get(call_id)
        changes = arg_changes(asked, ran) if isinstance(ran, dict) else []
        if changes:
            edits.append(
                CallEdit(tool_words((names or {}).get(call_id, "") or "the tool"), changes)
            )
    return edits


def submitted_words(outcome: str, value: Any, *, withdrawn: bool = False) -> str:
    """What was submitted, as the history's list reads it: a sentence, never the JSON."""
    if withdrawn:
        return f"{WITHDRAWN}."
    if value is None and outcome in ("expired", "cancelled"):
        return f"{outcome_words(outcome)}: nobody answered."
    return answer_words(outcome, value)


# --- the decision form's words -------------------------------------------------------------
# The buttons follow the kind of request: a yes/no approval is approved or rejected; a
# request that declares Agent Inbox's answers is accepted, edited, responded to or
# ignored. Their tone follows the consequence: going ahead is primary, only a refusal is
# "danger" (red); an ignore or a response is neither.
ACTIONS = {
    "approve": "Approve",
    "reject": "Reject",
    "approve_edited": "Approve with these arguments",
    "accept": "Accept",
    "edit": "Accept with these arguments",
    "response": "Send response",
    "ignore": "Ignore",
    "submit": "Submit decision",
}
_TONES = {
    "approve": "primary",
    "approve_edited": "primary",
    "accept": "primary",
    "edit": "primary",
    "submit": "primary",
    "reject": "danger",
}


def action_words(action: str) -> str:
    """A decision button's label: ``ignore`` -> ``Ignore``."""
    return ACTIONS.get(action) or tool_words(action)


def action_tone(action: str) -> str:
    """The button's class: ``primary`` (goes ahead), ``danger`` (a refusal), or ``""``."""
    return _TONES.get(action, "")


# Why a refusal without a note is refused, naming the answer chosen.
REFUSAL_NOTE_NEEDED = {
    "reject": "a rejection needs a reason: write a note (the agent and whoever asked read it)",
    "ignore": "ignoring needs a reason: write a note (the agent and whoever asked read it)",
}


def note_help(refusals: list[str], *, needed: bool = True) -> str:
    """The note's help text, speaking of the refusal this request offers (``reject`` or
    ``ignore``), or of the answer alone when it offers none."""
    if "reject" in refusals:
        what = "If you reject, the agent and whoever asked read the note as the reason"
    elif "ignore" in refusals:
        what = "If you ignore it, the agent and whoever asked read the note as the reason"
    else:
        return "Recorded with your answer."
    return f"Recorded with your answer. {what}{' (required then)' if needed else ''}."


def outcome_tone(outcome: str) -> str:
    """An outcome's colour class: ``ok`` went ahead, ``bad`` was refused, ``""`` neither
    (ignored, answered in words, expired, cancelled)."""
    return {"approved": "ok", "edited": "ok", "rejected": "bad"}.get(outcome, "")
