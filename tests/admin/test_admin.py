"""The Django admin: read-only tables, and deciding through decision_submit."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib import admin as django_admin
from django.contrib.admin.utils import quote
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from portal.models import Checkpoint, Decision, Interrupt, Run, Thread
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "amount": {"type": "number", "maximum": 100},
    },
    "required": ["approved", "amount"],
}


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def change_url(interrupt):
    return reverse("admin:portal_interrupt_change", args=[quote(interrupt.pk)])


def decide_url(interrupt):
    return reverse("admin:portal_interrupt_decide", args=[quote(interrupt.pk)])


def test_the_thread_page_shows_checkpoints_interrupts_and_decisions_read_only(
    admin_client, reviewer
):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=reviewer)

    response = admin_client.get(reverse("admin:portal_thread_change", args=[interrupt.thread_id]))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Checkpoints" in html and "Requests" in html and "Decisions" in html
    assert interrupt.pk in html
    inline_formsets = response.context["inline_admin_formsets"]
    assert len(inline_formsets) == 3
    for formset in inline_formsets:
        assert not formset.has_add_permission
        assert not formset.has_change_permission
        assert not formset.has_delete_permission


def test_the_interrupt_list_filters_by_status_agent_and_reason_and_searches(admin_client):
    make_interrupt(agent="refunds", message="Approve a refund for A-1001?")
    make_interrupt(agent="transfers", reason="input_required", message="Which account?")

    page = admin_client.get(reverse("admin:portal_interrupt_changelist"))
    assert [f.title for f in page.context["cl"].filter_specs] == ["status", "agent", "reason"]

    by_agent = admin_client.get(
        reverse("admin:portal_interrupt_changelist"), {"agent": "transfers"}
    )
    assert by_agent.context["cl"].result_count == 1
    by_reason = admin_client.get(
        reverse("admin:portal_interrupt_changelist"), {"reason": "tool_approval"}
    )
    assert by_reason.context["cl"].result_count == 1
    searched = admin_client.get(
        reverse("admin:portal_interrupt_changelist"), {"q": "Which account"}
    )
    assert searched.context["cl"].result_count == 1


def test_the_interrupt_page_shows_payload_and_message_pretty_and_escaped(admin_client):
    interrupt = make_interrupt(
        value={"order": "<script>alert(1)</script>", "amount": 5},
        message="<img src=x onerror=alert(2)>",
    )

    html = admin_client.get(change_url(interrupt)).content.decode()

    assert "<script>alert(1)</script>" not in html
    assert "<img src=x onerror=alert(2)>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert html.count(interrupt.pk) >= 2  # the right object, whatever its id looks like
    assert "{\n  &quot;amount&quot;: 5,\n  &quot;order&quot;" in html  # indented JSON
    assert 'id="admin-decision"' in html
    assert f'action="{decide_url(interrupt)}"' in html


def test_deciding_from_the_admin_records_the_decision_and_queues_the_resume(
    admin_client, admin_user
):
    interrupt = make_interrupt()

    response = admin_client.post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": "no receipt"},
    )

    assert response.status_code == 302
    assert response["Location"] == change_url(interrupt)
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.reviewer == admin_user
    assert decision.value == {"approved": False, "note": "no receipt"}
    assert Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).count() == 1
    page = admin_client.get(change_url(interrupt)).content.decode()
    assert 'id="admin-decision-result"' in page and "Rejected" in page


def test_the_admin_form_shows_schema_errors_next_to_the_field_and_records_nothing(admin_client):
    interrupt = make_interrupt(schema=SCHEMA, reason="input_required")

    response = admin_client.post(
        decide_url(interrupt),
        {"resume_interrupt_id": interrupt.pk, "value.approved": "true", "value.amount": "500"},
    )

    assert response.status_code == 422
    form = response.context["decision_form"]
    assert form.errors["value.amount"] == ["$.amount: 500 is greater than the maximum of 100"]
    assert "$.amount: 500 is greater than the maximum of 100" in response.content.decode()
    assert Decision.objects.count() == 0
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_the_admin_can_edit_tool_arguments(admin_client):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    admin_client.post(
        decide_url(interrupt),
        {
            "resume_interrupt_id": interrupt.pk,
            "action": "edit",
            f"args.{call_id}.amount": "50",
            f"args.{call_id}.recipient": "Bob",
        },
    )

    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.outcome == Decision.Outcome.EDITED
    assert decision.executed_args == {call_id: {"amount": 50.0, "recipient": "Bob"}}


def test_the_admin_is_told_who_decided_first(admin_client, reviewer):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=reviewer)

    response = admin_client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 409
    assert "already decided by rita-reviewer at" in response.content.decode()
    assert Decision.objects.count() == 1


def test_the_decide_url_only_accepts_post(admin_client):
    interrupt = make_interrupt()

    assert admin_client.get(decide_url(interrupt)).status_code == 405


def test_staff_without_admin_rights_cannot_use_the_decide_url(client, reviewer):
    interrupt = make_interrupt()
    client.force_login(reviewer)  # a reviewer, but not staff

    response = client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )

    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
    assert Decision.objects.count() == 0


def test_decisions_cannot_be_added_changed_or_deleted_even_by_a_superuser(
    admin_client, admin_user, reviewer
):
    interrupt = make_interrupt()
    decision = make_decision(interrupt=interrupt, reviewer=reviewer)
    model_admin = django_admin.site._registry[Decision]
    request = RequestFactory().get("/")
    request.user = admin_user

    assert admin_user.is_superuser
    assert model_admin.has_add_permission(request) is False
    assert model_admin.has_change_permission(request, decision) is False
    assert model_admin.has_delete_permission(request, decision) is False
    assert model_admin.get_actions(request) == {}
    assert admin_client.get(reverse("admin:portal_decision_add")).status_code == 403
    delete = reverse("admin:portal_decision_delete", args=[decision.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    change = reverse("admin:portal_decision_change", args=[decision.pk])
    assert admin_client.get(change).status_code == 200  # viewable
    assert admin_client.post(change, {"note": "rewritten"}).status_code == 403
    assert Decision.objects.get(pk=decision.pk).note == decision.note


@pytest.mark.parametrize("model", [Run, Checkpoint, Thread, Interrupt])
def test_runs_checkpoints_threads_and_interrupts_are_read_only(admin_user, model):
    model_admin = django_admin.site._registry[model]
    request = RequestFactory().get("/")
    request.user = admin_user

    assert model_admin.has_add_permission(request) is False
    assert model_admin.has_change_permission(request) is False
    assert model_admin.has_delete_permission(request) is False
    assert model_admin.has_view_permission(request) is True


def test_run_and_checkpoint_pages_render(admin_client):
    interrupt = make_interrupt()
    checkpoint = Checkpoint.objects.filter(thread=interrupt.thread).first()

    assert admin_client.get(reverse("admin:portal_run_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:portal_checkpoint_change", args=[checkpoint.pk]))
    assert page.status_code == 200


@pytest.fixture
def staff_auditor(auditor):
    """An auditor who may open the admin and read its interrupts, and nothing more."""
    from django.contrib.auth.models import Permission

    auditor.is_staff = True
    auditor.save()
    auditor.user_permissions.set(
        Permission.objects.filter(codename__in=["view_interrupt", "view_thread", "view_decision"])
    )
    return auditor


def _cannot_decide_in_the_admin(client, user, interrupt, why: str) -> None:
    """``user`` reads ``interrupt``'s page without a form, and deciding it is a 403 that
    says ``why``, with nothing recorded."""
    client.force_login(user)
    page = client.get(change_url(interrupt))
    assert page.status_code == 200
    assert 'id="decision-form"' not in page.content.decode()

    response = client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )
    assert response.status_code == 403
    assert why in response.content.decode()
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not Decision.objects.filter(interrupt=interrupt).exists()


def test_the_admins_view_permission_does_not_let_staff_decide(client, staff_auditor):
    _cannot_decide_in_the_admin(client, staff_auditor, make_interrupt(), "decide permission")


def test_staff_with_the_decide_permission_decide_through_the_admin(client, staff_auditor):
    from django.contrib.auth.models import Permission

    staff_auditor.user_permissions.add(Permission.objects.get(codename="decide_interrupt"))
    interrupt = make_interrupt()
    client.force_login(staff_auditor)
    response = client.post(
        decide_url(interrupt), {"resume_interrupt_id": interrupt.pk, "action": "approve"}
    )
    assert response.status_code == 302
    assert Decision.objects.get(interrupt=interrupt).reviewer == staff_auditor


def test_staff_who_may_decide_but_not_read_every_thread_cannot_decide_others_in_the_admin(
    client, support_agent
):
    # The dashboard shows such a user only their own threads; the admin shows every row to
    # whoever has its view permission, so deciding there must ask the dashboard's question.
    from django.contrib.auth.models import Permission

    from tests.factories import make_user

    staff = make_user("dee-staff", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(codename__in=["view_interrupt", "decide_interrupt"])
    )
    interrupt = make_interrupt(owner=support_agent)
    _cannot_decide_in_the_admin(client, staff, interrupt, "portal.view_all_threads")


def _listed(admin_client, name: str) -> list:
    response = admin_client.get(reverse(f"admin:portal_{name}_changelist"))
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def test_every_admin_list_shows_the_newest_rows_first(admin_client, reviewer):
    made = [make_interrupt(message=f"request {i}") for i in range(4)]
    # Ids are random: spread the times so that an order by id would show itself.
    base = timezone.now() - timedelta(hours=1)
    for i, interrupt in enumerate(made):
        at = base + timedelta(minutes=i)
        Interrupt.objects.filter(pk=interrupt.pk).update(created_at=at)
        Thread.objects.filter(pk=interrupt.thread_id).update(created_at=at)
        make_decision(interrupt=interrupt, reviewer=reviewer)
    newest_first = [i.pk for i in reversed(made)]
    assert [i.pk for i in _listed(admin_client, "interrupt")] == newest_first
    assert [t.pk for t in _listed(admin_client, "thread")] == [i.thread_id for i in reversed(made)]
    decisions = _listed(admin_client, "decision")
    assert [d.interrupt_id for d in decisions] == newest_first
    runs = list(Run.objects.order_by("created_at").values_list("pk", flat=True))
    for i, pk in enumerate(runs):
        Run.objects.filter(pk=pk).update(created_at=base + timedelta(minutes=i))
    assert len(runs) >= 4
    assert [r.pk for r in _listed(admin_client, "run")] == runs[::-1]
    steps = _listed(admin_client, "checkpoint")
    assert [c.pk for c in steps] == sorted((c.pk for c in steps), reverse=True)


def test_admin_times_name_their_time_zone(admin_client, settings):
    settings.TIME_ZONE = "Europe/Paris"
    interrupt = make_interrupt()
    html = admin_client.get(reverse("admin:portal_interrupt_changelist")).content.decode()
    created = timezone.localtime(interrupt.created_at, ZoneInfo("Europe/Paris"))
    assert created.strftime("%Y-%m-%d %H:%M:%S ") + created.tzname() in html
    page = admin_client.get(change_url(interrupt)).content.decode()
    assert created.strftime("%Y-%m-%d %H:%M:%S ") + created.tzname() in page
