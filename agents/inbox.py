"""Answers a reviewer may give, as in LangGraph's Agent Inbox.

An ``interrupt()`` can declare which answers it accepts with ``actions=``:

- ``"accept"``: go ahead as asked;
- ``"edit"``: go ahead with changed arguments (``args``, checked against the arguments'
  schema; inside a tool, the tool's own parameters);
- ``"response"``: do not go ahead; here is free text for the agent (``args`` is the text);
- ``"ignore"``: do not go ahead, and say nothing.

The answer the agent receives is a ``HumanResponse``: ``{"type": ..., "args": ...}`` with
an optional ``note``, or ``None`` when the request was cancelled or expired. Only
``accept`` and ``edit`` mean "go ahead" (``goes_ahead``): anything else, including no
answer, must leave the action undone.

A high-risk tool's approval (``agents.tools``) and a breakpoint before the tools declare
all four: accept, edit the calls' arguments (keyed by call id), respond, or ignore. A
yes/no approval sent to such a request is read as its typed answer (``from_approval``).

The declaration travels inside the request's ``response_schema`` (built by
``response_schema``), so every reader of a request (the portal's form, its API, an
export) finds the allowed actions and the arguments on offer with ``declared``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

ResponseType = Literal["accept", "edit", "response", "ignore"]
RESPONSE_TYPES: tuple[str, ...] = ("accept", "edit", "response", "ignore")
# Marks a response_schema built here, so readers tell it from an agent's own schema.
MARKER = "agents.inbox: a human response"


class HumanResponse(TypedDict):
    """What ``interrupt(..., actions=...)`` returns once a person answered."""

    type: ResponseType
    args: NotRequired[Any]  # edit: the arguments to use; response: the text
    note: NotRequired[str]


def goes_ahead(answer: Any) -> bool:
    """True only for an explicit accept or edit (fail closed: None, ignore, a response or
    anything malformed is a no)."""
    return isinstance(answer, dict) and answer.get("type") in ("accept", "edit")


_APPROVAL_KEYS = frozenset({"approved", "note", "args"})


def from_approval(value: Any, schema: Any) -> Any:
    """A yes/no approval (``{"approved": bool, "note": ..., "args": ...}``, the shape a
    high-risk tool's approval took before it declared its answers) sent to a request that
    declares them, as the typed answer it stands for; any other value as it is.

    ``approved: true`` is "accept", or "edit" when it carries arguments; ``false`` is
    "ignore", keeping the note. Anything that is not exactly such an approval (``"yes"``,
    an unknown field) is left alone for the schema to refuse, so it never goes ahead."""
    if declared(schema) is None or not isinstance(value, dict) or "type" in value:
        return value
    if not isinstance(value.get("approved"), bool) or not set(value) <= _APPROVAL_KEYS:
        return value
    args = value.get("args")
    answer: dict[str, Any]
    if value["approved"] is not True:
        answer = {"type": "ignore"}
    elif isinstance(args, dict) and args:
        answer = {"type": "edit", "args": args}
    else:
        answer = {"type": "accept"}
    if "note" in value:
        answer["note"] = value["note"]
    return answer


def check_actions(actions: Iterable[str]) -> list[str]:
    """The declared actions in order, without repeats; ValueError naming a bad one."""
    out: list[str] = []
    for action in actions:
        if action not in RESPONSE_TYPES:
            raise ValueError(
                f"unknown action {action!r}; an interrupt may allow "
                + ", ".join(repr(t) for t in RESPONSE_TYPES)
            )
        if action not in out:
            out.append(action)
    if not out:
        raise ValueError("actions must allow at least one of " + ", ".join(RESPONSE_TYPES))
    return out


def _when(kind: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"type": {"const": kind}}, "required": ["type"]}, "then": then}


def response_schema(
    actions: Iterable[str],
    *,
    args: dict[str, Any] | None = None,
    args_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The schema every answer to a request allowing ``actions`` must fit.

    ``args`` are the arguments offered for editing (the form's starting point, kept as
    the edit's ``default``); ``args_schema`` is what an edit must satisfy."""
    allowed = check_actions(actions)
    if "edit" in allowed and args_schema is None:
        args_schema = {"type": "object"}
    rules = []
    for kind in RESPONSE_TYPES:
        if kind not in allowed:
            continue
        if kind == "edit":
            edit = dict(args_schema or {})
            if args is not None:
                edit["default"] = args
            rules.append(_when(kind, {"properties": {"args": edit}, "required": ["args"]}))
        elif kind == "response":
            text = {"type": "string", "minLength": 1, "title": "Response"}
            rules.append(_when(kind, {"properties": {"args": text}, "required": ["args"]}))
        else:
            # accept and ignore carry no arguments: a stray edit must not pass as agreed.
            rules.append(_when(kind, {"properties": {"args": False}}))
    return {
        "$comment": MARKER,
        "type": "object",
        "properties": {
            "type": {"enum": allowed},
            "args": {},
            "note": {"type": "string"},
        },
        "required": ["type"],
        "additionalProperties": False,
        "allOf": rules,
    }


@dataclass(frozen=True)
class Declared:
    """What a request built by ``response_schema`` allows."""

    actions: list[str]
    args: dict[str, Any] | None
    args_schema: dict[str, Any] | None


# What a plain yes/no approval's schema may hold beside ``approved``.
YES_NO_KEYS = frozenset({"approved", "note", "args"})


def is_yes_no(schema: Any) -> bool:
    """A plain approval: no schema, or ``{"approved": boolean}`` with at most a note and
    arguments beside it (the shape the portal answers with Approve and Reject)."""
    if schema is None:
        return True
    props = schema.get("properties") if isinstance(schema, dict) else None
    return (
        isinstance(props, dict)
        and isinstance(props.get("approved"), dict)
        and props["approved"].get("type") == "boolean"
        and set(props) <= YES_NO_KEYS
    )


def declared(schema: Any) -> Declared | None:
    """The actions, offered arguments and their schema of a request, or None for a
    request that declares no actions (an agent's own schema, a yes/no approval)."""
    if not isinstance(schema, dict) or schema.get("$comment") != MARKER:
        return None
    # Read back only what ``response_schema`` builds: an agent's schema that merely
    # carries the marker is an ordinary schema, whatever shape its parts have.
    try:
        actions = [a for a in schema["properties"]["type"]["enum"] if a in RESPONSE_TYPES]
        args, args_schema = None, None
        for rule in schema["allOf"]:
            if rule["if"]["properties"]["type"]["const"] == "edit":
                edit = dict(rule["then"]["properties"]["args"])
                args = edit.pop("default", None)
                args_schema = edit
        if schema != response_schema(actions, args=args, args_schema=args_schema):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return Declared(actions, args if isinstance(args, dict) else None, args_schema)


def not_allowed(value: Any, schema: Any) -> str | None:
    """A readable refusal when ``value`` answers with an action ``schema`` does not
    allow (or accepts or ignores with arguments), or None."""
    found = declared(schema)
    if found is None or not isinstance(value, dict) or "type" not in value:
        return None
    kind = value["type"]
    if kind in found.actions:
        if kind in ("accept", "ignore") and "args" in value:
            hint = " use 'edit' to change them" if "edit" in found.actions else ""
            return f"$.args: {kind!r} carries no arguments;{hint or ' leave them out'}"
        return None
    return f"$.type: this request does not allow {kind!r}; it allows " + ", ".join(
        repr(a) for a in found.actions
    )
