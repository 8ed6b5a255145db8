"""Errors the runtime raises. Each message says what went wrong and how to fix it;
``context`` carries the same facts as data (ids, names, validation lines) for callers."""

from __future__ import annotations

from typing import Any


class AgentsError(Exception):
    """Base class; ``context`` holds machine-readable details."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.context: dict[str, Any] = context


class GraphSetupError(AgentsError):
    """The graph is wired wrongly (raised by ``StateGraph`` methods and ``compile()``)."""


class ResumeValidationError(AgentsError):
    """A resume value broke the interrupt's ``response_schema``. Nothing was recorded."""

    def __init__(self, errors: list[str], *, interrupt_id: str) -> None:
        super().__init__(
            f"the resume value does not match interrupt {interrupt_id}'s response_schema: "
            + "; ".join(errors)
            + ". Fix the value and resume again; the thread is still paused.",
            errors=errors,
            interrupt_id=interrupt_id,
        )


class InvalidInterruptError(AgentsError):
    """A node raised an interrupt that cannot be stored or answered safely (a bad
    ``response_schema``, an over-long ``reason``...). The run fails; nothing is queued."""


class InterruptMismatchError(AgentsError):
    """``resume_interrupt_id`` names another interrupt than the one the thread waits on."""

    def __init__(self, *, thread_id: str, expected: str, given: str) -> None:
        super().__init__(
            f"thread {thread_id!r} is waiting on interrupt {expected}, but the resume names "
            f"{given}; the answer is stale or meant for another prompt. Load the thread and "
            "answer its pending interrupt.",
            thread_id=thread_id,
            expected=expected,
            given=given,
        )


class ThreadNotPausedError(AgentsError, ValueError):
    """A resume was sent to a thread that is not waiting on an interrupt."""


class InvalidInputError(AgentsError, ValueError):
    """The input dict has the wrong shape for the thread's current status."""


class CheckpointerRequiredError(AgentsError):
    """Pausing (or loading a thread) was attempted on a graph compiled without storage."""


class GraphRecursionError(AgentsError):
    """The graph ran more steps than ``config["recursion_limit"]`` without reaching END."""
