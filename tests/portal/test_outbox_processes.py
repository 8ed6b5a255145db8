"""The outbox under real processes and real concurrency: a notifier killed mid-send loses
nothing, and notifiers draining one outbox together send each delivery once."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from django.db import connection

from portal import outbox
from portal.models import Delivery, DeliveryAttempt, Subscription
from portal.notifier import Notifier
from tests.loopback import WebhookReceiver
from tests.portal.conftest import output, wait_for

SECRET = "whsec-test-0123456789"


def subscribe(url: str) -> None:
    outbox.subscription_save(
        subscription=Subscription(name="ops", channel="webhook", target=url, secret=SECRET),
        user=None,
    )


@pytest.mark.slow
def test_a_notification_survives_a_notifier_killed_mid_send(spawn):
    with WebhookReceiver(SECRET) as receiver:
        subscribe(receiver.url)
        receiver.hang = 30  # the first send never gets its answer in time
        note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})

        first = spawn(
            "run_notifier", PORTAL_NOTIFY_TIMEOUT="1", PORTAL_NOTIFY_BACKOFF_SECONDS="0.1"
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
            "run_notifier", PORTAL_NOTIFY_TIMEOUT="1", PORTAL_NOTIFY_BACKOFF_SECONDS="0.1"
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
