"""The decision history page: what it shows, its filters and search, keyset pagination."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.audit import history
from portal.models import Decision, Interrupt
from portal.reviews import threads
from portal.reviews.decisions import decision_submit
from portal.runs.worker import Worker
from tests.factories import make_decision, make_interrupt, make_tool_approval, make_user

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def record(
    interrupt: Interrupt, *, reviewer=None, outcome="approved", value=None, at=None, note=""
):
    """A decision at a chosen time (the filters need dates); the chain is sealed as usual."""
    if value is None and outcome in ("approved", "rejected"):
        value = {"approved": outcome == "approved"}
    # As every path that records a decision does: the request leaves the queue with it.
    interrupt.decided_as(Interrupt.Status.RESOLVED, at or timezone.now())
    fields = {"created_at": at} if at is not None else {}
    return Decision.objects.create(
        interrupt=interrupt,
        thread=interrupt.thread,
        reviewer=reviewer,
        value=value,
        note=note,
        outcome=outcome,
        **fields,
    )


@pytest.fixture
def decisions(reviewer, second_reviewer):
    """Five decisions that differ in every filterable way."""
    refund = make_interrupt(agent="refunds", message="Approve a refund for the broken kettle?")
    transfer = make_tool_approval(
        agent="transfers", name="transfer_funds", args={"amount": 9000.0, "recipient": "Mallory"}
    )
    account = make_tool_approval(
        agent="accounts", name="delete_account", args={"account_id": "acct-77"}
    )
    question = make_interrupt(
        agent="contact",
        reason="input_required",
        message="Which address should we use?",
        value={"question": "address"},
        tool="draft_contact_message",
    )
    breakpoint_ = make_interrupt(
        agent="refunds", reason="breakpoint", message="Continue after MAIN?", value=None, tool=""
    )
    return {
        "refund": record(refund, reviewer=reviewer, at=T0),
        "transfer": record(
            transfer, reviewer=second_reviewer, outcome="rejected", at=T0 + timedelta(days=1)
        ),
        "account": record(
            account,
            reviewer=reviewer,
            outcome="edited",
            value={"approved": True, "args": {}},
            at=T0 + timedelta(days=2),
        ),
        "question": record(question, reviewer=None, outcome="expired", at=T0 + timedelta(days=3)),
        "breakpoint": record(
            breakpoint_, reviewer=None, outcome="cancelled", at=T0 + timedelta(days=4)
        ),
    }


def everyone():
    """An auditor: sees every thread's decisions."""
    from django.contrib.auth import get_user_model

    found = get_user_model().objects.filter(username="history-auditor").first()
    return found or make_user("history-auditor", role="auditor")


def ids(criteria: dict) -> set[int]:
    return {row["decision_id"] for row in history.page(criteria, viewer=everyone()).rows}


def test_the_page_shows_each_decision_with_everything_an_auditor_needs(client, auditor, decisions):
    client.force_login(auditor)
    response = client.get(reverse("history"))
    assert response.status_code == 200
    html = response.content.decode()
    transfer = decisions["transfer"]
    assert f"#{transfer.pk}" in html
    assert "transfers" in html and "Tool approval" in html and "Transfer funds" in html
    assert "Approve transfer funds (" in html  # the message
    assert "Mallory" in html  # the payload as the reviewer saw it
    assert "&quot;approved&quot;: false" in html  # the submitted value
    assert "rejected" in html and "rob-reviewer" in html  # outcome, who decided
    assert "system" in html  # expiries and cancellations have no person
    assert transfer.created_at.strftime("%Y-%m-%d %H:%M:%S") in html
    row = next(r for r in response.context["page"].rows if r["decision_id"] == transfer.pk)
    waited = (transfer.created_at - transfer.interrupt.created_at).total_seconds()
    assert row["time_to_decision_seconds"] == pytest.approx(waited, abs=0.001)
    assert [r["decision_id"] for r in response.context["page"].rows] == [
        decisions[k].pk for k in ("breakpoint", "question", "account", "transfer", "refund")
    ]


