"""Test data, written the way the portal writes it.

Threads are created as ``services.thread_start`` creates them, and their pauses are
written through ``DjangoCheckpointer.put_sync``, so the Checkpoint rows, the Interrupt row
and the thread's status are exactly what a real run leaves behind (no worker needed).

Functions:

- ``make_user(username=None, *, role=None, password=None, **extra)``: a user, optionally
  in a role group (``"support"``, ``"reviewer"``, ``"auditor"``); password defaults to
  ``"pw-" + username`` like the personas in ``tests/conftest.py``.
- ``make_thread(*, agent="refunds", owner=None, text=...)``: a thread with its first
  user message checkpointed (running, as if the worker had just picked it up).
- ``make_paused_thread(*, agent="refunds", owner=None, schema=..., value=..., ...)``: a
  thread paused on one interrupt; returns the ``Thread``. ``schema=None`` means no
  response schema.
- ``make_interrupt(**kwargs)``: same arguments; returns the pending ``Interrupt`` row.
- ``make_tool_approval(*, agent="transfers", owner=None, calls=None)``: a thread paused
  by the ToolNode's high-risk approval (value with ``tool_calls`` and ``parameters``,
  the approve/note/args schema); returns the ``Interrupt``.
- ``pause_again(thread, **kwargs)``: the thread moves on and pauses on a new interrupt
  (the old one leaves the queue as the checkpointer does it); returns the new ``Interrupt``.
- ``make_decision(*, interrupt, reviewer, value=None, note="")``: a decision recorded
  through ``portal.reviews.decisions.decision_submit`` (value defaults to an approval).
- ``admin_change_url(obj)``: the path of ``obj``'s admin change page, its primary key
  quoted as the admin quotes it (an id like ``int_23...`` read raw would mean ``int#...``).
- ``APPROVAL_SCHEMA``: the ``{"approved": bool, "note": str}`` schema.
- ``TRANSFER_PARAMETERS``: a tool parameter schema (amount, recipient).
"""

from __future__ import annotations

import functools
import itertools
import json
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group

from agents import inbox
from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.state import Message, new_id
from agents.tools import APPROVAL_ACTIONS, describe_call
from portal.models import Interrupt, Thread
from portal.runs.checkpointer import DjangoCheckpointer

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}

TRANSFER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "description": "Amount in dollars"},
        "recipient": {"type": "string", "description": "Who receives the money"},
    },
    "required": ["amount", "recipient"],
    "additionalProperties": False,
}

_DEFAULT = object()
_counter = itertools.count(1)


def password_hash(raw: str) -> str:
    """``raw`` hashed as the settings say, once per session and hasher list: the browser
    tests' users get the real hasher (the live server checks their passwords with it),
    which is slow by design; a stored hash serves each test that makes a user of that
    name again."""
    return _hash(raw, tuple(settings.PASSWORD_HASHERS))


@functools.cache
def _hash(raw: str, hashers: tuple[str, ...]) -> str:
    return make_password(raw)


def make_user(username: str | None = None, *, role: str | None = None, password=None, **extra):
    username = username or f"user{next(_counter)}"
    user = get_user_model().objects.create(
        username=username, password=password_hash(password or "pw-" + username), **extra
    )
    if role is not None:
        from portal.accounts.groups import ensure_roles

        ensure_roles()
        user.groups.add(Group.objects.get(name=role))
    return user


def _put(thread: Thread, write: CheckpointWrite) -> int:
    thread.refresh_from_db(fields=["last_seq"])
    return DjangoCheckpointer().put_sync(str(thread.pk), write, parent_seq=thread.last_seq or None)


def make_thread(
    *, agent: str = "refunds", owner=None, text: str = "Refund $42.50 for order A-1001."
) -> Thread:
    thread = Thread.objects.create(
        agent=agent, owner=owner, title=Thread.title_from(text), status=Thread.Status.RUNNING
    )
    _put(
        thread,
        CheckpointWrite(
            status=ThreadStatus.RUNNING,
            next_node="MAIN",
            new_messages=[Message.text_message(text).to_dict()],
        ),
    )
    thread.refresh_from_db()
    return thread


def _pause(
    thread: Thread,
    *,
    schema: Any,
    value: Any,
    message: str,
    reason: str,
    node: str,
    tool_call_id: str | None,
    new_messages: list[dict[str, Any]],
    tool: str | None = None,
    assign_to: list[str] | None = None,
    summary: str | None = None,
) -> Interrupt:
    interrupt_id = new_id("int")
    pending = {
        "id": interrupt_id,
        "key": f"{node}:{tool_call_id or '-'}:0",
        "node": node,
        "value": value,
        "message": message,
        "reason": reason,
        "response_schema": schema,
        "tool_call_id": tool_call_id,
        "tool": tool,
        "summary": summary,
    }
    if assign_to:
        pending["assign_to"] = assign_to
    _put(
        thread,
        CheckpointWrite(
            status=ThreadStatus.INTERRUPTED,
            next_node=node,
            new_messages=new_messages,
            meta={"execution_meta": {"interrupted_node": node, "breakpoint": None, "step": 1}},
            interrupt=pending,
            node=node,
        ),
    )
    thread.refresh_from_db()
    return Interrupt.objects.select_related("thread").get(pk=interrupt_id)


