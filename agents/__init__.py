"""A small runtime for agent graphs with human-in-the-loop pauses (no Django here)."""

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
