"""Waiting, bounded in time, for a row to change, whichever process changes it.

More in docs/architecture.md (`models/waiting.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from portal.models import together
from portal.models.db import connect_kwargs

log = logging.getLogger(__name__)

CHANNEL = "portal_changes"
# Between looks when only polling finds other processes' changes (SQLite, or the
# listener connection is down).
POLL_SECONDS = 0.05
# Between looks while the listener is up: a safety net for a lost notification.
RECHECK_SECONDS = 1.0
# Before the listener connects again after losing its connection.
RECONNECT_SECONDS = 1.0

_lock = threading.Lock()
_waiters: dict[str, set[Callable[[], None]]] = {}
_listener: _Listener | None = None


OUTBOX_KEY = "outbox"


def thread_key(thread_id: object) -> str:
    return f"thread:{thread_id}"


def interrupt_key(interrupt_id: object) -> str:
    return f"interrupt:{interrupt_id}"


def changed(key: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Wake whoever waits on ``key`` once the current transaction commits (at once
    outside one); a rollback wakes nobody."""
    if connections[using].vendor == "postgresql":
        notify(CHANNEL, key, using=using)
    transaction.on_commit(lambda: _wake(key), using=using)


def notify(channel: str, payload: str = "", *, using: str = DEFAULT_DB_ALIAS) -> None:
    """PostgreSQL's ``NOTIFY channel, payload`` in the current transaction (delivered at
    commit, dropped on rollback); inside ``together`` sent with the block's statement."""
    if using == DEFAULT_DB_ALIAS and together.gathered_notify(channel, payload):
        return
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])


def changed_here(key: str) -> None:
    """Wake this process's waiters on ``key`` once the current transaction commits (at
    once outside one): for a writer whose own statement sent the ``NOTIFY``."""
    transaction.on_commit(lambda: _wake(key))


def wait_until(key: str, done: Callable[[], bool], *, seconds: float) -> bool:
    """Call ``done`` now and after each change of ``key`` until it returns true (then
    return True) or ``seconds`` have passed (then False)."""
    deadline = time.monotonic() + seconds
    event = threading.Event()
    with _subscribed(key, event.set) as interval:
        while True:
            if done():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            event.wait(min(remaining, interval()))
            event.clear()


async def await_until(key: str, done: Callable[[], Awaitable[bool]], *, seconds: float) -> bool:
    """``wait_until`` for async code: ``done`` is awaited (wrap ORM reads in
    ``sync_to_async``), and the wait holds no thread."""
    deadline = time.monotonic() + seconds
    loop = asyncio.get_running_loop()
    event = asyncio.Event()

    def ring() -> None:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    with _subscribed(key, ring) as interval:
        while True:
            if await done():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, interval())):
                    await event.wait()
            event.clear()


@contextlib.contextmanager
def listening(key: str, callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` on each change of ``key`` while inside (from the listener's thread
    for other processes' changes; on SQLite only this process's own commits call it). For
    a loop that waits on its own event rather than on a ``done``."""
    with _subscribed(key, callback):
        yield


def stop() -> None:
    """Close this process's listener connection (tests, before their database goes)."""
    global _listener
    with _lock:
        listener, _listener = _listener, None
    if listener is not None:
        listener.close()


@contextlib.contextmanager
def _subscribed(key: str, callback: Callable[[], None]) -> Iterator[Callable[[], float]]:
    listener = _ensure_listener()
    with _lock:
        _waiters.setdefault(key, set()).add(callback)
    try:
        yield lambda: RECHECK_SECONDS if listener is not None and listener.up else POLL_SECONDS
    finally:
        with _lock:
            callbacks = _waiters.get(key)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del _waiters[key]


def _wake(key: str | None) -> None:
    """Ring the waiters of ``key`` (None: all of them)."""
    with _lock:
        if key is None:
            callbacks = [cb for group in _waiters.values() for cb in group]
        else:
            callbacks = list(_waiters.get(key, ()))
    for callback in callbacks:
        callback()


def _ensure_listener() -> _Listener | None:
    global _listener
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
        return None
    with _lock:
        if _listener is None:
            _listener = _Listener(connect_kwargs())
            _listener.start()
        return _listener


class _Listener(threading.Thread):
    """One LISTEN connection per process, handing each notification to its waiters."""

    def __init__(self, connect_kwargs: dict[str, Any]) -> None:
        super().__init__(name="portal-waiting", daemon=True)
        self.connect_kwargs = connect_kwargs
        self.up = False
        self._closed = threading.Event()
        self._conn: Any = None

    def run(self) -> None:
        while not self._closed.is_set():
            try:
                self._conn = psycopg.connect(**self.connect_kwargs, autocommit=True)
                self._conn.execute(f"LISTEN {CHANNEL}")
                self.up = True
                # Changes made while (re)connecting were not heard: everyone looks again.
                _wake(None)
                while not self._closed.is_set():
                    for note in self._conn.notifies(timeout=RECHECK_SECONDS):
                        _wake(note.payload)
            except Exception:
                if not self._closed.is_set():
                    log.warning("waiting: LISTEN connection lost; polling", exc_info=True)
            finally:
                self.up = False
                self._close_conn()
            self._closed.wait(RECONNECT_SECONDS)

    def close(self) -> None:
        self._closed.set()
        self.join(timeout=RECHECK_SECONDS * 3)
        self._close_conn()

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to close
                conn.close()
