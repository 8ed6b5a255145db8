"""Routing: a policy or the agent assigns a request; assignees see it under "Assigned to
me" in the queue and the API; a reminder before expiry, then an escalation; every step
recorded (a RoutingEvent and an audit event) and announced through the outbox."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import connection
from django.utils import timezone

from portal.accounts.tokens import api_token_create
from portal.models import (
    Assignment,
    AuditEvent,
    Delivery,
    Interrupt,
    Notification,
    RoutingEvent,
    Subscription,
)
from portal.notify import outbox
from portal.notify.assignments import requests_remind_and_escalate
from portal.notify.notifier import Notifier, outbox_dispatch
from tests.factories import make_interrupt, make_user

ROUTED = {
    "*:*": {"separation_of_duties": True},
    "refunds:tool_approval": {
        "expires_after": 3600,
        "assign_to": ["group:refund-desk"],
        "remind_before": 600,
        "escalate_after": 300,
        "escalate_to": "refund-leads",
    },
}


@pytest.fixture
def routed(settings, db):
    settings.PORTAL_POLICIES = ROUTED
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    desk, leads = (
        Group.objects.create(name="refund-desk"),
        Group.objects.create(name="refund-leads"),
    )
    return desk, leads


@pytest.fixture
def desk_reviewer(routed):
    user = make_user("dora-desk", role="reviewer", email="dora@example.test")
    user.groups.add(routed[0])
    return user


@pytest.fixture
def lead_reviewer(routed):
    user = make_user("leo-lead", role="reviewer", email="leo@example.test")
    user.groups.add(routed[1])
    return user


def routing(interrupt: Interrupt) -> list[tuple[str, str]]:
    rows = RoutingEvent.objects.filter(interrupt=interrupt).order_by("id")
    return [
        (r.action, r.group.name if r.group else r.user.username if r.user else "") for r in rows
    ]


def test_a_policy_assigns_a_new_request_to_its_group_and_tells_its_members(desk_reviewer):
    interrupt = make_interrupt(agent="refunds", reason="tool_approval")

    Notifier(name="n").run_forever(once=True)

    [assignment] = Assignment.objects.filter(interrupt=interrupt)
    assert (assignment.group.name, assignment.source) == ("refund-desk", "policy")
    assert routing(interrupt) == [("assigned", "refund-desk")]
    event = AuditEvent.objects.get(action=AuditEvent.Action.ASSIGN)
    assert (event.target_id, event.detail["to"]) == (interrupt.pk, "group:refund-desk")
    note = Notification.objects.get(kind=outbox.REQUEST_ASSIGNED)
    assert note.payload["assignees"] == ["dora-desk"]
    [message] = mail.outbox
    assert message.to == ["dora@example.test"]
    assert message.subject.startswith("Request from refunds assigned to you")


def test_the_agent_can_name_who_should_answer_when_it_asks(routed, reviewer):
    interrupt = make_interrupt(agent="other", assign_to=["user:rita-reviewer", "user:nobody"])

    outbox_dispatch()

    [assignment] = Assignment.objects.filter(interrupt=interrupt)
    assert (assignment.user, assignment.source) == (reviewer, "interrupt")
    assert routing(interrupt) == [("assigned", "rita-reviewer")]  # nobody: no such user


def test_assigned_to_me_in_the_queue_shows_only_requests_for_me_or_my_groups(
    client, desk_reviewer, reviewer
):
    mine = make_interrupt(agent="refunds", reason="tool_approval")
    other = make_interrupt(agent="transfers")
    outbox_dispatch()

    client.force_login(desk_reviewer)
    everything = client.get("/queue/")
    assigned = client.get("/queue/", {"assigned": "me"})

    assert {i.pk for i in everything.context["page"].items} == {mine.pk, other.pk}
    assert [i.pk for i in assigned.context["page"].items] == [mine.pk]
    assert b'aria-current="page">Assigned to me' in assigned.content
    assert b'data-assigned="me"' in assigned.content

    client.force_login(reviewer)  # not in the group
    nothing = client.get("/queue/", {"assigned": "me"})
    assert list(nothing.context["page"].items) == []
    assert b"Nothing pending is assigned to you" in nothing.content


def test_assigned_to_me_in_the_api_lists_only_requests_for_me_or_my_groups(
    client, desk_reviewer, reviewer
):
    mine = make_interrupt(agent="refunds", reason="tool_approval")
    make_interrupt(agent="transfers")
    outbox_dispatch()

    def listed(user) -> list[str]:
        token = api_token_create(user=user, name="t")[1]
        response = client.get(
            "/api/interrupts",
            {"status": "pending", "assigned": "me"},
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 200, response.content
        return [item["id"] for item in response.json()["items"]]

    assert listed(desk_reviewer) == [mine.pk]
    assert listed(reviewer) == []


def test_the_api_lists_whom_a_request_is_assigned_to_and_when_it_was_reminded_and_escalated(
    client, desk_reviewer, lead_reviewer
):
    interrupt = make_interrupt(agent="refunds", reason="tool_approval")
    token = api_token_create(user=desk_reviewer, name="t")[1]

    def shown() -> dict:
        response = client.get(
            f"/api/interrupts/{interrupt.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        assert response.status_code == 200, response.content
        listed = client.get("/api/interrupts", HTTP_AUTHORIZATION=f"Bearer {token}").json()
        (item,) = [i for i in listed["items"] if i["id"] == interrupt.pk]
        assert item == response.json()  # the list says what the request's own page says
        return response.json()

    before = shown()
    assert (before["assigned_to"], before["reminded_at"], before["escalated_at"]) == (
        [],
        None,
        None,
    )
    outbox_dispatch()
    routed = shown()
    assert [(a["user"], a["group"], a["source"]) for a in routed["assigned_to"]] == [
        (None, "refund-desk", "policy")
    ]
    assert routed["reminded_at"] is None
    expires = Interrupt.objects.get(pk=interrupt.pk).expires_at
    requests_remind_and_escalate(now=expires - timedelta(seconds=600))
    requests_remind_and_escalate(now=expires - timedelta(seconds=300))
    escalated = shown()
    assert [(a["group"], a["source"]) for a in escalated["assigned_to"]] == [
        ("refund-desk", "policy"),
        ("refund-leads", "escalation"),
    ]
    events = {e.action: e.created_at for e in RoutingEvent.objects.filter(interrupt=interrupt)}
    assert escalated["reminded_at"] is not None and escalated["escalated_at"] is not None
    assert escalated["reminded_at"].startswith(events["reminded"].isoformat()[:19])
    assert escalated["escalated_at"].startswith(events["escalated"].isoformat()[:19])


def test_requests_already_reminded_do_not_crowd_out_those_still_due(db, monkeypatch, settings):
    # Under a policy with no escalation, a reminded request stays pending (and a candidate)
    # until decided; a sweep that looked only at its first few candidates found nothing to
    # do there, sweep after sweep, and the rest were never reminded.
    import portal.notify.assignments

    settings.PORTAL_POLICIES = {"refunds:*": {"expires_after": 3600, "remind_before": 3000}}
    monkeypatch.setattr(portal.notify.assignments, "SWEEP_LIMIT", 2)
    made = [make_interrupt(agent="refunds", message=f"r{i}").pk for i in range(5)]
    last = max(Interrupt.objects.filter(pk__in=made).values_list("expires_at", flat=True))
    now = last - timedelta(seconds=3000)

    sweeps = [requests_remind_and_escalate(now=now + timedelta(seconds=n)) for n in range(4)]

    assert sweeps == [(2, 0), (2, 0), (1, 0), (0, 0)]
    reminded = RoutingEvent.objects.filter(action=RoutingEvent.Action.REMINDED)
    assert sorted(reminded.values_list("interrupt_id", flat=True)) == sorted(made)


def test_a_reminder_goes_out_before_expiry_and_an_escalation_after_a_further_delay(
    desk_reviewer, lead_reviewer
):
    interrupt = make_interrupt(agent="refunds", reason="tool_approval")
    outbox_dispatch()
    expires = Interrupt.objects.get(pk=interrupt.pk).expires_at
    remind_at = expires - timedelta(seconds=600)

    assert requests_remind_and_escalate(now=remind_at - timedelta(seconds=1)) == (0, 0)
    assert requests_remind_and_escalate(now=remind_at) == (1, 0)
    assert requests_remind_and_escalate(now=remind_at + timedelta(seconds=299)) == (0, 0)
    assert requests_remind_and_escalate(now=remind_at + timedelta(seconds=300)) == (0, 1)
    assert requests_remind_and_escalate(now=remind_at + timedelta(seconds=900)) == (0, 0)

    assert routing(interrupt) == [
        ("assigned", "refund-desk"),
        ("reminded", ""),
        ("escalated", "refund-leads"),
    ]
    escalation = Assignment.objects.get(interrupt=interrupt, source="escalation")
    assert escalation.group.name == "refund-leads"
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == [AuditEvent.Action.REMIND, AuditEvent.Action.ESCALATE]

    mail.outbox.clear()
    outbox_dispatch()
    Notifier(name="n").run_forever(once=True)
    kinds = set(Notification.objects.values_list("kind", flat=True))
    assert {outbox.REQUEST_REMINDER, outbox.REQUEST_ESCALATED} <= kinds
    sent = {(m.subject.split(":")[0], tuple(m.to)) for m in mail.outbox}
    assert ("Reminder", ("dora@example.test",)) in sent
    assert ("Request from refunds escalated", ("leo@example.test",)) in sent

    # The lead sees it under "Assigned to me" now.
    assert Interrupt.objects.filter(
        pk=interrupt.pk, assignments__group__user=lead_reviewer
    ).exists()


def test_a_decided_request_gets_no_reminder(desk_reviewer, reviewer):
    from tests.factories import make_decision

    interrupt = make_interrupt(agent="refunds", reason="tool_approval")
    make_decision(interrupt=interrupt, reviewer=reviewer)

    assert requests_remind_and_escalate(now=timezone.now() + timedelta(hours=2)) == (0, 0)


def test_a_subscription_for_a_group_hears_only_requests_routed_to_it(routed):
    desk, _ = routed
    outbox.subscription_save(
        subscription=Subscription(
            name="desk", channel="email", target="desk@example.test", group=desk
        ),
        user=None,
    )
    routed_there = make_interrupt(agent="refunds", reason="tool_approval")
    make_interrupt(agent="transfers")

    outbox_dispatch()

    delivered = Delivery.objects.filter(subscription__name="desk")
    assert set(delivered.values_list("notification__interrupt_id", flat=True)) == {routed_there.pk}


def test_subscription_changes_are_in_the_audit_trail_without_their_secret(admin_user):
    sub = outbox.subscription_save(
        subscription=Subscription(
            name="hook", channel="webhook", target="https://hooks.example.test/x", secret="s3"
        ),
        user=admin_user,
    )
    sub.active = False
    outbox.subscription_save(subscription=sub, user=admin_user)
    outbox.subscription_delete(subscription=sub, user=admin_user)

    events = AuditEvent.objects.order_by("id").filter(target_type="subscription")
    assert list(events.values_list("action", "actor_name")) == [
        ("subscription.create", "ada-admin"),
        ("subscription.change", "ada-admin"),
        ("subscription.delete", "ada-admin"),
    ]
    assert all("s3" not in str(e.detail) for e in events)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_notifiers_sweeping_at_once_send_one_reminder_and_one_escalation(settings):
    settings.PORTAL_POLICIES = ROUTED
    Group.objects.create(name="refund-desk")
    Group.objects.create(name="refund-leads")
    interrupt = make_interrupt(agent="refunds", reason="tool_approval")
    late = Interrupt.objects.get(pk=interrupt.pk).expires_at  # past both points
    sweepers = 6
    barrier = threading.Barrier(sweepers)
    results: list[object] = []

    def sweep() -> None:
        try:
            barrier.wait(timeout=30)
            results.append(requests_remind_and_escalate(now=late))
        except Exception as exc:
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(sweepers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(r[0] for r in results) == 1  # type: ignore[index]
    assert sum(r[1] for r in results) == 1  # type: ignore[index]
    assert RoutingEvent.objects.filter(interrupt=interrupt, action="reminded").count() == 1
    assert RoutingEvent.objects.filter(interrupt=interrupt, action="escalated").count() == 1
    assert Notification.objects.filter(kind=outbox.REQUEST_REMINDER).count() == 1


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"remind_before": 60}, "remind_before but no expires_after"),
        ({"expires_after": 600, "escalate_after": 60, "escalate_to": "x"}, "no remind_before"),
        ({"expires_after": 600, "remind_before": 60, "escalate_to": "x"}, "or neither"),
        ({"assign_to": ["finance"]}, "'user:<username>' or 'group:<name>'"),
    ],
)
def test_a_routing_policy_that_could_never_fire_is_refused_saying_why(settings, entry, problem):
    from portal.models.policies import policy_for

    settings.PORTAL_POLICIES = {"refunds:*": entry}
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")) as refused:
        policy_for("refunds", "tool_approval")
    assert "PORTAL_POLICIES['refunds:*']" in str(refused.value)


def test_the_start_up_check_names_a_routing_policy_that_could_never_fire(settings):
    from portal.checks import check_policies

    settings.PORTAL_POLICIES = {"refunds:*": {"remind_before": 60}}
    [error] = check_policies()
    assert error.id == "portal.E001"
    assert "remind_before but no expires_after" in error.msg
