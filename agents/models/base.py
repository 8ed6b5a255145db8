"""What a model client looks like to the runtime."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from agents.state import Message

# Called with each text fragment as the model produces it.
DeltaCallback = Callable[[str], Awaitable[None]]


class ModelError(Exception):
    """The model could not answer (after retries, where the client retries)."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that may call tools.

    ``tools`` are OpenAI function specs (``{"type": "function", "function": {"name",
    "description", "parameters"}}``). The result is one assistant ``Message``, with
    ``tools_calls`` when the model wants tools run. ``on_delta`` receives text as it
    streams; a client that cannot stream calls it once with the whole text.
    """

    name: str

    async def agenerate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> Message: ...

    async def aclose(self) -> None: ...
