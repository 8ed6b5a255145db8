"""An agent added exactly as CONTRIBUTING's "Adding an agent" says, for the test that
follows that recipe (tests/test_demo_story.py)."""

from __future__ import annotations

from agents import ReactAgent, interrupt
from agents.examples import DECISION_SCHEMA
from agents.models import CallTool, ChatModel, Reply, RuleScript, ScriptedModel

HINT = "Weather warnings; a forecaster approves each one before it goes out."
EXAMPLE = "Warn Oslo about the storm tonight."
DEMO = "Warn Bergen about the fog tomorrow."


def send_warning(city: str) -> str:
    """Send a weather warning to a city. A person approves it first.

    Args:
        city: The city to warn.
    """
    decision = interrupt(
        {"city": city},
        message=f"Send a weather warning to {city}?",
        reason="tool_approval",
        response_schema=DECISION_SCHEMA,
    )
    if not (isinstance(decision, dict) and decision.get("approved") is True):
        return "Not sent."
    return f"Warning sent to {city}."


SCRIPT = RuleScript(
    [
        (
            r"\bwarn (?P<city>[A-Z]\w+)",
            lambda m: Reply("Asking.", CallTool("send_warning", city=m["city"])),
        )
    ],
    fallback="Which city should I warn?",
)


def build_agent(model: ChatModel | None = None) -> ReactAgent:
    return ReactAgent(
        model=model or ScriptedModel(SCRIPT, name="scripted-weather"),
        system_prompt=[{"role": "system", "content": "You send weather warnings."}],
        tools=[send_warning],
    )