@pytest.mark.parametrize(
    ("criteria", "expected"),
    [
        ({"agent": "refunds"}, {"refund", "breakpoint"}),
        ({"reviewer": "rita-reviewer"}, {"refund", "account"}),
        ({"reviewer": "system"}, {"question", "breakpoint"}),
        ({"outcome": "edited"}, {"account"}),
        ({"reason": "breakpoint"}, {"breakpoint"}),
        ({"reason": "tool_approval"}, {"refund", "transfer", "account"}),
        ({"tool": "transfer_funds"}, {"transfer"}),
        ({"tool": "delete_account"}, {"account"}),
        ({"tool": "issue_refund"}, {"refund"}),  # raised inside the tool
        ({"tool": "draft_contact_message"}, {"question"}),
        ({"tool": "TOOL"}, {"refund", "transfer", "account", "question", "breakpoint"}),
        ({"tool": "no_such_tool"}, set()),
        ({"q": "kettle"}, {"refund"}),  # in the message
        ({"q": "Mallory"}, {"transfer"}),  # in the payload
        ({"q": "acct"}, {"account"}),
        ({"agent": "refunds", "reason": "breakpoint"}, {"breakpoint"}),
    ],
)
def test_each_filter_keeps_exactly_the_matching_decisions(decisions, criteria, expected):
    assert ids(criteria) == {decisions[k].pk for k in expected}


@pytest.mark.usefixtures("test_agents")
def test_the_tool_filter_finds_a_request_the_runtime_raised_inside_a_tool(
    support_agent, reviewer, effects
):
    thread, _ = threads.thread_start(
        agent="approve",
        input={"messages": [{"role": "user", "content": "pay 42"}]},
        user=support_agent,
    )
    assert Worker(name="test-worker").run_forever(once=True) == 1
    request = Interrupt.objects.get(thread=thread)
    assert (request.node, request.tool) == ("TOOL", "pay")
    decision = decision_submit(
        interrupt=request,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=request.pk,
    )
    assert ids({"tool": "pay"}) == {decision.pk}
    assert history.page({"tool": "pay"}, viewer=everyone()).rows[0]["tools"] == ["pay"]
    assert ids({"tool": "refund"}) == set()


def test_the_date_range_includes_both_end_days(decisions):
    day = T0.date()
    criteria = {"date_from": day + timedelta(days=1), "date_to": day + timedelta(days=3)}
    assert ids(criteria) == {decisions[k].pk for k in ("transfer", "account", "question")}


def test_filters_arrive_from_the_query_string_and_bad_ones_are_reported(client, auditor, decisions):
    client.force_login(auditor)
    response = client.get(reverse("history"), {"outcome": "rejected", "agent": "transfers"})
    assert [r["decision_id"] for r in response.context["page"].rows] == [decisions["transfer"].pk]
    response = client.get(reverse("history"), {"outcome": "maybe", "date_from": "yesterday"})
    assert response.status_code == 200
    assert response.context["form"].errors.keys() == {"outcome", "date_from"}
    assert len(response.context["page"].rows) == 5  # invalid filters are dropped, not guessed


def test_search_on_sqlite_and_postgres_finds_words_in_the_tool_arguments(decisions):
    # The payload's JSON is searched too: the recipient is only in tool_calls[0].arguments.
    assert ids({"q": "Mallory"}) == {decisions["transfer"].pk}


