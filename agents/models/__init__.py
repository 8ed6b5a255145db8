"""Model clients: an OpenAI-compatible client and an offline scripted model.

``resolve_model(name)`` turns a configured model name into a client: names starting with
``scripted`` run offline; anything else goes to the OpenAI-compatible endpoint.

``OpenAIChatModel`` is imported on first use: the SDK takes longer to import than the
rest of a Django process, and most processes (management commands, workers of offline
agents) never build that client.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agents.models.base import ChatModel, DeltaCallback, ModelError
from agents.models.scripted import (
    CallTool,
    Reply,
    RuleScript,
    Script,
    ScriptedModel,
    answer_from_tool_results,
    echo_script,
)

__all__ = [
    "CallTool",
    "ChatModel",
    "DeltaCallback",
    "ModelError",
    "OpenAIChatModel",
    "Reply",
    "RuleScript",
    "Script",
    "ScriptedModel",
    "answer_from_tool_results",
    "echo_script",
    "resolve_model",
]

if TYPE_CHECKING:
    from agents.models.openai_client import OpenAIChatModel


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from agents.models.openai_client import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_model(name: str) -> ChatModel:
    """The client for a model name.

    ``scripted`` (or ``scripted-<anything>``) gives a ``ScriptedModel`` that echoes the user
    and reports tool results. Any other name (an optional ``openai:`` prefix is dropped) is
    an ``OpenAIChatModel``, which needs ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``.
    """
    if name.startswith("scripted"):
        return ScriptedModel(echo_script, name=name)
    model = name.removeprefix("openai:")
    if not model:
        raise ModelError("empty model name: give an OpenAI model name or 'scripted'.")
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        raise ModelError(
            f"model {name!r} needs OpenAI credentials: set OPENAI_API_KEY (or "
            "OPENAI_BASE_URL for an OpenAI-compatible server), or use the offline model "
            "'scripted'."
        )
    from agents.models.openai_client import OpenAIChatModel

    return OpenAIChatModel(model)
