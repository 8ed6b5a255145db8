"""The outbox under real processes and real concurrency: a notifier killed mid-send loses
nothing, notifiers draining one outbox together send each delivery once, and a notifier in
another process is woken by a new notification rather than finding it at its next poll."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from django.db import connection

from portal.models import Delivery, DeliveryAttempt, Subscription, WorkerHeartbeat, waiting
from portal.notify import outbox
from portal.notify.notifier import Notifier
from tests.factories import make_interrupt
from tests.loopback import WebhookReceiver
from tests.processes import output, wait_for

SECRET = "whsec-test-0123456789"


def subscribe(url: str) -> None:
    outbox.subscription_save(
        subscription=Subscription(name="ops", channel="webhook", target=url, secret=SECRET),
        user=None,
    )


@pytest.fixture(autouse=True)
def receivers_on_loopback(settings):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receivers here listen on loopback


@pytest.mark.slow
def test_a_notification_survives_a_notifier_killed_mid_send(spawn):
    with WebhookReceiver(SECRET) as receiver:
        subscribe(receiver.url)
        receiver.hang = 30  # the first send never gets its answer in time
        note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})

        first = spawn(
            "run_notifier",
            PORTAL_ALLOW_PRIVATE_TARGETS="1",
            PORTAL_NOTIFY_TIMEOUT="1",
            PORTAL_NOTIFY_BACKOFF_SECONDS="0.1",
        )
        wait_for(lambda: receiver.arrived >= 1, what="the first send to reach the receiver")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)

        delivery = Delivery.objects.get()
        # Claimed (the attempt counted) and killed before its outcome was written.
        assert delivery.status == Delivery.Status.PENDING
        assert delivery.attempts == 1
        assert not DeliveryAttempt.objects.exists()

        receiver.hang = 0
        second = spawn(
            "run_notifier",
            PORTAL_ALLOW_PRIVATE_TARGETS="1",
            PORTAL_NOTIFY_TIMEOUT="1",
            PORTAL_NOTIFY_BACKOFF_SECONDS="0.1",
        )
        wait_for(
            lambda: Delivery.objects.filter(status=Delivery.Status.SENT).exists(),
            timeout=30,
            what=f"the delivery to be sent again:\n{output(second)}",
        )

    assert str(note.pk) in receiver.handled
    assert list(receiver.handled) == [str(note.pk)]  # handled once, whatever arrived
    assert list(DeliveryAttempt.objects.values_list("number", "ok")) == [(2, True)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_notifiers_draining_one_outbox_together_send_each_delivery_once():
    count, notifiers = 40, 4
    with WebhookReceiver(SECRET) as receiver:
        subscribe(receiver.url)
        for n in range(count):
            outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"n": n})

        barrier = threading.Barrier(notifiers)
        errors: list[BaseException] = []

        def drain(n: int) -> None:
            try:
                notifier = Notifier(name=f"notifier-{n}")
                barrier.wait(timeout=30)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    notifier.tick()
                    if not Delivery.objects.exclude(status=Delivery.Status.SENT).exists() and (
                        Delivery.objects.count() == count
                    ):
                        return
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=drain, args=(n,)) for n in range(notifiers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)

    assert errors == []
    assert Delivery.objects.count() == count  # each notification fanned out once
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == count
    assert len(receiver.handled) == count
    assert len(receiver.requests) == count  # nothing was sent twice
    assert receiver.repeats == 0
    assert DeliveryAttempt.objects.count() == count


@pytest.mark.slow
@pytest.mark.postgres
def test_a_notifier_in_another_process_is_woken_by_a_new_notification_not_its_poll(spawn):
    with WebhookReceiver(SECRET) as receiver:
        subscribe(receiver.url)
        # A poll far longer than the wait below: only a wake-up can deliver in time.
        notifier = spawn("run_notifier", "--id", "woken", "--poll", "120")
        wait_for(lambda: "ready" in output(notifier), what="the notifier to start")
        wait_for(lambda: WorkerHeartbeat.objects.filter(name="woken").exists(), what="a beat")
        time.sleep(1)  # its first round is done: it is waiting now
        started = time.monotonic()
        note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})
        wait_for(
            lambda: str(note.pk) in receiver.handled,
            timeout=10,
            what=f"the notifier to be woken:\n{output(notifier)}",
        )
        assert time.monotonic() - started < 10


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_request_raised_by_a_checkpoint_write_wakes_the_notifiers_at_commit():
    """The checkpointer's own statement writes a new request's notification: it rings
    too (only NOTIFY can: no Python code of this process runs for it)."""
    rang = threading.Event()
    with waiting.listening(waiting.OUTBOX_KEY, rang.set):
        wait_for(lambda: waiting._listener is not None and waiting._listener.up, what="LISTEN")
        time.sleep(0.2)  # past the wake-everyone of the listener's connecting
        rang.clear()
        make_interrupt()
        assert rang.wait(10), "no NOTIFY for the new request's notification"
