"""The runtime's identifiers as people read them: reasons, tool names, outcomes.

Pages show these words; the identifiers stay in the data, the filters and the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.tools import describe_call, words

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


OUTCOMES = {
    "approved": "Approved",
    "rejected": "Rejected",
    "edited": "Approved with edited arguments",
    "expired": "Expired without a decision",
    "cancelled": "Cancelled",
    "responded": "Answered in words instead",
    "ignored": "Ignored",
}


def outcome_words(outcome: str) -> str:
    """``edited`` -> ``Approved with edited arguments``."""
    return OUTCOMES.get(outcome) or reason_words(outcome)


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
