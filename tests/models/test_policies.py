"""Policies per agent and reason: separation of duties, a required group, expiry; claims."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.utils import timezone

from portal.errors import AlreadyDecided, ClaimConflict, DecisionForbidden
from portal.models import Decision, Interrupt, Run, Thread
from portal.models.policies import expiry_names_agents, policy_for
from portal.reviews.claims import interrupt_claim, interrupt_unclaim
from portal.reviews.decisions import decision_submit
from portal.reviews.expiry import interrupts_expire
from tests.factories import make_interrupt, make_tool_approval, make_user

pytestmark = pytest.mark.django_db


def submit(interrupt, user, value=None):
    return decision_submit(
        interrupt=interrupt,
        reviewer=user,
        value={"approved": True} if value is None else value,
        resume_interrupt_id=interrupt.pk,
    )


# --- choosing the policy -------------------------------------------------------------------


def test_the_most_specific_policy_key_wins(settings):
    settings.PORTAL_POLICIES = {
        "*:*": {"required_group": "everyone"},
        "*:tool_approval": {"required_group": "approvers"},
        "refunds:*": {"required_group": "refunds-team"},
        "refunds:tool_approval": {"required_group": "refund-approvers"},
    }

    assert policy_for("refunds", "tool_approval").required_group == "refund-approvers"
    assert policy_for("refunds", "breakpoint").required_group == "refunds-team"
    assert policy_for("transfers", "tool_approval").required_group == "approvers"
    assert policy_for("transfers", "breakpoint").required_group == "everyone"


def test_whether_an_expiry_can_depend_on_the_agent(settings):
    """The checkpointer looks a thread's agent up before a pause only when it can."""
    settings.PORTAL_POLICIES = {"*:*": {"expires_after": 60}, "*:breakpoint": {}}
    assert not expiry_names_agents("tool_approval")
    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:tool_approval": {"expires_after": 60}}
    assert expiry_names_agents("tool_approval") and not expiry_names_agents("breakpoint")
    settings.PORTAL_POLICIES = {"transfers:*": {"expires_after": 60}}
    assert expiry_names_agents("breakpoint")


def test_settings_a_policy_leaves_out_take_safe_defaults(settings):
    settings.PORTAL_POLICIES = {"refunds:*": {"expires_after": 60}}

    policy = policy_for("refunds", "tool_approval")

    assert policy.key == "refunds:*"
    assert policy.separation_of_duties is True
    assert policy.required_group is None
    assert policy.expires_after == timedelta(seconds=60)
    assert policy_for("other", "x").key == ""  # no match: defaults


def test_a_bad_expiry_setting_names_the_key(settings):
    settings.PORTAL_POLICIES = {"*:*": {"expires_after": "soon"}}

    with pytest.raises(ValueError, match=r"PORTAL_POLICIES\['\*:\*'\]"):
        policy_for("refunds", "tool_approval")


# --- separation of duties ------------------------------------------------------------------


@pytest.fixture
def support_reviewer(roles):
    """Someone with both roles: may start threads and decide requests."""
    user = make_user("sasha-both", role="support")
    user.groups.add(roles["reviewer"])
    return user


def test_whoever_started_a_thread_cannot_decide_its_requests(support_reviewer):
    interrupt = make_interrupt(owner=support_reviewer)

    with pytest.raises(DecisionForbidden) as refused:
        submit(interrupt, support_reviewer)

    assert refused.value.status_code == 403
    assert "separation of duties" in str(refused.value)
    assert Decision.objects.count() == 0


def test_separation_of_duties_binds_admins_too(admin_user):
    interrupt = make_interrupt(owner=admin_user)

    with pytest.raises(DecisionForbidden):
        submit(interrupt, admin_user)


def test_a_policy_can_turn_separation_of_duties_off(settings, support_reviewer):
    settings.PORTAL_POLICIES = {"refunds:*": {"separation_of_duties": False}}
    interrupt = make_interrupt(owner=support_reviewer)

    assert submit(interrupt, support_reviewer).reviewer == support_reviewer


def test_someone_else_may_decide_the_owners_request(support_reviewer, reviewer):
    interrupt = make_interrupt(owner=support_reviewer)

    assert submit(interrupt, reviewer).reviewer == reviewer


def test_the_interrupt_page_tells_the_owner_why_there_is_no_form(client, support_reviewer):
    interrupt = make_interrupt(owner=support_reviewer)
    client.force_login(support_reviewer)

    html = client.get(f"/interrupts/{interrupt.pk}/").content.decode()

    assert 'id="decision-form"' not in html
    assert "separation of duties" in html


# --- a required group ----------------------------------------------------------------------


