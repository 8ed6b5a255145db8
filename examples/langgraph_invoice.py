"""A LangGraph graph whose payment a person approves in the portal.

The ``approve`` node calls ``ask_portal`` where it would call ``interrupt()``; the graph
pauses, the request waits in the portal's queue, and the graph resumes with the answer
(here by long-poll; a webhook receiver would call ``graph.invoke(resume_with(...))``).

    PORTAL_URL=http://127.0.0.1:8000 PORTAL_TOKEN=prt_... \\
        .venv-bench/bin/python -m examples.langgraph_invoice

The token needs the ``request`` scope (``manage.py create_api_token USER --scope request``,
USER in the ``agent`` group). LangGraph comes with the bench environment (``make bench``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agents.portal_client import PortalClient
from agents.portal_langgraph import ask_portal, invoke_until_answered


class Invoice(TypedDict, total=False):
    vendor: str
    amount: float
    paid: float | None
    said: str


def build(portal: PortalClient, *, callback_url: str = "") -> Any:
    """The graph; with ``callback_url`` the answer is also posted there (a receiver
    resumes the graph with ``graph.invoke(resume_with(portal.verify_webhook(...)))``)."""

    def approve(state: Invoice) -> Invoice:
        answer = ask_portal(
            portal,
            callback_url=callback_url,
            agent="invoice-bot",
            title=f"Pay {state['vendor']}",
            message=f"Pay **${state['amount']:.2f}** to {state['vendor']}?",
            payload={"vendor": state["vendor"], "amount": state["amount"]},
            actions=["accept", "edit", "ignore"],
            args={"amount": state["amount"]},
            args_schema={
                "type": "object",
                "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}},
                "required": ["amount"],
            },
        )
        if not answer.goes_ahead:
            return {"paid": None, "said": f"Not paid ({answer.outcome})."}
        amount = answer.value["args"]["amount"] if answer.outcome == "edited" else state["amount"]
        # The payment goes after the ask: the node runs again from its top on resume.
        return {"paid": amount, "said": f"Paid ${amount:.2f}, approved by {answer.decided_by}."}

    graph = StateGraph(Invoice)
    graph.add_node("approve", approve)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


def main() -> int:
    portal = PortalClient(os.environ["PORTAL_URL"], os.environ["PORTAL_TOKEN"])
    graph = build(portal)
    config = {"configurable": {"thread_id": sys.argv[1] if len(sys.argv) > 1 else "invoice-7"}}
    print("Waiting for a reviewer in the portal's queue...")
    result = invoke_until_answered(graph, {"vendor": "ACME", "amount": 120.0}, config, portal)
    print(result["said"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
