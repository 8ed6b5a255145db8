"""Every outgoing target keeps one address rule: judged by its text when saved, and by
the addresses its name resolves to when sent, connecting to the address it judged."""

from __future__ import annotations

import socket
import time

import pytest

from portal.models import Delivery, DeliveryAttempt, Subscription
from portal.notify import outbox, targets
from portal.notify.notifier import Notifier
from tests.loopback import WebhookReceiver

SECRET = "whsec-test-0123456789"
INSIDE = [
    ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
    ("http://10.0.0.1/hook", "a private address"),
    ("https://192.168.1.1/hook", "a private address"),
    ("http://localhost:8000/hook", "this machine (localhost)"),
    ("http://[::1]/hook", "a loopback address"),
    ("http://0x7f.1/hook", "a loopback address"),
]


def subscribe(url: str, channel: str = "webhook") -> Subscription:
    return outbox.subscription_save(
        subscription=Subscription(name="ops", channel=channel, target=url, secret=SECRET),
        user=None,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("channel", ["webhook", "slack"])
@pytest.mark.parametrize(("url", "kind"), INSIDE)
def test_a_subscription_into_the_portals_own_network_is_refused(url, kind, channel):
    with pytest.raises(outbox.TargetError) as refused:
        subscribe(url, channel)

    assert f"is {kind}, which the portal does not post to" in str(refused.value)
    assert "PORTAL_ALLOW_PRIVATE_TARGETS" in str(refused.value)
    assert not Subscription.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "kind"), INSIDE)
def test_a_callback_and_a_subscription_are_refused_in_the_same_words(url, kind):
    assert targets.url_problem(url) is not None
    with pytest.raises(outbox.TargetError) as refused:
        outbox.Target.webhook(url, secret=SECRET).check()

    assert str(refused.value).endswith(targets.url_problem(url) or "")


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "kind"), INSIDE)
def test_an_operator_may_allow_private_targets_with_one_setting(url, kind, settings):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True

    assert subscribe(url).pk is not None


class Resolver:
    """A resolver for the name ``name``: it answers each lookup with the next address
    of ``answers`` (the last one ever after); other hosts resolve as usual."""

    def __init__(self, name: str, *answers: str, delay: float = 0) -> None:
        self.name, self.answers, self.delay = name, list(answers), delay
        self.lookups = 0
        self.real = socket.getaddrinfo

    def __call__(self, host, port, *args, **kwargs):
        if host != self.name:
            return self.real(host, port, *args, **kwargs)
        self.lookups += 1
        time.sleep(self.delay)
        address = self.answers[min(self.lookups, len(self.answers)) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


def send_once() -> Delivery:
    Notifier(name="test-notifier").tick()
    return Delivery.objects.get()


@pytest.mark.django_db
def test_a_name_that_resolves_into_the_portals_own_network_is_not_posted_to(monkeypatch):
    with WebhookReceiver(SECRET) as receiver:
        name = "hooks.partner.test"
        monkeypatch.setattr(socket, "getaddrinfo", Resolver(name, "127.0.0.1"))
        subscribe(f"http://{name}:{receiver.port}/hook")  # its text is fine
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})

        delivery = send_once()

    assert receiver.requests == []
    assert delivery.status == Delivery.Status.PENDING  # retried: names move
    assert f"{name} resolves to 127.0.0.1, a loopback address" in delivery.last_error


@pytest.mark.django_db
def test_a_name_that_rebinds_after_the_check_is_connected_to_at_the_address_checked(
    monkeypatch,
):
    public = "93.184.216.34"
    connected: list[str] = []

    def connect(address, port, timeout):
        connected.append(address)
        if address == public:  # no network in tests: the public receiver is down
            raise ConnectionRefusedError("refused")
        return socket.create_connection((address, port), timeout=timeout)

    with WebhookReceiver(SECRET) as receiver:
        name = "rebinding.partner.test"
        resolver = Resolver(name, public, "127.0.0.1")
        monkeypatch.setattr(socket, "getaddrinfo", resolver)
        monkeypatch.setattr(targets, "_open", connect)
        subscribe(f"http://{name}:{receiver.port}/hook")
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})

        first = send_once()
        Delivery.objects.filter(pk=first.pk).update(next_attempt_at=first.created_at)
        second = send_once()

    # One lookup per try, and the connection goes to what that lookup answered: a
    # second lookup (by the connection itself) would have reached the loopback receiver.
    assert resolver.lookups == 2
    assert connected == [public]
    assert receiver.requests == []
    assert "could not reach" in first.last_error
    assert "resolves to 127.0.0.1, a loopback address" in second.last_error


@pytest.mark.slow
@pytest.mark.django_db
def test_a_webhooks_lookup_is_bounded_by_the_deliverys_deadline(monkeypatch, settings):
    settings.PORTAL_NOTIFY_TIMEOUT = 1
    name = "slow-dns.partner.test"
    monkeypatch.setattr(socket, "getaddrinfo", Resolver(name, "93.184.216.34", delay=5))
    subscribe(f"https://{name}/hook")
    outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})

    started = time.monotonic()
    delivery = send_once()

    assert time.monotonic() - started < 3
    [attempt] = DeliveryAttempt.objects.all()
    assert "took longer than 1 s" in attempt.error
    assert delivery.status == Delivery.Status.PENDING
