"""The admin's side of notifications: subscriptions are managed there (through the
outbox's services, so a bad target is refused saying why and each change is in the audit
trail), and the delivery log shows every delivery, its attempts and errors, read-only."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group
from django.urls import reverse

from portal.models import AuditEvent, Delivery, Subscription
from portal.notify import outbox
from portal.notify.notifier import Notifier
from tests.loopback import WebhookReceiver

pytestmark = pytest.mark.django_db

SECRET = "whsec-admin-0123456789"


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def form(**fields: str) -> dict[str, str]:
    return {
        "name": "ops",
        "channel": "webhook",
        "target": "https://hooks.example.test/portal",
        "secret": SECRET,
        "events": '["request.created"]',
        "agent": "refunds",
        "reason": "",
        "group": "",
        "active": "on",
        **fields,
    }


def test_a_subscription_by_agent_reason_and_group_is_added_in_the_admin_and_audited(
    admin_client,
):
    desk = Group.objects.create(name="refund-desk")
    url = reverse("admin:portal_subscription_add")
    response = admin_client.post(
        url, form(reason="tool_approval", group=str(desk.pk), channel="email", target="", secret="")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    sub = Subscription.objects.get()
    assert (sub.agent, sub.reason, sub.group, sub.events) == (
        "refunds",
        "tool_approval",
        desk,
        ["request.created"],
    )
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SUBSCRIPTION_CREATE).exists()

    changelist = admin_client.get(reverse("admin:portal_subscription_changelist"))
    assert b"refund-desk" in changelist.content


def test_a_webhook_without_a_secret_is_refused_in_the_admin_saying_why(admin_client):
    response = admin_client.post(reverse("admin:portal_subscription_add"), form(secret=""))
    assert response.status_code == 200
    assert not Subscription.objects.exists()
    errors = response.context["adminform"].form.non_field_errors()
    assert errors and "secret" in errors[0].lower()


def test_the_delivery_log_shows_each_delivery_its_attempts_and_errors_read_only(
    admin_client, settings
):
    settings.PORTAL_NOTIFY_TIMEOUT = 1
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receiver listens on loopback
    with WebhookReceiver("another-secret-0123456789") as receiver:
        outbox.subscription_save(
            subscription=Subscription(
                name="ops", channel="webhook", target=receiver.url, secret=SECRET
            ),
            user=None,
        )
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "x"}})
        Notifier(name="n").tick()  # the receiver refuses the signature: a failed attempt

    delivery = Delivery.objects.get()
    assert delivery.attempts == 1 and delivery.last_error
    listing = admin_client.get(reverse("admin:portal_delivery_changelist"))
    assert listing.status_code == 200
    assert receiver.url.encode() in listing.content
    page = admin_client.get(reverse("admin:portal_delivery_change", args=[quote(delivery.pk)]))
    assert page.status_code == 200
    assert delivery.last_error.encode()[:40] in page.content
    # The log is not for editing: no add, change or delete for anyone, superusers included.
    assert admin_client.get(reverse("admin:portal_delivery_add")).status_code == 403
    assert (
        admin_client.post(
            reverse("admin:portal_delivery_delete", args=[quote(delivery.pk)]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert Delivery.objects.filter(pk=delivery.pk).exists()


def test_the_change_page_never_shows_a_webhooks_secret_and_blank_keeps_it(admin_client):
    sub = Subscription.objects.create(
        name="ops",
        channel="webhook",
        target="https://hooks.example.test/portal",
        secret=SECRET,
        events=["request.created"],
    )
    url = reverse("admin:portal_subscription_change", args=[quote(sub.pk)])

    page = admin_client.get(url).content.decode()
    assert SECRET not in page

    response = admin_client.post(url, form(name="ops renamed", secret=""))
    assert response.status_code == 302, response.content.decode()[:2000]
    sub.refresh_from_db()
    assert (sub.name, sub.secret) == ("ops renamed", SECRET)

    response = admin_client.post(url, form(secret="whsec-rotated-0123456789"))
    assert response.status_code == 302, response.content.decode()[:2000]
    sub.refresh_from_db()
    assert sub.secret == "whsec-rotated-0123456789"
