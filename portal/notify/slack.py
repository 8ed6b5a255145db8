"""Slack: a request posted to a channel with Approve and Reject buttons (Block Kit, built
with ``slack-sdk``) through the app's ``chat.postMessage``, and the replies to a button's
click through its ``response_url``. Both go through ``delivery.post``, so the address rule
and the deadline of every other delivery hold. A request whose answer needs an edit or
typed words gets a link to its page instead of buttons. The door that takes the clicks
is ``portal/web/slack.py``; docs/slack.md sets it up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    SectionBlock,
)

from agents import inbox
from portal.models import Delivery, Interrupt, Notification
from portal.notify.events import (
    REQUEST_ASSIGNED,
    REQUEST_CREATED,
    REQUEST_ESCALATED,
    REQUEST_REMINDER,
    Channel,
    SendError,
    summary,
)

APPROVE = "portal.approve"
REJECT = "portal.reject"
OPEN = "portal.open"
# The events that ask someone to decide: their messages carry the buttons.
_ASKS = (REQUEST_CREATED, REQUEST_ASSIGNED, REQUEST_REMINDER, REQUEST_ESCALATED)


def offers_buttons(schema: Any) -> bool:
    """A yes/no request that a click can answer: ``{"approved": bool}`` alone is a valid
    answer (no typed answer, no edit required; declared actions go to the page)."""
    if schema is None:
        return True
    return (
        isinstance(schema, dict)
        and inbox.declared(schema) is None
        and inbox.is_yes_no(schema)
        and set(schema.get("required") or []) <= {"approved"}
    )


def escape(text: str) -> str:
    """Agent text as Slack shows it, not as Slack markup (links, mentions)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def request_url(interrupt_id: str) -> str:
    return f"{settings.PORTAL_BASE_URL}/interrupts/{interrupt_id}/"


def request_blocks(note: Notification) -> list[dict[str, Any]]:
    """The message for ``note``: its summary, the request's message, and for a request
    still waiting, the buttons (or the link to its page)."""
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=escape(summary(note))))]
    message = str((note.payload.get("request") or {}).get("message") or "")
    if message:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=escape(message[:2900]))))
    interrupt = note.interrupt
    if note.kind in _ASKS and interrupt is not None:
        blocks.extend(_actions(interrupt))
    return [block.to_dict() for block in blocks]


def _actions(interrupt: Interrupt) -> list[Block]:
    if interrupt.status != Interrupt.Status.PENDING:
        return []
    elements = []
    if offers_buttons(interrupt.response_schema):
        elements = [
            ButtonElement(text="Approve", action_id=APPROVE, value=interrupt.pk, style="primary"),
            ButtonElement(text="Reject", action_id=REJECT, value=interrupt.pk, style="danger"),
        ]
    if settings.PORTAL_BASE_URL:
        elements.append(
            ButtonElement(text="Open in the portal", action_id=OPEN, url=request_url(interrupt.pk))
        )
    if not elements:
        words = "This request needs an answer typed in the portal."
        return [ContextBlock(elements=[MarkdownTextObject(text=words)])]
    return [ActionsBlock(elements=elements)]


def outcome_message(text: str, *, request_text: str = "") -> dict[str, Any]:
    """A ``response_url`` body that replaces the message with its outcome."""
    blocks: list[Block] = []
    if request_text:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=escape(request_text[:2900]))))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape(text))]))
    return {
        "replace_original": True,
        "text": text,
        "blocks": [block.to_dict() for block in blocks],
    }


def ephemeral(text: str) -> dict[str, Any]:
    """A ``response_url`` body only the clicking user sees; the message stays."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


_JSON = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "reviewer-portal"}
Post = Callable[..., tuple[int, bytes]]


def send(delivery: Delivery, post: Post) -> int:
    """Send a Slack delivery with ``post`` (``delivery.post``); returns the status."""
    note = delivery.notification
    if delivery.channel == Channel.SLACK_RESPONSE:
        raw = json.dumps(note.payload.get("message") or {}).encode()
        return post(delivery.target, raw, _JSON)[0]
    body = {"channel": delivery.target, "text": summary(note), "blocks": request_blocks(note)}
    headers = _JSON | {"Authorization": f"Bearer {settings.PORTAL_SLACK_BOT_TOKEN}"}
    url = f"{settings.PORTAL_SLACK_API_URL}/chat.postMessage"
    status, answer = post(url, json.dumps(body).encode(), headers, read=True)
    try:
        said = json.loads(answer)
    except ValueError:
        said = {}
    if not isinstance(said, dict) or said.get("ok") is not True:
        error = said.get("error", "no answer") if isinstance(said, dict) else "no answer"
        raise SendError(f"Slack refused the message: {error}", status)
    return status
