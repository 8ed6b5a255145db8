"""The outbox: written with its cause, delivered with retries, signed, never lost."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test import Client
from django.utils import timezone

from agents import signing
from portal.accounts.tokens import api_token_create
from portal.models import Delivery, DeliveryAttempt, Notification, Subscription
from portal.notify import outbox
from portal.notify.notifier import Notifier, outbox_dispatch
from portal.reviews.decisions import decision_submit
from tests.factories import make_user
from tests.loopback import WebhookReceiver

SECRET = "whsec-test-0123456789"


@pytest.fixture
def fast_retries(settings):
    settings.PORTAL_NOTIFY_BACKOFF_SECONDS = 0.05
    settings.PORTAL_NOTIFY_BACKOFF_MAX_SECONDS = 0.2
    settings.PORTAL_NOTIFY_TIMEOUT = 2


@pytest.fixture(autouse=True)
def receivers_on_loopback(settings):
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receivers here listen on loopback


@pytest.fixture
def receiver():
    with WebhookReceiver(SECRET) as server:
        yield server


def subscribe(url: str, *, channel: str = "webhook", secret: str = SECRET, **extra) -> Subscription:
    return outbox.subscription_save(
        subscription=Subscription(name="ops", channel=channel, target=url, secret=secret, **extra),
        user=None,
    )


def drain(*, until=lambda: False, timeout: float = 10.0) -> None:
    """Run notifier rounds until ``until()`` holds (or nothing is left to do)."""
    notifier = Notifier(name="test-notifier")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        notifier.tick()
        if until():
            return
        if not Delivery.objects.filter(status=Delivery.Status.PENDING).exists():
            if not Notification.objects.filter(dispatched_at__isnull=True).exists():
                return
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_webhook_arrives_signed_and_the_receiver_verifies_it(receiver):
    subscribe(receiver.url)
    note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "boom"}})

    drain()

    assert list(receiver.handled) == [str(note.pk)]
    headers, body = receiver.requests[0]
    assert signing.verify(SECRET, headers["portal-signature"], body)  # the receiver's check
    assert headers["portal-event-type"] == "run.failed"
    event = json.loads(body)
    assert event["id"] == str(note.pk)
    assert event["type"] == "run.failed"
    assert event["data"] == {"run": {"error": "boom"}}
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.SENT
    assert list(delivery.log.values_list("number", "ok", "status_code")) == [(1, True, 200)]


@pytest.mark.django_db(transaction=True)
def test_a_receiver_with_another_secret_refuses_it_and_the_delivery_log_says_so(
    fast_retries, settings
):
    settings.PORTAL_NOTIFY_MAX_ATTEMPTS = 2
    with WebhookReceiver("another-secret") as other:
        subscribe(other.url)
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED)
        drain()

    assert other.handled == {}
    assert len(other.refused) == 2
    assert "does not match" in other.refused[0]
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.FAILED
    assert "gave up after 2 attempts" in delivery.last_error
    assert "answered 401" in delivery.last_error
    assert list(delivery.log.values_list("ok", "status_code")) == [(False, 401), (False, 401)]


def make_due() -> None:
    """What the passing of each delivery's backoff does (tests do not wait for it)."""
    Delivery.objects.filter(status=Delivery.Status.PENDING).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.mark.django_db(transaction=True)
def test_with_the_receiver_down_deliveries_retry_and_each_arrives_once_when_it_is_back(
    receiver,
):
    subscribe(receiver.url)
    receiver.stop()
    notes = [outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"n": n}) for n in range(5)]
    outbox_dispatch()

    for attempt in (1, 2, 3):  # three tries against a closed port
        assert outbox.outbox_deliver() == 5
        assert outbox.outbox_deliver() == 0  # each is backing off now, none is due
        assert set(Delivery.objects.values_list("attempts", flat=True)) == {attempt}
        make_due()
    assert Delivery.objects.filter(status=Delivery.Status.PENDING).count() == 5
    assert set(Delivery.objects.values_list("attempts", flat=True)) == {3}
    assert not DeliveryAttempt.objects.filter(ok=True).exists()
    assert DeliveryAttempt.objects.filter(error__contains="could not reach").count() == 15

    receiver.start()  # the same port
    assert outbox.outbox_deliver() == 5

    assert sorted(receiver.handled) == sorted(str(n.pk) for n in notes)
    assert receiver.repeats == 0
    assert len(receiver.requests) == 5  # nothing sent twice once it was up
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == 5
    assert outbox.outbox_deliver() == 0


