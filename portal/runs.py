"""The durable run queue: a ``Run`` row is the work, ``notify_workers()`` the doorbell.

Services queue runs (``thread_resume`` is the one every decision takes); the worker drains
them. This module sits below both, so that a service can ring and a worker can listen
without either importing the other. ``check_input`` is what any run's input must be.

On PostgreSQL the doorbell is ``NOTIFY portal_runs``, sent inside the caller's
transaction: PostgreSQL delivers it at commit and drops it on rollback. In-process (the
demo's embedded worker, SQLite) it is ``wake``, a ``threading.Event`` set on commit. The
worker's short poll covers a lost ring either way.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents.schema import json_problem
from portal.errors import InputError
from portal.models import Run, Thread

NOTIFY_CHANNEL = "portal_runs"

wake = threading.Event()


def notify_workers() -> None:
    """Wake idle workers once the current transaction commits."""
    if connection.vendor == "postgresql":
        # Inside a transaction PostgreSQL delivers the notification at commit and drops
        # it on rollback, which is exactly "on commit".
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    transaction.on_commit(wake.set)


def check_input(data: Any, what: str) -> None:
    """``InputError`` naming the problem unless ``data`` can be stored as a run's input:
    strict JSON within ``PORTAL_MAX_INPUT_BYTES``."""
    # Strict JSON first: NaN, NUL or a lone surrogate would fail at the database instead.
    problem = json_problem(data)
    if problem is not None:
        raise InputError(f"{what} is not JSON data that can be stored: {problem}")
    size = len(json.dumps(data, separators=(",", ":")).encode())
    limit = settings.PORTAL_MAX_INPUT_BYTES
    if size > limit:
        raise InputError(
            f"{what} is {size} bytes of JSON, over the limit of {limit} bytes "
            "(PORTAL_MAX_INPUT_BYTES); send a shorter message"
        )


def thread_resume(*, thread: Thread, value: Any, interrupt_id: str) -> Run:
    """Queue a run that answers ``interrupt_id`` with ``value`` (None means cancelled).

    Called by the decision services inside their own transaction, after they locked and
    resolved the interrupt; the run is only visible to workers once that commits.
    """
    payload = {"resume": value, "resume_interrupt_id": interrupt_id}
    check_input(payload, "the decision")
    with transaction.atomic():
        run = Run.objects.create(thread=thread, kind=Run.Kind.RESUME, input=payload)
        notify_workers()
    return run