def _tool_call_message(name: str, args: dict[str, Any], text: str = "") -> dict[str, Any]:
    call_id = new_id("call")
    return Message(
        role="assistant",
        content=text,
        tools_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    ).to_dict()


def make_interrupt(
    *,
    agent: str = "refunds",
    owner=None,
    schema: Any = _DEFAULT,
    value: Any = _DEFAULT,
    message: str = "Approve a $42.50 refund for order A-1001?",
    reason: str = "tool_approval",
    text: str = "Refund $42.50 for order A-1001, it arrived broken.",
    tool: str = "issue_refund",
    assign_to: list[str] | None = None,
    summary: str | None = None,
) -> Interrupt:
    """A thread paused by a tool that asks itself (like the refunds example)."""
    thread = make_thread(agent=agent, owner=owner, text=text)
    args = {"order_id": "A-1001", "amount": 42.5}
    assistant = _tool_call_message("issue_refund", args, "I'll ask for approval of that refund.")
    return _pause(
        thread,
        schema=APPROVAL_SCHEMA if schema is _DEFAULT else schema,
        value=args if value is _DEFAULT else value,
        message=message,
        reason=reason,
        node="TOOL",
        tool_call_id=assistant["tools_calls"][0]["id"],
        tool=tool,
        summary=summary,
        new_messages=[assistant],
        assign_to=assign_to,
    )


def make_paused_thread(**kwargs: Any) -> Thread:
    """Like ``make_interrupt`` but returns the thread."""
    return make_interrupt(**kwargs).thread


def make_tool_approval(
    *,
    agent: str = "transfers",
    owner=None,
    name: str = "transfer_funds",
    args: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    text: str = "Send $5,000 to Alice.",
) -> Interrupt:
    """A thread paused by ToolNode's own approval of one high-risk call."""
    args = {"amount": 5000.0, "recipient": "Alice"} if args is None else args
    parameters = TRANSFER_PARAMETERS if parameters is None else parameters
    thread = make_thread(agent=agent, owner=owner, text=text)
    assistant = _tool_call_message(name, args)
    call_id = assistant["tools_calls"][0]["id"]
    # As ToolNode asks: Agent Inbox's four answers, an edit's arguments keyed by call id.
    schema = inbox.response_schema(
        APPROVAL_ACTIONS,
        args={call_id: args},
        args_schema={
            "type": "object",
            "properties": {call_id: parameters},
            "additionalProperties": False,
        },
    )
    value = {
        "tool_calls": [{"id": call_id, "name": name, "arguments": args}],
        "parameters": {call_id: parameters},
    }
    return _pause(
        thread,
        schema=schema,
        value=value,
        message=f"Approve {describe_call(name, args)}?",  # as ToolNode words it
        reason="tool_approval",
        node="TOOL",
        tool_call_id=None,
        new_messages=[assistant],
    )


def pause_again(
    thread: Thread,
    *,
    schema: Any = _DEFAULT,
    value: Any = _DEFAULT,
    message: str = "And one more question?",
    reason: str = "input_required",
) -> Interrupt:
    _put(thread, CheckpointWrite(status=ThreadStatus.RUNNING, next_node="MAIN"))
    return _pause(
        thread,
        schema=APPROVAL_SCHEMA if schema is _DEFAULT else schema,
        value={"question": message} if value is _DEFAULT else value,
        message=message,
        reason=reason,
        node="MAIN",
        tool_call_id=None,
        new_messages=[],
    )


# The reason a reviewer gives when a test refuses without naming one: a rejection or an
# ignore needs a note by default (portal.reviews.checks.check_refusal_reason).
REFUSAL_NOTE = "Not this one."


def make_decision(
    *, interrupt: Interrupt, reviewer, value: Any = _DEFAULT, note: str | None = None
):
    from portal.reviews.checks import refusal_kind
    from portal.reviews.decisions import decision_submit

    value = {"approved": True} if value is _DEFAULT else value
    if note is None:
        has_own = isinstance(value, dict) and value.get("note")
        note = REFUSAL_NOTE if refusal_kind(value) and not has_own else ""
    return decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value=value,
        resume_interrupt_id=interrupt.pk,
        note=note,
    )


def admin_change_url(obj) -> str:
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[quote(obj.pk)])


def grant_manage_rules(user):
    """Give ``user`` the manage_rules permission (no role holds it: an admin grants it)."""
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="manage_rules"))
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: no cached permissions


REFUND_CONDITIONS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "payload": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMaximum": 10},
                "order_status": {"const": "delivered"},
            },
            "required": ["amount", "order_status"],
        }
    },
}


def make_rule_version(*, by, name: str = "Small refunds", **fields: Any):
    """A first version of a new rule (the demo's refunds rule unless ``fields`` say
    otherwise), written through the service."""
    from portal.reviews.rules import rule_write

    fields = {
        "agent": "refunds",
        "reason": "tool_approval",
        "tool": "issue_refund",
        "conditions": REFUND_CONDITIONS,
        "action": "approve",
    } | fields
    return rule_write(by=by, name=name, **fields)