def test_a_notifier_round_tries_each_due_delivery_once_however_short_its_backoff(
    transactional_db, settings, receiver
):
    settings.PORTAL_NOTIFY_BACKOFF_SECONDS = 0.001  # due again before the round is over
    settings.PORTAL_NOTIFY_BACKOFF_MAX_SECONDS = 0.001
    subscribe(receiver.url)
    receiver.stop()
    outbox.outbox_enqueue(kind=outbox.RUN_FAILED)

    Notifier(name="test-notifier").tick()

    delivery = Delivery.objects.get()
    assert (delivery.attempts, delivery.status) == (1, Delivery.Status.PENDING)


@pytest.mark.django_db(transaction=True)
def test_a_lost_answer_is_sent_again_with_the_same_event_id_and_handled_once(
    fast_retries, receiver
):
    subscribe(receiver.url)
    receiver.drop_answers = 1  # handled, but the answer never reaches the portal
    note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED)

    drain(until=lambda: Delivery.objects.filter(status=Delivery.Status.SENT).exists())

    assert len(receiver.requests) == 2
    ids = {headers["portal-event-id"] for headers, _ in receiver.requests}
    assert ids == {str(note.pk)}
    assert list(receiver.handled) == [str(note.pk)]
    assert receiver.repeats == 1


@pytest.mark.django_db(transaction=True)
def test_backoff_doubles_up_to_its_ceiling(settings):
    settings.PORTAL_NOTIFY_BACKOFF_SECONDS = 10
    settings.PORTAL_NOTIFY_BACKOFF_MAX_SECONDS = 60
    assert [outbox.backoff(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]


@pytest.mark.django_db(transaction=True)
def test_a_notification_rolled_back_with_its_cause_is_never_sent(receiver):
    subscribe(receiver.url)

    class Cause(Exception):
        pass

    with pytest.raises(Cause), transaction.atomic():
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED)
        raise Cause

    drain()
    assert not Notification.objects.exists()
    assert receiver.requests == []


@pytest.mark.django_db(transaction=True)
def test_email_goes_through_djangos_backend(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    subscribe("ops@example.test, lead@example.test", channel="email", secret="")
    note = outbox.outbox_enqueue(
        kind=outbox.RUN_FAILED, agent="refunds", payload={"run": {"error": "ValueError: x"}}
    )

    drain()

    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ops@example.test", "lead@example.test"]
    assert message.subject == "A run of refunds failed: ValueError: x"
    assert str(note.pk) in message.body


@pytest.mark.django_db(transaction=True)
def test_a_slack_style_webhook_gets_a_text_message():
    with WebhookReceiver() as slack:  # no secret: Slack URLs are not signed
        subscribe(slack.url, channel="slack", secret="")
        note = outbox.outbox_enqueue(
            kind=outbox.RUN_FAILED, agent="refunds", payload={"run": {"error": "boom"}}
        )
        drain()

    headers, body = slack.requests[0]
    assert json.loads(body) == {"text": "A run of refunds failed: boom"}
    assert headers["portal-event-id"] == str(note.pk)


@pytest.mark.django_db(transaction=True)
def test_a_named_target_gets_the_notification_and_no_subscription_does(receiver):
    with WebhookReceiver(SECRET) as bystander:
        subscribe(bystander.url)
        note = outbox.outbox_enqueue(
            kind="agent.callback",
            payload={"answer": 42},
            to=outbox.Target.webhook(receiver.url, secret=SECRET),
        )
        drain()

    assert list(receiver.handled) == [str(note.pk)]
    assert json.loads(receiver.handled[str(note.pk)])["data"] == {"answer": 42}
    assert bystander.requests == []


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (outbox.Target.webhook("http://127.0.0.1/hook", secret=""), "needs a secret"),
        (outbox.Target.webhook("file:///etc/passwd", secret="s"), "give an http:// or https://"),
        (outbox.Target.slack("hooks.example.test/x"), "give an http:// or https://"),
        (outbox.Target.email("not-an-address"), "not a list of email addresses"),
        (outbox.Target("pager", "x"), "unknown channel 'pager'"),
    ],
)
def test_a_target_that_cannot_be_delivered_to_is_refused_saying_why(target, problem):
    with pytest.raises(outbox.TargetError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED, to=target)


