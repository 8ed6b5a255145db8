"""A small runtime for agent graphs with human-in-the-loop pauses (no Django here).

The names below load on first use, so ``agents.portal_client`` and ``agents.signing``
import with the standard library alone: a client of a portal needs neither the schema
checks (jsonschema, RE2) nor the model clients (openai).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.checkpoint import (
        CheckpointConflict,
        Checkpointer,
        CheckpointWrite,
        InMemoryCheckpointer,
        Snapshot,
        ThreadStatus,
    )
    from agents.errors import (
        AgentsError,
        CheckpointerRequiredError,
        GraphRecursionError,
        GraphSetupError,
        InterruptMismatchError,
        InvalidInputError,
        InvalidInterruptError,
        ResumeValidationError,
        ThreadNotPausedError,
    )
    from agents.graph import END, CompiledGraph, StateGraph, current_run
    from agents.inbox import HumanResponse, goes_ahead
    from agents.interrupt import GraphInterrupt, Interrupt, RunContext, interrupt, pending_interrupt
    from agents.models.base import ChatModel, ModelError
    from agents.prebuilt import Agent, ReactAgent
    from agents.state import (
        AgentState,
        ExecutionMeta,
        Message,
        ResponseGranularity,
        StreamChunk,
        StreamEvent,
    )
    from agents.tools import Tool, ToolNode, fencing_token, idempotency_key, tool

# Each name the package exports, and the module that defines it.
_EXPORTS = {
    "CheckpointConflict": "agents.checkpoint",
    "Checkpointer": "agents.checkpoint",
    "CheckpointWrite": "agents.checkpoint",
    "InMemoryCheckpointer": "agents.checkpoint",
    "Snapshot": "agents.checkpoint",
    "ThreadStatus": "agents.checkpoint",
    "AgentsError": "agents.errors",
    "CheckpointerRequiredError": "agents.errors",
    "GraphRecursionError": "agents.errors",
    "GraphSetupError": "agents.errors",
    "InterruptMismatchError": "agents.errors",
    "InvalidInputError": "agents.errors",
    "InvalidInterruptError": "agents.errors",
    "ResumeValidationError": "agents.errors",
    "ThreadNotPausedError": "agents.errors",
    "END": "agents.graph",
    "CompiledGraph": "agents.graph",
    "StateGraph": "agents.graph",
    "current_run": "agents.graph",
    "HumanResponse": "agents.inbox",
    "goes_ahead": "agents.inbox",
    "GraphInterrupt": "agents.interrupt",
    "Interrupt": "agents.interrupt",
    "RunContext": "agents.interrupt",
    "interrupt": "agents.interrupt",
    "pending_interrupt": "agents.interrupt",
    "ChatModel": "agents.models.base",
    "ModelError": "agents.models.base",
    "Agent": "agents.prebuilt",
    "ReactAgent": "agents.prebuilt",
    "AgentState": "agents.state",
    "ExecutionMeta": "agents.state",
    "Message": "agents.state",
    "ResponseGranularity": "agents.state",
    "StreamChunk": "agents.state",
    "StreamEvent": "agents.state",
    "Tool": "agents.tools",
    "ToolNode": "agents.tools",
    "fencing_token": "agents.tools",
    "idempotency_key": "agents.tools",
    "tool": "agents.tools",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    # Loading the module agents.interrupt binds it on the package as ``interrupt``, over
    # the function of that name; the package keeps the function, as an eager import did.
    def __setattr__(self, name: str, value: Any) -> None:
        if not (isinstance(value, types.ModuleType) and name in _EXPORTS):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "END",
    "Agent",
    "AgentState",
    "AgentsError",
    "ChatModel",
    "CheckpointConflict",
    "CheckpointWrite",
    "Checkpointer",
    "CheckpointerRequiredError",
    "CompiledGraph",
    "ExecutionMeta",
    "GraphInterrupt",
    "GraphRecursionError",
    "GraphSetupError",
    "HumanResponse",
    "InMemoryCheckpointer",
    "Interrupt",
    "InterruptMismatchError",
    "InvalidInputError",
    "InvalidInterruptError",
    "Message",
    "ModelError",
    "ReactAgent",
    "ResponseGranularity",
    "ResumeValidationError",
    "RunContext",
    "Snapshot",
    "StateGraph",
    "StreamChunk",
    "StreamEvent",
    "ThreadNotPausedError",
    "ThreadStatus",
    "Tool",
    "ToolNode",
    "current_run",
    "fencing_token",
    "goes_ahead",
    "idempotency_key",
    "interrupt",
    "pending_interrupt",
    "tool",
]
