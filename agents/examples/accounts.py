"""Review the tool calls an agent wants to make before any of them runs.

The graph is compiled with ``interrupt_before=["TOOL"]``: it pauses after the model chose
``delete_account`` and before the tool node runs. The tool needs no approval code of its
own. Continuing the thread with ``{"messages": []}`` approves and runs it; a reviewer
answers as to a high-risk tool's approval (accept, edit, respond or ignore).
Run: ``python -m agents.examples.accounts``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from agents import InMemoryCheckpointer, Message, ReactAgent, ResponseGranularity, tool
from agents.models import CallTool, ChatModel, Reply, RuleScript, ScriptedModel

# What the portal shows of this agent (portal.runs.registry reads these): the chat picker's
# hint, the example message the chat offers (the README's story), and the conversation
# `seed_demo` starts so the queue is not empty; it differs from the example, so a
# newcomer following the README never meets a copy of their own request.
HINT = "Account deletion; a reviewer sees each call before it runs."
EXAMPLE = "Please delete the account for user u-381."
DEMO = "Please close the account for user u-204, the customer asked us to."

SYSTEM_PROMPT = [{"role": "system", "content": "You manage user accounts. Use your tools."}]

# What the portal (or any caller) should pass to compile() for this agent.
COMPILE_OPTIONS: dict[str, Any] = {"interrupt_before": ["TOOL"]}

# Accounts actually deleted.
DELETED: list[str] = []


@tool(title="the deletion of account {user_id}", summary="Delete account {user_id}")
def delete_account(user_id: str) -> str:
    """Permanently delete a user account.

    Args:
        user_id: The account's id, like u-381.
    """
    DELETED.append(user_id)
    return f"Account {user_id} deleted."


def _delete(match: re.Match[str]) -> Reply:
    return Reply(
        f"I'll delete the account {match['user']}.",
        CallTool("delete_account", user_id=match["user"]),
    )


SCRIPT = RuleScript(
    [(r"\b(?:delete|remove|close)\b.*?\buser\s+(?P<user>[\w-]*\w)", _delete)],
    fallback="I can delete a user's account: name the user id, like u-381.",
)


def build_agent(model: ChatModel | None = None) -> ReactAgent:
    """The account agent; offline (scripted) unless a model is given. Compile it with
    ``**COMPILE_OPTIONS`` so a person sees each call before it runs."""
    return ReactAgent(
        model=model or ScriptedModel(SCRIPT, name="scripted-accounts"),
        system_prompt=SYSTEM_PROMPT,
        tools=[delete_account],
    )


async def main() -> None:
    DELETED.clear()
    graph = build_agent().compile(checkpointer=InMemoryCheckpointer(), **COMPILE_OPTIONS)
    config = {"thread_id": "review-1", "user_id": "ops-1"}
    async with graph:
        paused = await graph.ainvoke(
            {"messages": [Message.text_message("Please delete the account for user u-381.")]},
            config,
            response_granularity=ResponseGranularity.FULL,
        )
        state = paused["state"]
        print("paused before node:", state.execution_meta.interrupted_node)
        for call in state.context[-1].tools_calls or []:
            fn = call["function"]
            print("  wants to call:", fn["name"], json.loads(fn["arguments"]))
        print("deleted so far:", DELETED)

        # No new message: the paused node and its pending calls come from the checkpoint.
        final = await graph.ainvoke({"messages": []}, config)
        print("assistant:", final["messages"][-1].text())
    print("deleted:", DELETED)


if __name__ == "__main__":
    asyncio.run(main())