@pytest.mark.django_db
def test_subscriptions_match_by_kind_agent_and_reason(receiver):
    subscribe(receiver.url, events=["request.expired"], agent="refunds", reason="tool_approval")
    outbox.outbox_enqueue(kind=outbox.REQUEST_EXPIRED, agent="refunds", reason="tool_approval")
    outbox.outbox_enqueue(kind=outbox.REQUEST_EXPIRED, agent="transfers", reason="tool_approval")
    outbox.outbox_enqueue(kind=outbox.REQUEST_EXPIRED, agent="refunds", reason="breakpoint")
    outbox.outbox_enqueue(kind=outbox.RUN_FAILED, agent="refunds", reason="tool_approval")

    assert outbox_dispatch() == 4

    matched = Delivery.objects.values_list("notification__agent", "notification__reason")
    assert list(matched) == [("refunds", "tool_approval")]
    assert not Notification.objects.filter(dispatched_at__isnull=True).exists()


@pytest.mark.django_db(transaction=True)
def test_a_redirect_is_not_followed_with_the_signed_body(fast_retries, settings, receiver):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    settings.PORTAL_NOTIFY_MAX_ATTEMPTS = 1

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", receiver.url)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        subscribe(f"http://127.0.0.1:{server.server_address[1]}/hook")
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED)
        drain()
    finally:
        server.shutdown()
        server.server_close()

    assert receiver.requests == []
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.FAILED
    assert "answered 302" in delivery.last_error


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_embedded_notifier_is_woken_by_a_commit_and_sends_at_once(receiver):
    from portal.notify.notifier import start_embedded_notifier, stop_embedded_notifier
    from tests.processes import wait_for

    subscribe(receiver.url)
    notifier = start_embedded_notifier()
    try:
        assert start_embedded_notifier() is notifier  # one per process
        notifier.poll = 60  # only the commit's wake-up can make it send in time
        time.sleep(1.5)  # past its first wait (the default poll): now in a long one
        note = outbox.outbox_enqueue(kind=outbox.RUN_FAILED)
        wait_for(lambda: receiver.handled, timeout=5, what="the embedded notifier")
    finally:
        stop_embedded_notifier()
    assert list(receiver.handled) == [str(note.pk)]


@pytest.mark.django_db(transaction=True)
def test_a_request_whose_message_spans_lines_is_emailed_with_a_one_line_subject(settings):
    from tests.factories import make_interrupt

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    subscribe("ops@example.test", channel="email", secret="")
    make_interrupt(message="Approve this refund?\n\n**Order** A-1001,\r\n$42.50")

    drain()

    [message] = mail.outbox
    assert (
        message.subject == "New request from refunds: Approve this refund? **Order** A-1001, $42.50"
    )
    assert Delivery.objects.get().status == Delivery.Status.SENT


# --- a send's deadline and a delivery's lease --------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}


