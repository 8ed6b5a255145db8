"""The history's search and dropdowns: the words a page shows find what it shows, and the
customer's own words find their conversation's decisions, on both stores."""

from __future__ import annotations

import pytest

from portal.audit import history
from tests.audit.test_history import everyone, ids, record
from tests.factories import make_interrupt, make_tool_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def said(reviewer):
    """Two decisions whose requests are alike; only their customers' words differ."""
    kettle = make_interrupt(text="My kettle arrived BROKEN, please refund it.")
    toaster = make_interrupt(text="The toaster never came.")
    return {
        "kettle": record(kettle, reviewer=reviewer),
        "toaster": record(toaster, reviewer=reviewer),
    }


def test_the_search_finds_the_customers_own_words_whatever_their_case(said):
    assert ids({"q": "broken"}) == {said["kettle"].pk}
    assert ids({"q": "Toaster"}) == {said["toaster"].pk}


def test_the_search_reads_only_what_the_customer_wrote_not_the_agents_replies(said):
    # Both conversations hold the agent's "I'll ask for approval of that refund.".
    assert ids({"q": "approval"}) == set()


def test_the_search_ignores_case_in_the_message_and_the_payload(said):
    assert ids({"q": "APPROVE"}) == {said["kettle"].pk, said["toaster"].pk}
    assert ids({"q": "a-1001"}) == {said["kettle"].pk, said["toaster"].pk}


def test_a_search_with_like_wildcards_matches_them_as_text(said):
    assert ids({"q": "%"}) == set()
    assert ids({"q": "kett%le"}) == set()  # as a LIKE pattern, it would match "kettle"


def test_the_dropdowns_offer_the_agents_reasons_and_tools_of_decided_requests(reviewer):
    record(make_tool_approval(agent="payroll", name="pay_bonus", args={"amount": 5}))
    record(make_interrupt(agent="refunds", reason="stock_check", tool="check_stock"))
    choices = history.filter_choices()
    assert {"payroll", "refunds"} <= set(choices["agents"])
    assert {"stock_check", "tool_approval", "breakpoint"} <= set(choices["reasons"])
    assert {"pay_bonus", "check_stock"} <= set(choices["tools"])


def test_a_filter_in_a_link_stays_among_the_choices_though_nothing_matches_it(db):
    choices = history.filter_choices({"agent": "gone", "tool": "old_tool", "reason": "rare"})
    assert "gone" in choices["agents"]
    assert "old_tool" in choices["tools"] and "rare" in choices["reasons"]


def test_the_history_page_offers_dropdowns_in_words_that_send_the_codes(client, auditor, said):
    client.force_login(auditor)
    html = client.get("/history/").content.decode()
    assert '<option value="tool_approval">Tool approval</option>' in html
    assert '<option value="issue_refund">Issue refund</option>' in html
    assert '<option value="refunds">Refunds</option>' in html
    assert '<option value="edited">Approved with edited arguments</option>' in html
    assert ">Edited<" not in html and ">Responded<" not in html


@pytest.mark.postgres
def test_postgres_searches_the_customers_words_through_their_index(fresh_tables, said):
    """The customer's words are found through the partial GIN index of migration 0031
    (the planner uses it only if the query's expression and WHERE equal the index's)."""
    from tests.audit.test_history import _plan

    plan = _plan(history.filtered({"q": "broken"}, everyone()).values("id"))
    assert "portal_checkpoint_customer_words" in plan, plan
    assert "portal_interrupt_fulltext" in plan, plan
