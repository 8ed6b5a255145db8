"""What the long-running loops (the run worker and the notifier) share: running one as a
management command that stops cleanly on a signal, and running one in a daemon thread of
the web process (the one-command demo)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection, connections
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from portal.models import WorkerHeartbeat
from portal.models.db import PREPARE_THRESHOLD

log = logging.getLogger(__name__)

# How often a loop records that it is alive (WorkerHeartbeat).
HEARTBEAT_SECONDS = 5.0
# A heartbeat row this old belongs to a loop killed long ago; the next loop to start
# removes it.
HEARTBEAT_FORGET_SECONDS = 86_400.0


def _db_now_plus(seconds: float) -> Any:
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def beat(name: str, *, kind: str = "worker") -> None:
    """Record that loop ``name`` (a run worker or a notifier) is alive now, on the
    database's clock (the one the health check and the metrics compare against)."""
    if not WorkerHeartbeat.objects.filter(name=name).update(beat_at=Now(), kind=kind):
        # A new loop. Rows of loops killed long ago go now: each is a label the metrics
        # would otherwise carry for ever.
        WorkerHeartbeat.objects.filter(beat_at__lt=_db_now_plus(-HEARTBEAT_FORGET_SECONDS)).delete()
        WorkerHeartbeat.objects.create(name=name, kind=kind, started_at=Now(), beat_at=Now())


class Heartbeat:
    """A loop's heartbeat row: ``maybe_beat`` once per round (it writes at most every
    ``HEARTBEAT_SECONDS``), ``forget`` when the loop stops in order. Neither raises: the
    health check sees a heartbeat that failed as one that ages."""

    def __init__(self, name: str, *, kind: str) -> None:
        self.name = name
        self.kind = kind
        self._last = -HEARTBEAT_SECONDS

    def maybe_beat(self) -> None:
        now = time.monotonic()
        if now - self._last < HEARTBEAT_SECONDS:
            return
        self._last = now
        try:
            beat(self.name, kind=self.kind)
        except Exception:
            log.warning(
                "%s %s: recording its heartbeat failed", self.kind, self.name, exc_info=True
            )

    def forget(self) -> None:
        # A loop that stops in order takes its row away; only a dead one leaves it ageing.
        try:
            WorkerHeartbeat.objects.filter(name=self.name).delete()
        except Exception:
            log.warning("%s %s: removing its heartbeat failed", self.kind, self.name, exc_info=True)


class Loop(Protocol):
    name: str
    stopping: threading.Event

    def run_forever(self, *, once: bool = False) -> int: ...

    def stop(self) -> None: ...


L = TypeVar("L", bound=Loop)


def keep_connections() -> None:
    """A loop is one long-lived process: keep its connection between rounds instead of
    reconnecting for each (web processes borrow from a pool instead, see settings). Health
    checks replace a connection the server dropped. On PostgreSQL the connection binds
    parameters on the server, so psycopg prepares what a loop repeats (a worker's claim
    and finish are planned once, not on each run)."""
    for alias in connections:
        options = connections[alias].settings_dict.setdefault("OPTIONS", {})
        # One connection for the life of the process: a pool would only add a hand-over.
        options.pop("pool", None)
        connections[alias].settings_dict["CONN_MAX_AGE"] = settings.PORTAL_WORKER_CONN_MAX_AGE
        connections[alias].settings_dict["CONN_HEALTH_CHECKS"] = True
        if connections[alias].vendor == "postgresql":
            # Django turns psycopg's preparing off unless told a threshold: psycopg's own.
            options.update(server_side_binding=True, prepare_threshold=PREPARE_THRESHOLD)


def refresh_connections() -> None:
    """Between a loop's rounds: close the connections that broke, outlived CONN_MAX_AGE or
    saw an error. One that saw an error is replaced even if it still answers: its prepared
    statements may no longer fit the tables (a migration changed a column's type under the
    running loop, and each later run of a statement that returns it fails until the
    session ends). Not inside an atomic block: a test running the loop in its transaction
    would lose that transaction."""
    if connection.in_atomic_block:
        return
    for kept in connections.all(initialized_only=True):
        if kept.errors_occurred and not kept.in_atomic_block:
            kept.close()
    close_old_connections()


def run_as_command(
    command: BaseCommand, loop: Loop, *, kind: str, once: bool, finishing: str
) -> int:
    """Run ``loop`` until SIGTERM or SIGINT (which let it finish ``finishing`` first);
    prints "<kind> <name> ready" once it is. Returns what ``run_forever`` returns."""
    # A handler runs in the main thread between two bytecodes, possibly while that thread
    # holds the lock of the Event that ``stop()`` sets (the loop clears and waits on it
    # many times a second): calling ``stop()`` there would wait for ever on its own
    # thread. So the handler only writes a byte to a pipe, which takes no lock, and a
    # thread of its own reads it and stops the loop.
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def on_signal(signum: int, frame: Any) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: a stop is already on its way
            os.write(write_end, b"\0")

    def stop_when_signalled() -> None:
        try:
            if os.read(read_end, 1):  # b"" is the pipe closed: the loop ended on its own
                command.stderr.write(f"{kind} {loop.name}: stopping after {finishing}")
                loop.stop()
        finally:
            os.close(read_end)

    threading.Thread(target=stop_when_signalled, name=f"{kind}-signals", daemon=True).start()
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, on_signal) for signum in signals}
    try:
        command.stdout.write(f"{kind} {loop.name} ready", ending="\n")
        command.stdout.flush()
        return loop.run_forever(once=once)
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: not installed from Python, nothing to put back
                signal.signal(signum, handler)
        os.close(write_end)


class Embedded(Generic[L]):
    """One loop, run in a daemon thread of this process and restarted if it crashes.
    ``make(**options)`` builds it, with the options of the first ``start``."""

    def __init__(self, make: Callable[..., L], *, thread_name: str) -> None:
        self._make = make
        self._thread_name = thread_name
        self._running: tuple[L, threading.Thread] | None = None
        self._lock = threading.Lock()

    def start(self, **options: Any) -> L:
        """Start the loop; idempotent: a second call returns the running one."""
        with self._lock:
            if self._running is None:
                loop = self._make(**options)
                thread = threading.Thread(
                    target=_keep_running, args=(loop,), name=self._thread_name, daemon=True
                )
                thread.start()
                self._running = (loop, thread)
            return self._running[0]

    def stop(self, timeout: float = 10) -> None:
        """Stop the loop after its current piece of work (tests, orderly shutdown)."""
        with self._lock:
            if self._running is None:
                return
            loop, thread = self._running
            self._running = None
        loop.stop()
        thread.join(timeout)


def _keep_running(loop: Loop) -> None:
    while not loop.stopping.is_set():
        try:
            loop.run_forever()
        except Exception:  # keep the demo alive whatever happens
            log.exception("embedded %s crashed; restarting in 1s", loop.name)
            time.sleep(1)
    # Django opened this thread's connection; nobody else will close it.
    connection.close()
