"""The audit trail in the history: a filtered, paged list and its CSV and JSON Lines
exports, for whoever may audit."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from portal.audit import history
from portal.audit.trail import EVENT_COLUMNS
from portal.models import AuditEvent, audit_record
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db

KEYS = [key for key, _ in EVENT_COLUMNS]
PAGE = reverse("audit_trail")


@pytest.fixture
def trail(reviewer, second_reviewer):
    """Five actions by two people and the system, oldest first."""
    return [
        audit_record(action="interrupt.claim", actor=reviewer, target=("interrupt", "i-1")),
        audit_record(action="interrupt.release", actor=reviewer, target=("interrupt", "i-1")),
        audit_record(action="interrupt.claim", actor=second_reviewer, target=("interrupt", "i-2")),
        audit_record(action="login.failed", detail={"ip": "203.0.113.9", "known_account": False}),
        audit_record(action="api_token.create", target=("apitoken", 3), detail={"name": "=cmd"}),
    ]


def _ids(client, params=None) -> list[int]:
    response = client.get(PAGE, params or {})
    assert response.status_code == 200
    return [row["event_id"] for row in response.context["page"].rows]


def _body(response) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_an_auditor_sees_every_action_newest_first(client, auditor, trail):
    client.force_login(auditor)
    ids = _ids(client)
    # Logging in is an action too: the auditor's own login is the newest.
    assert ids[1:] == [e.pk for e in reversed(trail)]
    page = client.get(PAGE).content.decode()
    assert "203.0.113.9" in page and "rita-reviewer" in page


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"action": "interrupt.claim"}, [2, 0]),
        ({"action": "interrupt."}, [2, 1, 0]),  # a trailing dot: every action on requests
        ({"actor": "rita-reviewer"}, [1, 0]),
        ({"actor": "system"}, [4, 3]),
        ({"target_type": "interrupt", "target_id": "i-1"}, [1, 0]),
        ({"target_id": "3"}, [4]),
    ],
)
def test_the_filters_narrow_the_list(client, auditor, trail, params, expected):
    client.force_login(auditor)
    assert _ids(client, params) == [trail[i].pk for i in expected]


def test_the_day_filters_bound_the_list(client, auditor, trail):
    client.force_login(auditor)
    today = timezone.localdate()
    assert len(_ids(client, {"date_from": today.isoformat()})) == len(trail) + 1
    assert _ids(client, {"date_to": (today - timedelta(days=1)).isoformat()}) == []


def test_a_bad_filter_is_shown_and_the_others_still_apply(client, auditor, trail):
    client.force_login(auditor)
    response = client.get(PAGE, {"date_from": "not-a-day", "actor": "rob-reviewer"})
    assert response.status_code == 200
    assert response.context["form"].errors
    assert [r["event_id"] for r in response.context["page"].rows] == [trail[2].pk]


def test_pages_follow_a_cursor_without_gaps_or_repeats(client, auditor, trail, monkeypatch):
    monkeypatch.setattr(history, "PAGE_SIZE", 2)
    client.force_login(auditor)
    seen: list[int] = []
    params = {"action": "interrupt."}
    while True:
        response = client.get(PAGE, params)
        page = response.context["page"]
        seen += [row["event_id"] for row in page.rows]
        if page.next_cursor is None:
            break
        params = {"action": "interrupt.", "after": page.next_cursor.encode()}
    assert seen == [trail[2].pk, trail[1].pk, trail[0].pk]


def test_actions_on_requests_and_threads_link_to_them(client, auditor, reviewer):
    interrupt = make_interrupt()
    audit_record(action="interrupt.claim", actor=reviewer, target=interrupt)
    audit_record(action="thread.retry", actor=reviewer, target=interrupt.thread)
    client.force_login(auditor)
    page = client.get(PAGE).content.decode()
    assert f'href="{reverse("interrupt_detail", args=[interrupt.pk])}"' in page
    assert f'href="{reverse("thread_detail", args=[interrupt.thread_id])}"' in page


def test_an_htmx_request_gets_only_the_results_region(client, auditor, trail):
    client.force_login(auditor)
    body = client.get(PAGE, HTTP_HX_REQUEST="true").content.decode()
    assert body.lstrip().startswith('<section id="audit-results"')


def test_the_csv_export_has_the_columns_and_the_filtered_rows(client, auditor, trail):
    client.force_login(auditor)
    response = client.get(reverse("audit_trail_export_csv"), {"action": "interrupt."})
    assert response["Content-Disposition"].startswith('attachment; filename="audit-trail-')
    rows = list(csv.reader(io.StringIO(_body(response))))
    assert rows[0] == KEYS
    assert [int(r[0]) for r in rows[1:]] == [trail[2].pk, trail[1].pk, trail[0].pk]
    assert rows[1][KEYS.index("actor")] == "rob-reviewer"
    assert rows[1][KEYS.index("hash")] == trail[2].hash


def test_the_json_lines_export_keeps_values_exactly_and_the_csv_defuses_formulas(
    client, auditor, trail
):
    client.force_login(auditor)
    params = {"action": "api_token.create"}
    (line,) = _body(client.get(reverse("audit_trail_export_jsonl"), params)).splitlines()
    record = json.loads(line)
    assert list(record) == KEYS
    assert record["detail"] == {"name": "=cmd"}
    assert record["actor"] == "system"
    rows = list(
        csv.reader(io.StringIO(_body(client.get(reverse("audit_trail_export_csv"), params))))
    )
    assert json.loads(rows[1][KEYS.index("detail")]) == {"name": "=cmd"}  # JSON text: no formula
    assert all(not cell.startswith("=") for cell in rows[1])


def test_an_export_with_a_bad_filter_exports_nothing_and_says_why(client, auditor, trail):
    client.force_login(auditor)
    response = client.get(reverse("audit_trail_export_csv"), {"date_to": "tomorrow"})
    assert response.status_code == 400
    assert "fix the filters: date_to" in response.content.decode()


def test_a_reviewer_may_browse_the_decisions_but_not_the_audit_trail(client, reviewer, trail):
    client.force_login(reviewer)
    assert client.get(reverse("history")).status_code == 200
    for name in ("audit_trail", "audit_trail_export_csv", "audit_trail_export_jsonl"):
        assert client.get(reverse(name)).status_code == 403


def test_exporting_the_audit_trail_also_needs_the_export_permission(client, auditor, roles, trail):
    roles["auditor"].permissions.remove(
        Permission.objects.get(content_type__app_label="portal", codename="export_history")
    )
    client.force_login(auditor)
    assert client.get(PAGE).status_code == 200
    assert "Export" not in client.get(PAGE).content.decode()
    assert client.get(reverse("audit_trail_export_csv")).status_code == 403


def test_the_nav_links_the_audit_trail_only_for_those_who_may_see_it(client, auditor, reviewer):
    client.force_login(auditor)
    assert f'href="{PAGE}"' in client.get(reverse("history")).content.decode()
    client.force_login(reviewer)
    assert f'href="{PAGE}"' not in client.get(reverse("history")).content.decode()


def test_the_page_reads_one_page_of_rows_in_one_query_whatever_the_trail_length(
    client, auditor, django_assert_max_num_queries
):
    for n in range(120):
        audit_record(action="login", target=("user", n))
    client.force_login(auditor)
    assert AuditEvent.objects.count() > history.PAGE_SIZE
    with django_assert_max_num_queries(8):
        client.get(PAGE)


def test_the_admin_shows_the_trail_read_only(client, admin_user, trail):
    client.force_login(admin_user)
    listing = client.get(reverse("admin:portal_auditevent_changelist"))
    assert listing.status_code == 200
    assert "rob-reviewer" in listing.content.decode()
    detail = client.get(reverse("admin:portal_auditevent_change", args=[trail[3].pk]))
    assert "203.0.113.9" in detail.content.decode()
    delete = reverse("admin:portal_auditevent_delete", args=[trail[3].pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert client.get(reverse("admin:portal_auditevent_add")).status_code == 403
    assert AuditEvent.objects.filter(pk=trail[3].pk).exists()


def test_an_event_about_a_user_names_them_not_their_key(client, auditor, reviewer):
    audit_record(action="api_token.revoke", actor=auditor, target=reviewer)
    client.force_login(auditor)

    html = client.get(PAGE).content.decode()

    assert f"user {reviewer.get_username()}" in html
    assert f"<code>{reviewer.pk}</code>" not in html