def test_a_required_group_keeps_other_reviewers_out(settings, reviewer, second_reviewer):
    settings.PORTAL_POLICIES = {"transfers:tool_approval": {"required_group": "finance"}}
    second_reviewer.groups.add(Group.objects.create(name="finance"))
    interrupt = make_tool_approval(agent="transfers")

    with pytest.raises(DecisionForbidden) as refused:
        submit(interrupt, reviewer)

    assert "'finance' group" in str(refused.value)
    assert submit(interrupt, second_reviewer).reviewer == second_reviewer


def test_a_required_group_applies_only_where_the_policy_says(settings, reviewer):
    settings.PORTAL_POLICIES = {"transfers:*": {"required_group": "finance"}}
    interrupt = make_interrupt(agent="refunds")

    assert submit(interrupt, reviewer).reviewer == reviewer


def test_a_required_group_refusal_reaches_the_api_as_403(client, settings, reviewer):
    from portal.accounts.tokens import api_token_create

    settings.PORTAL_POLICIES = {"*:*": {"required_group": "finance"}}
    interrupt = make_interrupt()
    token = api_token_create(user=reviewer)[1]

    response = client.post(
        f"/api/threads/{interrupt.thread_id}/resume",
        {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 403
    assert "finance" in response.json()["detail"]


# --- expiry --------------------------------------------------------------------------------


def test_new_interrupts_get_an_expiry_from_the_policy(settings):
    settings.PORTAL_POLICIES = {"refunds:tool_approval": {"expires_after": 600}}
    before = timezone.now()

    interrupt = make_interrupt(agent="refunds")
    other = make_interrupt(agent="transfers")

    assert before + timedelta(seconds=600) <= interrupt.expires_at
    assert interrupt.expires_at <= timezone.now() + timedelta(seconds=600)
    assert other.expires_at is None


def expire(interrupt, *, ago=1):
    Interrupt.objects.filter(pk=interrupt.pk).update(
        expires_at=timezone.now() - timedelta(seconds=ago)
    )


def test_an_overdue_request_is_resolved_as_expired_and_resumed_with_a_decline():
    interrupt = make_interrupt()
    expire(interrupt)

    [decision] = interrupts_expire()

    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.EXPIRED and interrupt.decided
    assert decision.outcome == Decision.Outcome.EXPIRED
    assert decision.reviewer is None
    [run] = Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME)
    resume = run.input["resume"]
    assert resume["approved"] is False
    assert "expired" in resume["note"]
    assert run.input["resume_interrupt_id"] == interrupt.pk


def test_a_request_that_cannot_be_expired_does_not_keep_the_others_pending(monkeypatch):
    from portal.reviews import expiry

    broken, other = make_interrupt(), make_interrupt()
    expire(broken)
    expire(other)
    decline = expiry._decline_value

    def failing_for_one(locked, now):
        if locked.pk == broken.pk:
            raise ValueError("this request's data cannot be read")
        return decline(locked, now)

    monkeypatch.setattr(expiry, "_decline_value", failing_for_one)
    [decision] = interrupts_expire()

    assert decision.interrupt_id == other.pk
    broken.refresh_from_db()
    assert broken.status == Interrupt.Status.PENDING  # tried again next sweep


def test_an_overdue_tool_approval_with_typed_answers_is_declined_saying_it_expired():
    # A high-risk tool's approval, or a breakpoint's before the tools: the calls are
    # declined and the model is told why, as with a yes/no request.
    interrupt = make_tool_approval()
    expire(interrupt)

    [decision] = interrupts_expire()

    assert (decision.outcome, decision.executed_args) == (Decision.Outcome.EXPIRED, None)
    [run] = Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME)
    resume = run.input["resume"]
    assert resume["type"] == "ignore"
    assert resume["note"].startswith("The request expired at ")


