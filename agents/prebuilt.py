"""Ready-made nodes: ``Agent`` (one model turn) and ``ReactAgent`` (model + tools loop)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from agents.graph import END, CompiledGraph, StateGraph
from agents.interrupt import current_run
from agents.models.base import ChatModel
from agents.state import AgentState, Message, new_id
from agents.tools import Tool, ToolNode, as_tool


def _system_messages(prompt: str | list[dict[str, Any]] | None) -> list[Message]:
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [Message(role="system", content=prompt)]
    return [Message(role=p.get("role", "system"), content=p.get("content", "")) for p in prompt]


class Agent:
    """A node that asks the model for the next assistant message and streams its text.

    ``model`` is a ``ChatModel`` or a model name for ``agents.models.resolve_model``
    (resolved on first use). The tools offered to the model come from ``tool_node`` or
    ``tools``; running them is the ``ToolNode``'s job.
    """

    def __init__(
        self,
        model: ChatModel | str,
        system_prompt: str | list[dict[str, Any]] | None = None,
        tool_node: ToolNode | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | None = None,
    ) -> None:
        self._model = model
        self.system = _system_messages(system_prompt)
        self.tool_specs = (
            tool_node.specs() if tool_node is not None else [as_tool(t).spec() for t in tools or ()]
        )

    @property
    def model(self) -> ChatModel:
        if isinstance(self._model, str):
            models = importlib.import_module("agents.models")  # keeps clients' imports lazy
            self._model = models.resolve_model(self._model)
        assert not isinstance(self._model, str)
        return self._model

    async def __call__(self, state: AgentState) -> Message:
        run = current_run()
        # Deltas and the final message share one id, so a UI can replace the partial text.
        partial = Message(role="assistant", id=new_id("msg"))

        async def on_delta(text: str) -> None:
            partial.content += text
            run.emit_delta(Message(role="assistant", content=partial.content, id=partial.id), text)

        reply = await self.model.agenerate(
            [*self.system, *state.context],
            self.tool_specs,
            on_delta=on_delta if run.streaming else None,
        )
        reply.id = partial.id
        return reply

    async def aclose(self) -> None:
        if not isinstance(self._model, str):
            close = getattr(self._model, "aclose", None)
            if close is not None:
                await close()


def route_tools(state: AgentState) -> str:
    """TOOL when the last message is an assistant message with tool calls, else END."""
    last = state.context[-1] if state.context else None
    if last is not None and last.role == "assistant" and last.tools_calls:
        return "TOOL"
    return END


class ReactAgent:
    """The usual agent: ``MAIN`` (the model) and ``TOOL`` (its tools) in a loop."""

    def __init__(
        self,
        model: ChatModel | str,
        system_prompt: str | list[dict[str, Any]] | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
    ) -> None:
        self.tool_node = ToolNode(tools)
        self.agent = Agent(model, system_prompt, tool_node=self.tool_node)

    def graph(self) -> StateGraph:
        graph = StateGraph(AgentState)
        graph.add_node("MAIN", self.agent)
        graph.add_node("TOOL", self.tool_node)
        graph.add_conditional_edges("MAIN", route_tools, {"TOOL": "TOOL", END: END})
        graph.add_edge("TOOL", "MAIN")
        graph.set_entry_point("MAIN")
        return graph

    def compile(self, **kwargs: Any) -> CompiledGraph:
        return self.graph().compile(**kwargs)
