"""A contact-message agent whose one risky tool never runs without a person's approval.

``draft_contact_message`` is declared ``@tool(high_risk=True)``: the runtime pauses before
running it, allowing Agent Inbox's answers, and fails closed: only ``{"type": "accept"}``
(or an ``"edit"`` of its arguments) lets it run. A declined call (``"ignore"``, a
``"response"``, no answer) goes back to the model as a tool result (``{"status":
"declined", "reason": <note or response>}``) and the model tells the visitor.
``search_knowledge`` and ``get_availability`` are read-only and never pause. Run:
``python -m agents.examples.contact``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from agents import (
    CompiledGraph,
    InMemoryCheckpointer,
    Message,
    ReactAgent,
    ResponseGranularity,
    pending_interrupt,
    tool,
)
from agents.models import CallTool, ChatModel, Reply, RuleScript, ScriptedModel

# What the portal shows of this agent (portal.runs.registry reads these): the chat picker's
# hint, the example message the chat offers (the README's story), and the conversation
# `seed_demo` starts so the queue is not empty; it differs from the example, so a
# newcomer following the README never meets a copy of their own request.
HINT = "Messages for the owner; each one is approved before it is sent."
EXAMPLE = "My name is Dana Lee, dana@example.com. Message: are you open to a data project?"
DEMO = "My name is Omar Haddad, omar@example.com. Message: could you review our API design?"

SYSTEM_PROMPT = [
    {
        "role": "system",
        "content": (
            "You answer visitors' questions about the site owner with search_knowledge and "
            "get_availability. To pass a message on, use draft_contact_message and tell the "
            "visitor the owner approves every message personally."
        ),
    }
]

KNOWLEDGE = {
    "django": "The owner has built Django products for ten years.",
    "python": "Python is the owner's main language.",
    "data": "Recent work includes data pipelines and search.",
}

# Messages actually recorded. Only an approved call appends.
DRAFTS: list[dict[str, str]] = []


def search_knowledge(query: str) -> str:
    """Search what is known about the owner's work.

    Args:
        query: Words to look for.
    """
    hits = [text for key, text in KNOWLEDGE.items() if key in query.lower()]
    return " ".join(hits) or "Nothing found on that topic."


def get_availability() -> str:
    """When the owner is available for new work."""
    return "Available for new projects from March, two days a week."


@tool(
    high_risk=True,
    title="passing {name}'s message on to the owner",
    summary="Pass {name}'s message on to the owner",
)
def draft_contact_message(name: str, email: str, message: str) -> str:
    """Pass a visitor's message on to the owner. A person approves it before it is recorded.

    Args:
        name: The visitor's name.
        email: Where to answer.
        message: What the visitor wants to say.
    """
    DRAFTS.append({"name": name, "email": email, "message": message})
    return f"Message from {name} <{email}> recorded for the owner."


def _contact(match: re.Match[str]) -> Reply:
    text = match.string
    email = re.search(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", text)
    name = re.search(r"\b(?i:my name is) ([A-Z][\w'-]*(?: [A-Z][\w'-]*)*)", text)
    body = re.search(r"message:\s*(.+)", text, re.IGNORECASE | re.DOTALL)
    if email is None:
        return Reply("I can pass a message on. What email address should the answer go to?")
    return Reply(
        "I'll submit your message; the owner approves every message personally.",
        CallTool(
            "draft_contact_message",
            name=name[1] if name else "Visitor",
            email=email[0],
            message=(body[1] if body else text).strip(),
        ),
    )


SCRIPT = RuleScript(
    [
        (r"\b(?:message|contact|get in touch|reach)\b", _contact),
        (r"\bavailab", lambda match: CallTool("get_availability")),
        (r".+\?\s*$", lambda match: CallTool("search_knowledge", query=match.string)),
    ],
    fallback="Ask me about the owner's work or availability, or leave a message.",
)


def build_agent(model: ChatModel | None = None) -> ReactAgent:
    """The contact agent; offline (scripted) unless a model is given."""
    return ReactAgent(
        model=model or ScriptedModel(SCRIPT, name="scripted-contact"),
        system_prompt=SYSTEM_PROMPT,
        tools=[search_knowledge, get_availability, draft_contact_message],
    )


VISITOR_MESSAGE = (
    "My name is Dana Lee, dana@example.com. Please pass on this message: "
    "Are you open to a three-month data project?"
)


async def ask(graph: CompiledGraph, thread_id: str, text: str) -> dict[str, Any]:
    result = await graph.ainvoke(
        {"messages": [Message.text_message(text)]},
        {"thread_id": thread_id, "user_id": "visitor"},
        response_granularity=ResponseGranularity.FULL,
    )
    print(f"[{thread_id}] visitor: {text}")
    print(f"[{thread_id}] assistant: {result['messages'][-1].text()}")
    return result


async def decide(graph: CompiledGraph, thread_id: str, decision: dict[str, Any] | None) -> None:
    result = await ask(graph, thread_id, VISITOR_MESSAGE)
    request = pending_interrupt(result["state"])
    if request is None:
        print(f"[{thread_id}] no approval was needed")
        return
    print(f"[{thread_id}] paused ({request.reason}): {request.message}")
    before = len(DRAFTS)
    final = await graph.ainvoke(
        {"resume": decision, "resume_interrupt_id": request.id},
        {"thread_id": thread_id, "user_id": "owner"},
    )
    tool_result = next(m for m in reversed(final["messages"]) if m.role == "tool")
    print(f"[{thread_id}] decision: {decision}")
    print(f"[{thread_id}] tool result: {tool_result.text()}")
    print(f"[{thread_id}] tool ran: {len(DRAFTS) - before} time(s)")
    print(f"[{thread_id}] assistant: {final['messages'][-1].text()}")


async def main() -> None:
    DRAFTS.clear()
    graph = build_agent().compile(checkpointer=InMemoryCheckpointer())
    async with graph:
        await ask(graph, "contact-questions", "Do you work with Django?")
        await ask(graph, "contact-questions", "When are you available?")
        await decide(graph, "contact-approve", {"type": "accept", "note": "happy to talk"})
        await decide(
            graph, "contact-reject", {"type": "ignore", "note": "Not taking projects right now."}
        )
        # A cancelled request (None) declines too: only an explicit yes runs the tool.
        await decide(graph, "contact-cancel", None)
    print("drafts recorded:", len(DRAFTS))


if __name__ == "__main__":
    asyncio.run(main())
