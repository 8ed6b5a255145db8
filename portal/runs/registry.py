"""Agents by name: ``settings.PORTAL_AGENTS`` maps names to dotted builder paths.

A builder is ``build_agent(model=None)`` returning an uncompiled graph (a ``StateGraph`` or
a ``ReactAgent``); ``None`` means "your own default model", which for the shipped examples
is their offline scripted model. Builders are imported on first use and cached.

Everything else the portal shows of an agent lives next to its builder, in the builder's
module, so adding an agent is one module and one settings line: ``HINT`` (the chat
picker's line about it), ``EXAMPLE`` (the message the chat offers) and ``DEMO`` (the
conversation ``seed_demo`` starts), each optional (see ``agent_info``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agents.models import ChatModel, ScriptedModel, resolve_model
from portal.errors import Refused


class UnknownAgentError(Refused, LookupError):
    """No agent is registered under that name (or its builder cannot be imported)."""

    def __init__(self, name: str, detail: str = "") -> None:
        known = ", ".join(sorted(settings.PORTAL_AGENTS)) or "none"
        message = detail or (
            f"unknown agent {name!r}: registered agents are {known} "
            "(add one to PORTAL_AGENTS in portal/settings.py)"
        )
        super().__init__(message)
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])


def agent_names() -> list[str]:
    return sorted(settings.PORTAL_AGENTS)


def get_agent_builder(name: str) -> Callable[..., Any]:
    """The builder registered as ``name``; ``UnknownAgentError`` if there is none."""
    path = settings.PORTAL_AGENTS.get(name) if isinstance(name, str) else None
    if not path:
        raise UnknownAgentError(str(name))
    return _import_builder(path, name)


@cache
def _import_builder(path: str, name: str) -> Callable[..., Any]:
    try:
        builder: Callable[..., Any] = import_string(path)
    except ImportError as exc:
        raise UnknownAgentError(
            name, f"agent {name!r} is registered as {path!r}, which cannot be imported: {exc}"
        ) from exc
    return builder


@dataclass(frozen=True)
class AgentInfo:
    """What the pages say about a registered agent, read from its builder's module."""

    name: str
    hint: str = ""  # one line for the chat's agent picker
    example: str = ""  # the opening message the chat offers to fill in
    demo: str = ""  # the conversation seed_demo starts (never the same as the example)


def agent_info(name: str) -> AgentInfo:
    """``HINT``, ``EXAMPLE`` and ``DEMO`` from the module of ``name``'s builder (empty when
    the module has none); ``UnknownAgentError`` when no agent is registered as ``name``."""
    module = sys.modules.get(get_agent_builder(name).__module__)

    def text(attribute: str) -> str:
        value = getattr(module, attribute, "")
        return value if isinstance(value, str) else ""

    return AgentInfo(name=name, hint=text("HINT"), example=text("EXAMPLE"), demo=text("DEMO"))


def agents_info() -> list[AgentInfo]:
    """Every registered agent's ``AgentInfo``, by name."""
    return [agent_info(name) for name in agent_names()]


def compile_agent(
    name: str,
    checkpointer: Any,
    *,
    model: Callable[[str], ChatModel] = resolve_model,
    **compile_kwargs: Any,
) -> Any:
    """The agent ``name`` compiled with ``checkpointer``.

    ``settings.PORTAL_MODEL == "scripted"`` keeps the agent's own offline model; any other
    name is given to ``model``, by default ``agents.models.resolve_model`` (a new
    OpenAI-compatible client; a worker lends the one it keeps instead).
    ``COMPILE_OPTIONS`` in the builder's module (e.g. ``interrupt_before``) are applied.
    """
    builder = get_agent_builder(name)
    # A builder's module may ask for compile options (accounts: interrupt_before TOOL).
    options = dict(getattr(sys.modules.get(builder.__module__), "COMPILE_OPTIONS", None) or {})
    options.update(compile_kwargs)
    if settings.PORTAL_MODEL == "scripted":
        script = getattr(sys.modules.get(builder.__module__), "SCRIPT", None)
        if settings.PORTAL_SCRIPTED_DELAY_MS and script is not None:
            # The demo slows the offline model down so token streaming is visible.
            delay = settings.PORTAL_SCRIPTED_DELAY_MS / 1000
            graph = builder(model=ScriptedModel(script, name=f"scripted-{name}", delay=delay))
        else:
            graph = builder()
    else:
        graph = builder(model=model(settings.PORTAL_MODEL))
    return graph.compile(checkpointer=checkpointer, **options)