class DripReceiver:
    """Answers every request one byte of its status line at a time: each read the sender
    makes gets a byte well within any per-read timeout, and the answer never ends."""

    def __init__(self, *, every: float, total: float) -> None:
        self.every, self.total = every, total
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        started = time.monotonic()
        with conn:
            try:
                conn.recv(65536)
                for byte in b"HTTP/1.1 200 " + b"O" * 10_000:
                    if time.monotonic() - started > self.total:
                        break
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
                conn.sendall(b"\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass  # the sender gave up and hung up

    def close(self) -> None:
        self.sock.close()


def callback_request(token: str, url: str, reviewer) -> None:
    """An external agent's request with a callback, answered: one delivery to ``url``."""
    response = Client().post(
        "/api/requests",
        json.dumps({"agent": "invoice-bot", "response_schema": SCHEMA, "callback_url": url}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    rid = response.json()["id"]
    decision_submit(
        interrupt=rid, reviewer=reviewer, value={"approved": True}, resume_interrupt_id=rid
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_a_slow_callback_cannot_hold_the_notifier_past_its_timeout(roles, reviewer, settings):
    settings.PORTAL_API_RATE = ""
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receivers are on loopback
    settings.PORTAL_NOTIFY_TIMEOUT = 1
    settings.PORTAL_NOTIFY_MAX_ATTEMPTS = 5
    receiver = DripReceiver(every=0.2, total=6)
    token = api_token_create(
        user=make_user("ivy-bot", role="agent"), name="bot", scopes=["request"]
    )[1]
    try:
        callback_request(token, receiver.url, reviewer)
        Delivery.objects.update(next_attempt_at=Now())

        started = time.monotonic()
        assert outbox.outbox_deliver() == 1
        took = time.monotonic() - started

        # Within its lease, so no other notifier could have taken the delivery meanwhile.
        assert took <= settings.PORTAL_NOTIFY_TIMEOUT * 2 + 1, (
            f"one send held the notifier {took:.1f}s"
        )
        attempt = DeliveryAttempt.objects.get()
        assert not attempt.ok
        assert "took longer than 1 s" in attempt.error
        delivery = Delivery.objects.get()
        assert delivery.status == Delivery.Status.PENDING  # retried, not dropped
        assert delivery.next_attempt_at > timezone.now()
        assert "took longer than 1 s" in delivery.last_error

        # Its retry is bounded the same way, and logged as the second attempt.
        Delivery.objects.update(next_attempt_at=Now())
        started = time.monotonic()
        assert outbox.outbox_deliver() == 1
        assert time.monotonic() - started <= settings.PORTAL_NOTIFY_TIMEOUT * 2 + 1
        assert list(DeliveryAttempt.objects.order_by("number").values_list("number", "ok")) == [
            (1, False),
            (2, False),
        ]
        assert receiver.connections == 2
    finally:
        receiver.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_notifiers_never_send_one_event_twice_when_no_answer_was_lost(
    roles, reviewer, settings
):
    settings.PORTAL_API_RATE = ""
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receivers are on loopback
    settings.PORTAL_NOTIFY_TIMEOUT = 1  # a lease of 3 s
    row, token = api_token_create(
        user=make_user("ivy-bot", role="agent"), name="bot", scopes=["request"]
    )
    receiver = WebhookReceiver(row.webhook_secret).start()
    # Five sends of 0.75 s each: the batch outlasts the lease its claim took.
    receiver.hang = 0.75
    try:
        for _ in range(5):
            callback_request(token, receiver.url, reviewer)
        Delivery.objects.update(next_attempt_at=Now())

        def first() -> None:
            try:
                outbox.outbox_deliver()
            finally:
                connection.close()

        one = threading.Thread(target=first)
        one.start()
        time.sleep(3.4)  # the first notifier's claim has run out; its batch has not
        outbox.outbox_deliver()
        one.join(30)

        assert receiver.repeats == 0, f"{receiver.repeats} event(s) sent twice"
        assert len(receiver.handled) == 5
        assert set(Delivery.objects.values_list("status", flat=True)) == {Delivery.Status.SENT}
    finally:
        receiver.stop()
