"""What the long-running loops (the run worker and the notifier) share: running one as a
management command that stops cleanly on a signal, and running one in a daemon thread of
the web process (the one-command demo)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, connections

log = logging.getLogger(__name__)


class Loop(Protocol):
    name: str
    stopping: threading.Event

    def run_forever(self, *, once: bool = False) -> int: ...

    def stop(self) -> None: ...


L = TypeVar("L", bound=Loop)


def keep_connections() -> None:
    """A loop is one long-lived process: keep its connection between rounds instead of
    reconnecting for each (web processes borrow from a pool instead, see settings). Health
    checks replace a connection the server dropped."""
    for alias in connections:
        # One connection for the life of the process: a pool would only add a hand-over.
        connections[alias].settings_dict.get("OPTIONS", {}).pop("pool", None)
        connections[alias].settings_dict["CONN_MAX_AGE"] = settings.PORTAL_WORKER_CONN_MAX_AGE
        connections[alias].settings_dict["CONN_HEALTH_CHECKS"] = True


def run_as_command(
    command: BaseCommand, loop: Loop, *, kind: str, once: bool, finishing: str
) -> int:
    """Run ``loop`` until SIGTERM or SIGINT (which let it finish ``finishing`` first);
    prints "<kind> <name> ready" once it is. Returns what ``run_forever`` returns."""

    def stop(signum: int, frame: Any) -> None:
        command.stderr.write(f"{kind} {loop.name}: stopping after {finishing}")
        loop.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    command.stdout.write(f"{kind} {loop.name} ready", ending="\n")
    command.stdout.flush()
    return loop.run_forever(once=once)


class Embedded(Generic[L]):
    """One loop, run in a daemon thread of this process and restarted if it crashes."""

    def __init__(self, make: Callable[[], L], *, thread_name: str) -> None:
        self._make = make
        self._thread_name = thread_name
        self._running: tuple[L, threading.Thread] | None = None
        self._lock = threading.Lock()

    def start(self) -> L:
        """Start the loop; idempotent: a second call returns the running one."""
        with self._lock:
            if self._running is None:
                loop = self._make()
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
