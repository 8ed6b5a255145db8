"""The metrics page: queue depth, time to decision, outcome rates; aggregated in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.audit import metrics
from portal.models import Interrupt
from tests.audit.test_history import record
from tests.factories import make_interrupt, make_user

pytestmark = pytest.mark.django_db


def _asked(at: datetime, **kwargs) -> Interrupt:
    interrupt = make_interrupt(**kwargs)
    Interrupt.objects.filter(pk=interrupt.pk).update(created_at=at)
    interrupt.refresh_from_db()
    return interrupt


def _decide(interrupt: Interrupt, at: datetime, **kwargs):
    decision = record(interrupt, at=at, **kwargs)
    Interrupt.objects.filter(pk=interrupt.pk).update(resolved_at=at)
    return decision


def test_time_to_decision_is_counted_in_the_right_ranges(reviewer):
    now = timezone.now()
    for minutes in (0.5, 3, 3, 30, 60 * 30):
        asked = now - timedelta(hours=40)
        _decide(_asked(asked), asked + timedelta(minutes=minutes), reviewer=reviewer)
    _decide(_asked(now - timedelta(hours=2)), now, reviewer=None, outcome="expired")  # no person
    start, end = now - timedelta(days=3), now + timedelta(days=1)
    histogram = dict(metrics.wait_histogram(start, end))
    assert histogram == {
        "< 1 min": 1,
        "1–5 min": 2,
        "5–15 min": 0,
        "15–60 min": 1,
        "1–4 h": 0,
        "4–24 h": 0,
        "1–7 days": 1,
        "> 7 days": 0,
    }


def test_outcome_rates_per_agent_add_up_and_show_shares(reviewer):
    now = timezone.now()
    for agent, outcome in [
        ("refunds", "approved"),
        ("refunds", "approved"),
        ("refunds", "rejected"),
        ("transfers", "expired"),
    ]:
        _decide(
            _asked(now - timedelta(minutes=5), agent=agent), now, reviewer=reviewer, outcome=outcome
        )
    rows = {
        r.label: r
        for r in metrics.outcome_rates(now - timedelta(days=1), now + timedelta(days=1), "agent")
    }
    assert rows["refunds"].total == 3
    assert rows["refunds"].counts == {
        "approved": 2,
        "rejected": 1,
        "edited": 0,
        "expired": 0,
        "cancelled": 0,
        "responded": 0,
        "ignored": 0,
    }
    shares = {s["outcome"]: s["percent"] for s in rows["refunds"].segments}
    assert shares == {"approved": 66.7, "rejected": 33.3}
    assert rows["transfers"].counts["expired"] == 1
    assert "others" not in rows


def test_beyond_the_top_reviewers_the_rest_are_summed_as_others():
    now = timezone.now()
    people = [make_user(f"rev{k:02d}", role="reviewer") for k in range(metrics.TOP_N + 3)]
    for k, person in enumerate(people):
        for _ in range(1 if k >= metrics.TOP_N else 2):
            _decide(_asked(now - timedelta(minutes=1)), now, reviewer=person, outcome="rejected")
    rows = metrics.outcome_rates(now - timedelta(days=1), now + timedelta(days=1), "reviewer")
    assert len(rows) == metrics.TOP_N + 1
    assert all(r.total == 2 for r in rows[: metrics.TOP_N])
    assert rows[-1].others and rows[-1].label == "others"
    assert rows[-1].total == 3 and rows[-1].counts["rejected"] == 3


def test_queue_depth_walks_back_from_what_is_pending_now():
    day = timezone.localdate()
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    # Two days ago two requests arrived; yesterday one of them was decided; today one more
    # arrived and is still pending with the other.
    first = _asked(midnight - timedelta(days=2) + timedelta(hours=9))
    _asked(midnight - timedelta(days=2) + timedelta(hours=10))
    _decide(
        first, midnight - timedelta(days=1) + timedelta(hours=11), reviewer=None, outcome="expired"
    )
    _asked(midnight + timedelta(minutes=1))
    depth = metrics.queue_depth(midnight - timedelta(days=3), midnight + timedelta(days=1))
    assert depth["kind"] == "day"
    assert [v for _, v in depth["points"]] == [0, 2, 1, 2]


def test_a_day_whose_requests_were_all_decided_that_day_still_shows_them_waiting(client, auditor):
    day = timezone.localdate() - timedelta(days=1)
    noon = timezone.make_aware(datetime(day.year, day.month, day.day, 12))
    for minutes in (0, 5):
        _decide(_asked(noon + timedelta(minutes=minutes)), noon + timedelta(hours=1))
    start = noon.replace(hour=0) - timedelta(days=4)
    depth = metrics.queue_depth(start, start + timedelta(days=5))
    assert depth["kind"] == "day"
    assert [v for _, v in depth["points"]] == [0, 0, 0, 0, 0]
    assert [v for _, v in depth["waiting"]] == [0, 0, 0, 0, 2]
    client.force_login(auditor)
    html = client.get(reverse("metrics")).content.decode()
    assert "peak 2." in html


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (0, [0, 1]),
        (1, [0, 1]),
        (2, [0, 1, 2]),
        (3, [0, 1, 2, 3]),
        (5, [0, 2, 4, 6]),
        (7, [0, 2, 4, 6, 8]),
        (9, [0, 5, 10]),
        (37, [0, 10, 20, 30, 40]),
        (1234, [0, 500, 1000, 1500]),
    ],
)
def test_the_y_axis_has_whole_number_gridlines_that_reach_the_peak(peak, ticks):
    assert metrics.nice_ticks(peak) == ticks


def test_every_y_axis_label_names_the_count_at_its_gridline():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    points = [(start + timedelta(days=i), v) for i, v in enumerate([0, 3, 1])]
    for chart in (metrics.line_chart(points, "day"), metrics.bar_chart([("a", 3), ("b", 1)])):
        baseline, top_y = chart["baseline"], metrics.PAD_TOP
        top = chart["y_ticks"][-1]["value"]
        for tick in chart["y_ticks"]:
            expected = baseline - (baseline - top_y) * tick["value"] / top
            assert tick["y"] == pytest.approx(expected, abs=0.1)
        assert [t["value"] for t in chart["y_ticks"]] == [0, 1, 2, 3]


def test_the_buckets_stay_few_whatever_the_range():
    start = datetime(2020, 1, 1, tzinfo=UTC)
    kinds = []
    for days in (1, 30, 365, 2000, 7300):
        end = start + timedelta(days=days)
        kind = metrics.bucket_kind(start, end)
        buckets = metrics._bucket_starts(start, end, kind)
        assert 1 <= len(buckets) <= metrics.MAX_BUCKETS
        assert buckets[0] <= start and buckets[-1] < end
        kinds.append(kind)
    assert kinds == ["hour", "day", "week", "month", "year"]


def test_the_page_draws_three_kinds_of_svg_chart(client, auditor, reviewer):
    now = timezone.now()
    _decide(_asked(now - timedelta(minutes=3)), now, reviewer=reviewer)
    client.force_login(auditor)
    html = client.get(reverse("metrics")).content.decode()
    for region in (
        "chart-queue-depth",
        "chart-time-to-decision",
        "chart-rates-agent",
        "chart-rates-reviewer",
    ):
        assert f'id="{region}"' in html
    assert html.count("<svg") >= 4
    assert 'class="bar"' in html and "<polyline" in html and 'class="outcome-approved"' in html
    assert "rita-reviewer" in html


def test_the_page_makes_the_same_number_of_queries_for_few_and_many_decisions(client, auditor):
    client.force_login(auditor)
    now = timezone.now()
    people = [make_user(f"r{k}", role="reviewer") for k in range(12)]
    client.get(reverse("metrics"))  # warm caches
    for person in people[:2]:
        _decide(_asked(now - timedelta(minutes=4)), now, reviewer=person)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("metrics"))
    for person in people:
        for agent in ("refunds", "transfers", "accounts"):
            _decide(
                _asked(now - timedelta(minutes=4), agent=agent),
                now,
                reviewer=person,
                outcome="rejected",
            )
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("metrics"))
    assert response.status_code == 200
    # One more at most: the "others" total, once there are more reviewers than TOP_N.
    assert len(few) <= len(many) <= len(few) + 1


def test_a_range_with_no_data_still_renders(client, auditor):
    client.force_login(auditor)
    response = client.get(reverse("metrics"), {"date_from": "2001-01-01", "date_to": "2001-01-31"})
    assert response.status_code == 200
    assert "No decisions in this range." in response.content.decode()


def test_the_arrivals_index_survives_every_migration_on_either_database():
    """Queue depth counts requests by arrival time through ``portal_interrupt_created``
    (0005, outside the models). SQLite rebuilds a table to add a column, keeping only
    the indexes the models declare, so 0011 had to put it back."""
    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, "portal_interrupt")
    assert indexes["portal_interrupt_created"]["columns"] == ["created_at"]


def test_a_withdrawal_by_its_requester_is_not_counted_as_a_reviewers_decision(
    reviewer, support_agent
):
    now = timezone.now()
    asked = now - timedelta(minutes=10)
    _decide(_asked(asked, owner=support_agent), now, reviewer=reviewer, outcome="rejected")
    # The requester takes their own request back; a reviewer's cancellation still counts.
    _decide(_asked(asked, owner=support_agent), now, reviewer=support_agent, outcome="cancelled")
    _decide(_asked(asked), now, reviewer=reviewer, outcome="cancelled")
    start, end = now - timedelta(days=1), now + timedelta(days=1)

    by_reviewer = {r.label: r for r in metrics.outcome_rates(start, end, "reviewer")}
    by_agent = {r.label: r for r in metrics.outcome_rates(start, end, "agent")}

    assert set(by_reviewer) == {"rita-reviewer"}
    assert by_reviewer["rita-reviewer"].counts["cancelled"] == 1
    assert by_agent["refunds"].total == 2
    assert sum(n for _, n in metrics.wait_histogram(start, end)) == 2