def _copies(decision, n: int = 2000) -> None:
    """``n`` copies of ``decision``'s request, each with its own word for a message, then
    ANALYZE (rolled back with the test, but for the statistics)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message,"
            " reason, response_schema, tool_call_id, status, created_at, expires_at,"
            " claimed_by_id, claimed_at, resolved_at, decided, checkpoint_seq)"
            " SELECT 'copy-' || n, thread_id, agent, key, node, value, 'word' || n, reason,"
            " response_schema, tool_call_id, status, created_at, expires_at, claimed_by_id,"
            " claimed_at, resolved_at, decided, checkpoint_seq"
            " FROM portal_interrupt, generate_series(1, %s) AS n WHERE id = %s",
            [n, decision.interrupt_id],
        )
        cursor.execute("ANALYZE portal_interrupt")


@pytest.mark.postgres
def test_postgres_search_uses_the_full_text_index(fresh_tables, decisions):
    """On a table of some size (2,000 decided requests, analysed), a word that one request
    has is found through the full-text index. The index holds decided requests only, so
    this also shows the search says so (the planner must prove the index's WHERE)."""
    _copies(decisions["refund"])
    plan = _plan(history.filtered({"q": "kettle"}, everyone()).values("id"))
    assert "portal_interrupt_fulltext" in plan, plan
    assert ids({"q": "kettle"}) == {decisions["refund"].pk}


@pytest.mark.postgres
def test_postgres_estimates_how_many_requests_a_search_matches(fresh_tables, decisions):
    """The planner knows how common a word is (statistics on the search's document,
    migration 0012; a partial index's own are not used), rather than guessing 0.5% of
    the table: a word in every copy is estimated at about every copy, a word in none
    at about none. A wrong guess makes the planner pick bad plans for combined filters."""
    from django.db import connection

    _copies(decisions["refund"])
    document = (
        "to_tsvector('simple'::regconfig, COALESCE(message, '') || ' ' || "
        "COALESCE(value::text, ''))"
    )

    def estimate(word: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                f"EXPLAIN (FORMAT JSON) SELECT id FROM portal_interrupt WHERE decided AND "
                f"{document} @@ websearch_to_tsquery('simple'::regconfig, %s)",
                [word],
            )
            return cursor.fetchone()[0][0]["Plan"]["Plan Rows"]

    assert estimate("amount") > 1500  # in every copy's payload
    assert estimate("zebra") < 5


def _plan(qs) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = qs.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres
def test_postgres_search_indexes_hold_only_requests_that_left_the_queue(db):
    """A pause does not pay for indexes that only decided (or claimed) requests are looked
    up by."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'portal_interrupt'"
        )
        defs = dict(cursor.fetchall())
    for name in ("portal_interrupt_fulltext", "portal_interrupt_summary"):
        assert defs[name].endswith("WHERE decided"), defs[name]
    assert defs["interrupt_history"].endswith("WHERE (resolved_at IS NOT NULL)")
    assert defs["interrupt_claimed"].endswith("WHERE (claimed_by_id IS NOT NULL)")
    assert not [d for d in defs.values() if "pattern_ops" in d]
    assert "portal_interrupt_value_path" not in defs  # no query could use it (0010)
    assert not [d for d in defs.values() if d.endswith("(claimed_by_id)")]  # the full one


def _walk(criteria: dict, size: int) -> list[list[int]]:
    pages, cursor = [], None
    while True:
        page = history.page(criteria, cursor, viewer=everyone(), size=size)
        pages.append([r["decision_id"] for r in page.rows])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_keyset_pages_cover_every_decision_once_newest_first_even_with_equal_times(reviewer):
    # Seven decisions, four of them in the same microsecond: the id breaks the tie.
    made = [
        record(make_interrupt(), reviewer=reviewer, at=T0 + timedelta(minutes=m))
        for m in (0, 5, 5, 5, 5, 9, 12)
    ]
    pages = _walk({}, size=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    flat = [pk for page in pages for pk in page]
    newest_first = sorted(made, key=lambda d: (d.created_at, d.pk), reverse=True)
    assert flat == [d.pk for d in newest_first]


def test_keyset_pages_respect_the_filters(decisions):
    pages = _walk({"reviewer": "system"}, size=1)
    assert pages == [[decisions["breakpoint"].pk], [decisions["question"].pk]]


def test_the_next_page_link_carries_the_filters_and_the_cursor(
    client, auditor, decisions, monkeypatch
):
    monkeypatch.setattr(history, "PAGE_SIZE", 2)
    client.force_login(auditor)
    first = client.get(reverse("history"), {"reason": "tool_approval"})
    assert [r["decision_id"] for r in first.context["page"].rows] == [
        decisions["account"].pk,
        decisions["transfer"].pk,
    ]
    next_qs = first.context["next_qs"]
    assert "reason=tool_approval" in next_qs and "after=" in next_qs
    second = client.get(reverse("history") + "?" + next_qs)
    assert [r["decision_id"] for r in second.context["page"].rows] == [decisions["refund"].pk]
    assert second.context["page"].next_cursor is None
    assert 'rel="next"' not in second.content.decode()


def test_a_damaged_page_link_shows_the_first_page_with_a_message(client, auditor, decisions):
    client.force_login(auditor)
    response = client.get(reverse("history"), {"after": "not-a-cursor!"})
    assert response.status_code == 200
    assert "damaged" in response.content.decode()
    assert len(response.context["page"].rows) == 5


def test_a_page_costs_the_same_queries_at_five_rows_and_at_fifty_and_deep_in_the_list(
    client, auditor, reviewer, django_assert_num_queries
):
    client.force_login(auditor)
    for _ in range(5):
        record(make_interrupt(), reviewer=reviewer)
    response = client.get(reverse("history"))  # warm the session and permission caches
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as small:
        client.get(reverse("history"))
    for _ in range(50):
        record(make_interrupt(), reviewer=reviewer)
    with CaptureQueriesContext(connection) as large:
        response = client.get(reverse("history"))
    assert len(response.context["page"].rows) == history.PAGE_SIZE
    with CaptureQueriesContext(connection) as deep:
        client.get(reverse("history") + "?" + response.context["next_qs"])
    assert len(small) == len(large) == len(deep)
    assert len(large) <= 8


def test_htmx_requests_get_only_the_results_region(client, auditor, decisions):
    client.force_login(auditor)
    response = client.get(reverse("history"), {"agent": "refunds"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="history-results"')
    assert "<html" not in html


def test_the_results_region_links_to_exports_of_the_same_filters(client, auditor, decisions):
    client.force_login(auditor)
    html = client.get(reverse("history"), {"agent": "refunds"}).content.decode()
    assert reverse("history_export_csv") + "?agent=refunds" in html
    assert reverse("history_export_jsonl") + "?agent=refunds" in html


def test_the_list_and_the_exports_show_only_decisions_on_threads_the_user_may_see(
    client, support_agent, other_support_agent, reviewer
):
    # Capabilities can be granted one at a time: history without every thread shows the
    # decisions on one's own threads, as each decision's own page does.
    from django.contrib.auth.models import Permission

    mine = make_decision(interrupt=make_interrupt(owner=support_agent), reviewer=reviewer)
    theirs = make_decision(
        interrupt=make_interrupt(owner=other_support_agent, message="SECRET other customer"),
        reviewer=reviewer,
    )
    support_agent.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_history", "export_history"])
    )
    client.force_login(support_agent)
    assert client.get(reverse("decision_detail", args=[theirs.pk])).status_code == 404

    listed = [r["decision_id"] for r in client.get(reverse("history")).context["page"].rows]
    body = b"".join(client.get(reverse("history_export_csv")).streaming_content).decode()
    exported = [row[0] for row in csv.reader(io.StringIO(body))][1:]
    lines = b"".join(client.get(reverse("history_export_jsonl")).streaming_content).decode()

    assert listed == [mine.pk]
    assert exported == [str(mine.pk)]
    assert "SECRET" not in body and "SECRET" not in lines
    assert [json.loads(line)["decision_id"] for line in lines.splitlines()] == [mine.pk]
    from tests.api.test_api import api_for

    found = api_for(client, support_agent).get("/api/decisions").json()["items"]
    assert [item["decision_id"] for item in found] == [mine.pk]
    # An auditor still sees both.
    client.force_login(make_user("ann-auditor", role="auditor"))
    listed = [r["decision_id"] for r in client.get(reverse("history")).context["page"].rows]
    assert sorted(listed) == sorted([mine.pk, theirs.pk])
