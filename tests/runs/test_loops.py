"""The long-running loops run as management commands: stopping them by signal."""

from __future__ import annotations

import io
import signal
import threading

import pytest
from django.core.management.base import BaseCommand

from portal import loops
from portal.notify import notifier
from portal.notify.notifier import Notifier
from portal.runs import queue as runs
from portal.runs.worker import Worker

pytestmark = pytest.mark.django_db


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("make", "wake"),
    [
        (lambda: Worker(name="signalled-worker", poll=0.05), runs.wake),
        (lambda: Notifier(name="signalled-notifier", poll=0.05), notifier._wake),
    ],
    ids=["worker", "notifier"],
)
def test_a_stop_signal_that_lands_while_the_loop_holds_its_wake_lock_still_stops_it(
    make: object, wake: threading.Event
) -> None:
    # The loop clears and waits on its wake-up Event many times a second, and a signal's
    # handler runs in the main thread between two bytecodes: here, inside that Event's
    # lock. A handler that set the Event itself would wait for ever on its own thread.
    loop = make()  # type: ignore[operator]
    run_forever = loop.run_forever

    def signalled_then_run(*, once: bool = False) -> int:
        with wake._cond:  # type: ignore[attr-defined]
            signal.raise_signal(signal.SIGTERM)  # the handler has run when this returns
        return run_forever(once=once)

    loop.run_forever = signalled_then_run
    out, err = io.StringIO(), io.StringIO()
    command = BaseCommand(stdout=out, stderr=err)
    before = signal.getsignal(signal.SIGTERM)

    loops.run_as_command(command, loop, kind="loop", once=False, finishing="this round")

    assert loop.stopping.is_set()
    assert "stopping after this round" in err.getvalue()
    assert f"loop {loop.name} ready" in out.getvalue()
    # The process's own handlers are back once the loop has ended.
    assert signal.getsignal(signal.SIGTERM) is before
