"""The reviewers' queue page: who may see it, what a row shows, filters, sorting, and
keyset pagination whose query count does not grow with the rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.models import Interrupt
from portal.reviews.claims import interrupt_claim
from portal.web.queue import PAGE_SIZE
from tests.factories import make_decision, make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db
URL = "/queue/"


def _ids(response) -> list[str]:
    return [item.pk for item in response.context["page"].items]


def _age(interrupts, *, start_minutes: int = 100) -> None:
    # Distinct, known ages: the first is the oldest.
    base = Interrupt.objects.order_by("created_at").first().created_at
    for n, item in enumerate(interrupts):
        Interrupt.objects.filter(pk=item.pk).update(
            created_at=base - timedelta(minutes=start_minutes - n)
        )


def test_the_queue_url_is_named_queue():
    assert reverse("queue") == URL


def test_a_reviewer_sees_each_pending_request_with_agent_reason_message_age_and_claimant(
    client, reviewer, second_reviewer
):
    item = make_interrupt(agent="refunds", message="Approve a $42.50 refund for order A-1001?")
    interrupt_claim(interrupt=item, user=second_reviewer)
    client.force_login(reviewer)
    response = client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    row = html[html.index(f'id="q-{item.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "Refunds" in row  # the agent, in words
    assert "Tool approval" in row
    assert "Approve a $42.50 refund for order A-1001?" in row
    assert f'datetime="{item.created_at.isoformat()}"' in row  # relative, filled in by JS
    assert "UTC" in row  # and absolute
    assert "rob-reviewer" in row


def test_decided_requests_are_not_in_the_queue(client, reviewer):
    decided = make_interrupt()
    make_decision(interrupt=decided, reviewer=reviewer)
    pending = make_interrupt()
    client.force_login(reviewer)
    assert _ids(client.get(URL)) == [pending.pk]


def test_an_empty_queue_says_so(client, reviewer):
    client.force_login(reviewer)
    assert "Nothing is waiting for a decision" in client.get(URL).content.decode()


def test_an_admin_may_use_the_queue(client, admin_user):
    client.force_login(admin_user)
    assert client.get(URL).status_code == 200


@pytest.mark.parametrize("persona", ["auditor", "support_agent", "outsider"])
def test_roles_that_cannot_decide_get_403(client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    assert client.get(URL).status_code == 403


def test_an_anonymous_user_is_sent_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_queue_refuses_post_with_405(client, reviewer):
    client.force_login(reviewer)
    assert client.post(URL).status_code == 405


def test_filters_by_agent_and_by_reason(client, reviewer):
    refund = make_interrupt(agent="refunds", reason="tool_approval")
    question = make_interrupt(agent="refunds", reason="input_required")
    transfer = make_interrupt(agent="transfers", reason="tool_approval")
    client.force_login(reviewer)
    assert set(_ids(client.get(URL, {"agent": "refunds"}))) == {refund.pk, question.pk}
    assert set(_ids(client.get(URL, {"reason": "tool_approval"}))) == {refund.pk, transfer.pk}
    assert _ids(client.get(URL, {"agent": "refunds", "reason": "tool_approval"})) == [refund.pk]
    assert "Nothing pending matches" in client.get(URL, {"agent": "nope"}).content.decode()


def test_filters_by_tool_and_searches_the_request_and_the_customers_words(client, reviewer):
    refund = make_interrupt(text="The kettle arrived BROKEN.")
    transfer = make_tool_approval(agent="transfers", args={"amount": 5.0, "recipient": "Mallory"})
    client.force_login(reviewer)
    assert _ids(client.get(URL, {"tool": "transfer_funds"})) == [transfer.pk]
    assert _ids(client.get(URL, {"tool": "issue_refund"})) == [refund.pk]
    assert _ids(client.get(URL, {"q": "broken"})) == [refund.pk]  # the customer's words
    assert _ids(client.get(URL, {"q": "mallory"})) == [transfer.pk]  # the payload
    assert _ids(client.get(URL, {"q": "a-1001"})) == [refund.pk]  # the message


def test_the_queue_filters_are_dropdowns_in_words_built_from_the_pending_requests(client, reviewer):
    make_tool_approval(agent="payroll", name="pay_bonus", args={"amount": 5})
    client.force_login(reviewer)
    html = client.get(URL, {"tool": "pay_bonus"}).content.decode()
    assert '<option value="payroll">Payroll</option>' in html
    assert '<option value="pay_bonus" selected>Pay bonus</option>' in html
    assert '<option value="tool_approval">Tool approval</option>' in html
    assert 'data-narrowed="1"' in html  # live rows are not added to a narrowed list


def test_sorts_by_age_oldest_first_by_default_and_newest_first_on_request(client, reviewer):
    items = [make_interrupt() for _ in range(3)]
    _age(items)
    client.force_login(reviewer)
    assert _ids(client.get(URL)) == [i.pk for i in items]
    assert _ids(client.get(URL, {"sort": "newest"})) == [i.pk for i in reversed(items)]
    assert _ids(client.get(URL, {"sort": "bogus"})) == [i.pk for i in items]


@pytest.mark.parametrize("sort", ["oldest", "newest"])
def test_keyset_pages_cover_every_row_once_and_page_back(client, reviewer, sort):
    items = [make_interrupt() for _ in range(PAGE_SIZE + 5)]
    _age(items)
    expected = [i.pk for i in items]
    if sort == "newest":
        expected.reverse()
    client.force_login(reviewer)
    first = client.get(URL, {"sort": sort})
    page = first.context["page"]
    assert _ids(first) == expected[:PAGE_SIZE]
    assert page.next_cursor and page.prev_cursor is None
    second = client.get(URL, {"sort": sort, "after": page.next_cursor})
    assert _ids(second) == expected[PAGE_SIZE:]
    assert second.context["page"].next_cursor is None
    back = client.get(URL, {"sort": sort, "before": second.context["page"].prev_cursor})
    assert _ids(back) == expected[:PAGE_SIZE]
    assert back.context["page"].is_first


def test_a_malformed_cursor_shows_the_first_page(client, reviewer):
    item = make_interrupt()
    client.force_login(reviewer)
    for cursor in ("garbage", "not-a-date~x", "~", "2026-01-01T00:00:00+00:00~"):
        response = client.get(URL, {"after": cursor})
        assert response.status_code == 200
        assert _ids(response) == [item.pk]


def test_the_number_of_queries_does_not_grow_with_the_rows_and_none_uses_offset(
    client, reviewer, second_reviewer
):
    client.force_login(reviewer)
    client.get(URL)  # warm the session and permission caches alike for both runs

    def count() -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(URL).status_code == 200
        return len(ctx.captured_queries), [q["sql"] for q in ctx.captured_queries]

    make_interrupt()
    few, _ = count()
    for _ in range(PAGE_SIZE + 3):
        interrupt_claim(interrupt=make_interrupt(), user=second_reviewer)
    many, sql = count()
    assert many == few
    assert not any("OFFSET" in q.upper() for q in sql)


def test_an_htmx_request_gets_only_the_table_partial(client, reviewer):
    make_interrupt()
    client.force_login(reviewer)
    response = client.get(URL, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-table"')
    assert "<html" not in html


def test_the_page_subscribes_to_the_live_queue(client, reviewer):
    client.force_login(reviewer)
    html = client.get(URL).content.decode()
    assert 'ws-connect="/ws/queue/"' in html
    assert "portal/live.js" in html