def test_a_request_whose_schema_has_no_yes_or_no_is_resumed_with_none():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    interrupt = make_interrupt(schema=schema, reason="input_required")
    expire(interrupt)

    interrupts_expire()

    run = Run.objects.get(thread=interrupt.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"] is None


def test_requests_not_yet_due_or_already_decided_are_left_alone(reviewer):
    later = make_interrupt()
    Interrupt.objects.filter(pk=later.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    decided = make_interrupt()
    submit(decided, reviewer)
    expire(decided)
    never = make_interrupt()

    assert interrupts_expire() == []
    for interrupt in (later, never):
        interrupt.refresh_from_db()
        assert interrupt.status == Interrupt.Status.PENDING
    assert Decision.objects.get(interrupt=decided).outcome == Decision.Outcome.APPROVED


def test_expiring_twice_records_one_decision():
    interrupt = make_interrupt()
    expire(interrupt)

    interrupts_expire()
    interrupts_expire()

    assert Decision.objects.filter(interrupt=interrupt).count() == 1
    assert Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).count() == 1


def test_a_reviewer_answering_an_expired_request_is_told_so(reviewer):
    interrupt = make_interrupt()
    expire(interrupt)
    interrupts_expire()

    with pytest.raises(AlreadyDecided) as refused:
        submit(interrupt, reviewer)

    assert "already decided by the system" in str(refused.value)
    assert "(expired)" in str(refused.value)


def test_the_expire_interrupts_command_expires_overdue_requests():
    interrupt = make_interrupt()
    expire(interrupt)
    out = StringIO()

    call_command("expire_interrupts", stdout=out)

    assert f"expired {interrupt.pk}" in out.getvalue()
    assert out.getvalue().strip().endswith("1 request(s) expired.")
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.EXPIRED


@pytest.mark.django_db(transaction=True)
def test_an_expired_refund_is_declined_by_the_agent_and_no_money_moves(settings, support_agent):
    """End to end: the worker pauses, the command expires, the worker resumes (fail closed)."""
    from agents.examples import refunds
    from portal.reviews.threads import thread_start
    from portal.runs.worker import Worker

    refunds.ISSUED.clear()
    settings.PORTAL_POLICIES = {"refunds:tool_approval": {"expires_after": 3600}}
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    Worker(name="t").run_forever(once=True)
    interrupt = Interrupt.objects.get(thread=thread)
    assert interrupt.expires_at is not None
    expire(interrupt)

    call_command("expire_interrupts", stdout=StringIO())
    Worker(name="t").run_forever(once=True)

    thread.refresh_from_db()
    assert thread.status == Thread.Status.DONE
    assert refunds.ISSUED == []
    from portal.runs.checkpointer import DjangoCheckpointer

    messages = DjangoCheckpointer().get_sync(str(thread.pk)).messages
    [tool_result] = [m for m in messages if m["role"] == "tool"]
    assert '"status": "declined"' in tool_result["content"]
    assert "expired" in tool_result["content"]


# --- claims --------------------------------------------------------------------------------


def test_a_claim_records_who_and_when(reviewer):
    interrupt = make_interrupt()

    interrupt_claim(interrupt=interrupt, user=reviewer)

    interrupt.refresh_from_db()
    assert interrupt.claimed_by == reviewer and interrupt.claimed_at is not None


def test_a_claim_held_by_someone_else_is_refused(reviewer, second_reviewer):
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)

    with pytest.raises(ClaimConflict) as refused:
        interrupt_claim(interrupt=interrupt, user=second_reviewer)
    with pytest.raises(DecisionForbidden):
        interrupt_unclaim(interrupt=interrupt, user=second_reviewer)
    with pytest.raises(DecisionForbidden):
        submit(interrupt, second_reviewer)

    assert refused.value.status_code == 409
    interrupt.refresh_from_db()
    assert interrupt.claimed_by == reviewer


def test_an_admin_can_take_over_a_claim_and_decide(reviewer, admin_user):
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)

    interrupt_claim(interrupt=interrupt, user=admin_user)

    interrupt.refresh_from_db()
    assert interrupt.claimed_by == admin_user
    assert submit(interrupt, admin_user).reviewer == admin_user


def test_the_holder_can_decide_their_claimed_request(reviewer):
    interrupt = make_interrupt()
    interrupt_claim(interrupt=interrupt, user=reviewer)

    assert submit(interrupt, reviewer).reviewer == reviewer


def test_a_decided_request_cannot_be_claimed(reviewer, second_reviewer):
    interrupt = make_interrupt()
    submit(interrupt, reviewer)

    with pytest.raises(AlreadyDecided):
        interrupt_claim(interrupt=interrupt, user=second_reviewer)


def test_an_auditor_cannot_claim(auditor):
    interrupt = make_interrupt()

    with pytest.raises(DecisionForbidden):
        interrupt_claim(interrupt=interrupt, user=auditor)


@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_expires_overdue_requests_without_the_command(settings, support_agent):
    """No cron job needed: the worker declines an overdue refund on its own (fail closed)."""
    from agents.examples import refunds
    from portal.reviews.threads import thread_start
    from portal.runs.worker import Worker

    refunds.ISSUED.clear()
    settings.PORTAL_POLICIES = {"refunds:tool_approval": {"expires_after": 3600}}
    thread, _ = thread_start(
        agent="refunds",
        input={"messages": [{"role": "user", "content": "Refund $42.50 for order A-1001."}]},
        user=support_agent,
    )
    Worker(name="t").run_forever(once=True)
    interrupt = Interrupt.objects.get(thread=thread)
    expire(interrupt)

    Worker(name="t", expire=interrupts_expire).run_forever(once=True)

    interrupt.refresh_from_db()
    thread.refresh_from_db()
    assert interrupt.status == Interrupt.Status.EXPIRED
    assert Decision.objects.get(interrupt=interrupt).outcome == Decision.Outcome.EXPIRED
    assert thread.status == Thread.Status.DONE
    assert refunds.ISSUED == []
