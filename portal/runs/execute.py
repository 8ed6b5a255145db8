"""Executing a claimed run: ``prepare`` builds its agent on a ``DjangoCheckpointer`` (or
says the run's outcome already), ``stream`` runs the graph and publishes each chunk while
anyone watches the thread, ``failure`` says what an exception of the graph means for the
run. The worker (``portal.runs.worker``) owns the event loop and the connection they use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import psycopg

from agents.checkpoint import CheckpointConflict
from agents.models import ChatModel, resolve_model
from portal.models import Run, Thread
from portal.models.db import stale_plan
from portal.notify import broadcast
from portal.runs import queue, registry
from portal.runs.checkpointer import DjangoCheckpointer, ThreadCancelled
from portal.runs.queue import RELEASE, Outcome

log = logging.getLogger(__name__)

# Seconds a run's chunks go unpublished after the channel layer said nobody watches its
# thread, before it is asked again.
HEARD_SECONDS = 0.5


@dataclass(frozen=True)
class Prepared:
    """A run ready to execute: its graph, the input and config to run it with."""

    graph: Any
    payload: dict[str, Any]
    config: dict[str, Any]
    thread_id: Any
    connection: Any  # the worker's async connection the checkpointer writes through, or None


def prepare(
    run: Run,
    connect: Callable[[], Any],
    model: Callable[[str], ChatModel] = resolve_model,
) -> Prepared | Outcome:
    """Build the agent for a claimed ``run`` on a checkpointer that writes through
    ``connect()`` (None: Django's connection); or the run's outcome, when there is nothing
    to execute (its thread cancelled, an earlier attempt's end reached, a bad input, an
    agent that cannot be built). ``model(name)`` gives the agent its model when the run
    goes on ``connect()``'s connection, and so on the worker's own loop; otherwise the
    run gets a model of its own, since its loop lasts the run alone."""
    thread = getattr(run, "claimed_thread", None) or Thread.objects.get(pk=run.thread_id)
    if thread.cancelled_at is not None:
        return Outcome(Run.Status.CANCELLED, "its thread was cancelled")
    recovered = queue.recover(run)
    if isinstance(recovered, Outcome):
        return recovered
    payload, expected_seq = recovered
    problem = _input_problem(payload)
    if problem:
        return Outcome(Run.Status.FAILED, f"the run's stored input is not valid: {problem}")
    native = connect()
    try:
        store = DjangoCheckpointer(run=run, connection=native, thread=thread)
        graph = registry.compile_agent(
            thread.agent, store, model=model if native is not None else resolve_model
        )
    except registry.UnknownAgentError as exc:
        return Outcome(Run.Status.FAILED, str(exc))
    except Exception as exc:
        return Outcome(
            Run.Status.FAILED,
            f"agent {thread.agent!r} could not be built: {type(exc).__name__}: {exc}",
        )
    config: dict[str, Any] = {
        "thread_id": str(thread.pk),
        "user_id": str(thread.owner_id or ""),
        "run_id": str(run.pk),
        # The thread as this run found it: a thread that moved on is refused.
        "expected_seq": thread.last_seq if expected_seq is None else expected_seq,
    }
    return Prepared(graph, payload, config, thread.pk, native)


async def stream(prepared: Prepared) -> bool:
    """Run the graph, publishing every chunk while anyone watches the thread; True if it
    paused on an interrupt."""
    graph, payload, config = prepared.graph, prepared.payload, prepared.config
    thread_id = prepared.thread_id
    paused = False
    # Whether anyone watches is asked again every HEARD_SECONDS, not per chunk (a token
    # is one): someone who opens the page meanwhile sees the next message, and the end.
    group, asked, heard = broadcast.thread_group(thread_id), -HEARD_SECONDS, False
    transcript = broadcast.LiveTranscript(thread_id)
    # aclosing: a cancel (lost lease) must also end the graph's own task, not leave it
    # pending on the worker's loop.
    async with graph, aclosing(graph.astream(payload, config=config)) as chunks:
        async for chunk in chunks:
            if chunk.event == "updates" and chunk.data.get("status") == "interrupted":
                paused = True
            if time.monotonic() - asked >= HEARD_SECONDS:
                # One call per run, normally: a round trip, as a publish would be.
                heard, asked = broadcast.listening(group)[0], time.monotonic()
            if heard:
                await broadcast.apublish_chunk(thread_id, chunk.to_dict(), transcript)
    return paused


def failure(
    run: Run, exc: Exception, prepared: Prepared, *, connection_lost: Callable[[], None]
) -> Outcome:
    """What ``exc``, raised by the graph, means for ``run``; ``connection_lost`` is called
    when it is the worker's own connection that failed."""
    if isinstance(exc, ThreadCancelled):
        # Cancelled while running: the write refused was this run's next step (a tool
        # call among them), so nothing after it happened.
        log.info("run %s: %s", run.pk, exc)
        return Outcome(Run.Status.CANCELLED, str(exc))
    if isinstance(exc, CheckpointConflict):
        # Another writer moved the thread on: a taken-over run's earlier attempt, its
        # lease lost, that stops at its next await. Give the run back, to continue from
        # whatever that reached once it has stopped (MAX_ATTEMPTS bounds the retries).
        log.warning("run %s: the thread moved on under it (%s); releasing it", run.pk, exc)
        return Outcome(RELEASE, f"{type(exc).__name__}: {exc}")
    native = prepared.connection
    if native is not None and _connection_failed(native, exc):
        # Our connection died (a database restart, a failover) or went stale, not the
        # run: give the run back, to continue from its last checkpoint after we reconnect.
        log.warning("run %s: the database connection failed; releasing it", run.pk)
        connection_lost()
        return Outcome(RELEASE, f"{type(exc).__name__}: {exc}")
    return Outcome(Run.Status.FAILED, f"{type(exc).__name__}: {exc}")


def _connection_failed(conn: Any, exc: BaseException) -> bool:
    """Whether ``exc`` is the worker's own connection failing rather than the run: lost,
    or holding prepared statements that no longer fit a table a migration changed (each
    later run of them would fail the same way until the session ends)."""
    return (
        isinstance(exc, psycopg.OperationalError)
        or stale_plan(exc)
        or bool(conn.closed or conn.broken)
    )


def _input_problem(payload: Any) -> str:
    if not isinstance(payload, dict):
        return f"expected an object, got {type(payload).__name__}"
    if "resume" in payload:
        return ""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return "expected {'messages': [...]} or {'resume': ...}"
    for n, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return f"message {n} is not an object with string content"
    return ""
