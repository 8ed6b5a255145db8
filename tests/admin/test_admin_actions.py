"""The admin's bulk actions: each selected row goes through the service its page uses,
and only users holding that service's permission are offered the action."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from portal.models import Decision, Interrupt, Run, Thread
from tests.factories import (
    admin_change_url,
    make_interrupt,
    make_thread,
    make_tool_approval,
    make_user,
)

pytestmark = pytest.mark.django_db


def _failed(owner=None) -> Thread:
    thread = make_thread(agent="refunds", owner=owner)
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.FAILED)
    return thread


def act(client, model: str, action: str, rows) -> str:
    response = client.post(
        f"/admin/portal/{model}/",
        {"action": action, "_selected_action": [str(r.pk) for r in rows]},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_retrying_the_selected_threads_retries_the_failed_ones_and_says_why_not_the_rest(
    client, admin_user
):
    failed = [_failed(), _failed()]
    done = make_thread(agent="refunds")
    Thread.objects.filter(pk=done.pk).update(status=Thread.Status.DONE)
    client.force_login(admin_user)

    page = act(client, "thread", "retry_threads", [*failed, done])

    assert "Retried from their last checkpoint: 2." in page
    assert "Refused (1)" in page and "only a failed thread can be retried" in page
    assert Run.objects.filter(kind=Run.Kind.CONTINUE).count() == 2
    assert not Run.objects.filter(thread=done).exists()


def test_cancelling_the_selected_threads_goes_through_thread_abort(client, admin_user):
    request = make_interrupt()
    client.force_login(admin_user)

    page = act(client, "thread", "cancel_threads", [request.thread])

    assert "Cancelled: 1." in page
    thread = Thread.objects.get(pk=request.thread_id)
    assert (thread.status, thread.cancelled_by) == (Thread.Status.CANCELLED, admin_user)
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.CANCELLED


def test_expiring_the_selected_requests_declines_them_and_names_who(client, admin_user):
    request = make_interrupt()
    client.force_login(admin_user)

    page = act(client, "interrupt", "expire_requests", [request])

    assert "Expired: 1." in page
    decision = Decision.objects.get(interrupt=request)
    assert (decision.outcome, decision.reviewer) == ("expired", admin_user)
    assert decision.note.startswith("Expired by ada-admin at ")
    run = Run.objects.get(thread=request.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"]["approved"] is False
    # A second time, it is no longer pending.
    page = act(client, "interrupt", "expire_requests", [request])
    assert "Refused (1)" in page and "already decided by ada-admin" in page


def test_withdrawing_the_selected_requests_resumes_them_without_an_answer(client, admin_user):
    request = make_interrupt()
    client.force_login(admin_user)

    page = act(client, "interrupt", "withdraw_requests", [request])

    assert "Withdrawn: 1." in page
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.CANCELLED
    run = Run.objects.get(thread=request.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"] is None


def test_staff_without_the_permissions_are_offered_no_action_and_change_nothing(client, roles):
    staff = make_user("viewer", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(codename__in=["view_thread", "view_interrupt"])
    )
    thread = _failed()
    request = make_interrupt()
    client.force_login(staff)

    listing = client.get("/admin/portal/thread/").content.decode()
    assert "retry_threads" not in listing and "cancel_threads" not in listing
    listing = client.get("/admin/portal/interrupt/").content.decode()
    assert "expire_requests" not in listing and "withdraw_requests" not in listing

    act(client, "thread", "retry_threads", [thread])
    act(client, "interrupt", "expire_requests", [request])
    assert not Run.objects.filter(kind__in=[Run.Kind.CONTINUE, Run.Kind.RESUME]).exists()
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.PENDING


def test_a_reviewer_on_staff_may_expire_but_not_retry_or_cancel(client, roles):
    staff = make_user("staff-reviewer", role="reviewer", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(codename__in=["view_thread", "view_interrupt"])
    )
    make_interrupt()
    _failed()
    client.force_login(staff)

    assert "expire_requests" in client.get("/admin/portal/interrupt/").content.decode()
    assert "withdraw_requests" not in client.get("/admin/portal/interrupt/").content.decode()
    assert "retry_threads" not in client.get("/admin/portal/thread/").content.decode()


def test_an_expiry_from_the_admin_is_in_the_audit_trail(client, admin_user):
    from portal.models import AuditEvent

    request = make_interrupt()
    client.force_login(admin_user)
    act(client, "interrupt", "expire_requests", [request])

    event = AuditEvent.objects.get(action="interrupt.expire")
    assert (event.actor_name, event.target_id) == ("ada-admin", request.pk)


def _staff(user):
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(Permission.objects.get(codename="view_interrupt"))
    return user


def _refused_expiry(client, user, request, why: str) -> None:
    client.force_login(user)
    page = act(client, "interrupt", "expire_requests", [request])
    assert "Refused (1)" in page and why in page, page
    assert Interrupt.objects.get(pk=request.pk).status == Interrupt.Status.PENDING
    assert not Decision.objects.filter(interrupt=request).exists()
    assert not Run.objects.filter(kind=Run.Kind.RESUME).exists()


# An expiry declines the request, so whoever may not decide it may not expire it either.


def test_an_admin_who_started_the_thread_cannot_expire_its_request(client, admin_user):
    request = make_interrupt(owner=admin_user)
    _refused_expiry(client, admin_user, request, "separation of duties")


def test_a_reviewer_outside_the_required_group_cannot_expire_the_request(
    client, settings, reviewer
):
    settings.PORTAL_POLICIES = {"refunds:*": {"required_group": "finance"}}
    request = make_interrupt()
    _refused_expiry(client, _staff(reviewer), request, "members of the &#x27;finance&#x27; group")


def test_a_reviewer_cannot_expire_a_request_someone_else_has_claimed(
    client, reviewer, second_reviewer
):
    from portal.reviews.claims import interrupt_claim

    request = make_interrupt()
    interrupt_claim(interrupt=request, user=second_reviewer)
    _refused_expiry(client, _staff(reviewer), request, "ask them to release it, or wait")


def test_a_reviewer_who_voted_cannot_expire_the_request_alone(client, settings, reviewer):
    from portal.reviews.decisions import decision_submit

    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    request = make_interrupt()
    decision_submit(
        interrupt=request,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=request.pk,
    )
    _refused_expiry(client, _staff(reviewer), request, "You already answered this request")


def test_the_admin_lists_votes_read_only(client, admin_user, settings, roles):
    from portal.reviews.decisions import decision_submit

    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    voter = make_user("voter", role="reviewer")
    request = make_interrupt()
    vote = decision_submit(
        interrupt=request, reviewer=voter, value={"approved": True}, resume_interrupt_id=request.pk
    )
    client.force_login(admin_user)

    listing = client.get("/admin/portal/approval/").content.decode()
    assert "voter" in listing and "delete_selected" not in listing
    page = client.get(f"/admin/portal/approval/{vote.pk}/change/").content.decode()
    assert vote.hash in page
    assert client.post(f"/admin/portal/approval/{vote.pk}/delete/").status_code == 403


def test_a_request_whose_id_reads_as_an_admin_escape_opens_from_its_quoted_admin_url(
    client, admin_user, monkeypatch
):
    # The admin reads "_23" in a path as an escaped "#": a request id like this one (from
    # a CI run where a browser test built the path by hand) needs quoting to be found.
    import tests.factories

    real = tests.factories.new_id
    fixed = "int_23606feda76b4633"
    monkeypatch.setattr(tests.factories, "new_id", lambda p: fixed if p == "int" else real(p))
    request = make_tool_approval()
    assert request.pk == fixed
    client.force_login(admin_user)

    raw = client.get(f"/admin/portal/interrupt/{request.pk}/change/")
    assert raw.status_code == 302  # "doesn't exist": the id was read as "int#606f..."
    page = client.get(admin_change_url(request))
    assert page.status_code == 200
    assert 'id="admin-decision"' in page.content.decode()
    assert 'value="accept"' in page.content.decode()
