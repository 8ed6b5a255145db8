"""The JSON API's lists (threads, decisions) and its actions on a request (claim, release,
withdraw): filters, keyset cursors, page caps, scopes and refusals."""

from __future__ import annotations

import re

import pytest

from portal.accounts.tokens import api_token_create
from portal.api.pages import API_PAGE_MAX
from portal.models import Decision, Interrupt, Run, Thread
from tests.api.test_api import Api, api_for
from tests.factories import make_decision, make_interrupt, make_thread, make_user

pytestmark = pytest.mark.django_db


def token_with(client, user, *scopes: str) -> Api:
    return Api(client, api_token_create(user=user, scopes=scopes)[1])


# --- GET /api/threads --------------------------------------------------------------------


def walk(api: Api, url: str, **params) -> tuple[list[dict], int]:
    """Every item of a list, following ``next``; and how many pages it took."""
    items, pages, after = [], 0, None
    while True:
        query = {**params, **({"after": after} if after else {})}
        response = api.get(url, **query)
        assert response.status_code == 200, response.content
        body = response.json()
        items += body["items"]
        pages += 1
        after = body["next"]
        if after is None:
            return items, pages


def test_the_thread_list_walks_every_visible_thread_once_by_cursor(client, reviewer):
    made = [make_thread(owner=make_user(role="support")) for _ in range(7)]

    items, pages = walk(api_for(client, reviewer), "/api/threads", limit=3)

    assert pages == 3
    assert sorted(i["id"] for i in items) == sorted(str(t.pk) for t in made)
    # A cursor goes into a query string as it is.
    first = api_for(client, reviewer).get("/api/threads", limit=3).json()["next"]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", first), first
    stamps = [i["updated_at"] for i in items]
    assert stamps == sorted(stamps, reverse=True)


def test_a_support_agent_lists_only_their_own_threads(client, support_agent, other_support_agent):
    mine = make_thread(owner=support_agent)
    make_thread(owner=other_support_agent)

    body = api_for(client, support_agent).get("/api/threads").json()

    assert [i["id"] for i in body["items"]] == [str(mine.pk)]
    assert body["items"][0]["owner"] == support_agent.username
    assert body["next"] is None


def test_the_thread_list_filters_by_status_agent_and_owner(client, reviewer, support_agent):
    failed = make_thread(owner=support_agent, agent="transfers")
    Thread.objects.filter(pk=failed.pk).update(status=Thread.Status.FAILED)
    make_thread(owner=support_agent, agent="refunds")
    make_thread(owner=make_user(role="support"), agent="transfers")
    api = api_for(client, reviewer)

    def ids(**params):
        return [i["id"] for i in api.get("/api/threads", **params).json()["items"]]

    assert ids(status="failed") == [str(failed.pk)]
    assert len(ids(agent="transfers")) == 2
    assert len(ids(owner=support_agent.username)) == 2
    assert ids(agent="transfers", owner=support_agent.username) == [str(failed.pk)]


def test_a_thread_page_larger_than_the_cap_is_refused_naming_the_maximum(client, reviewer):
    response = api_for(client, reviewer).get("/api/threads", limit=API_PAGE_MAX + 1)

    assert response.status_code == 422
    assert response.json()["errors"] == [
        f"$.limit: Input should be less than or equal to {API_PAGE_MAX}"
    ]


# The second is a well-formed cursor with an integer id (a decision's), not a thread's.
@pytest.mark.parametrize("after", ["garbage", "MjAyNi0wMS0wMVQwMDowMDowMCswMDowMH4x"])
def test_a_damaged_thread_cursor_is_refused_clearly(client, reviewer, after):
    response = api_for(client, reviewer).get("/api/threads", after=after)

    assert response.status_code == 422
    assert response.json()["errors"] == ["$.after: not a cursor this API returned"]


def test_an_unknown_thread_status_is_refused(client, reviewer):
    response = api_for(client, reviewer).get("/api/threads", status="paused")

    assert response.status_code == 422
    assert response.json()["errors"][0].startswith("$.status:")


# --- GET /api/decisions ------------------------------------------------------------------


def test_the_decision_list_walks_the_history_by_cursor_newest_first(client, reviewer, auditor):
    made = [make_decision(interrupt=make_interrupt(), reviewer=reviewer) for _ in range(5)]

    items, pages = walk(api_for(client, auditor), "/api/decisions", limit=2)

    assert pages == 3
    assert [i["decision_id"] for i in items] == [d.pk for d in reversed(made)]
    assert items[0]["decided_by"] == reviewer.username
    assert items[0]["outcome"] == "approved"


def test_the_decision_list_takes_the_history_pages_filters(client, reviewer, second_reviewer):
    make_decision(interrupt=make_interrupt(agent="refunds"), reviewer=reviewer)
    theirs = make_decision(interrupt=make_interrupt(agent="transfers"), reviewer=second_reviewer)
    rejected = make_decision(
        interrupt=make_interrupt(agent="transfers"), reviewer=reviewer, value={"approved": False}
    )
    api = api_for(client, reviewer)

    def ids(**params):
        response = api.get("/api/decisions", **params)
        assert response.status_code == 200, response.content
        return [i["decision_id"] for i in response.json()["items"]]

    assert ids(agent="transfers") == [rejected.pk, theirs.pk]
    assert ids(reviewer=second_reviewer.username) == [theirs.pk]
    assert ids(outcome="rejected") == [rejected.pk]
    assert ids(agent="transfers", reviewer=reviewer.username) == [rejected.pk]


def test_bad_history_filters_are_refused_one_line_each(client, reviewer):
    response = api_for(client, reviewer).get(
        "/api/decisions", date_from="yesterday", outcome="maybe"
    )

    assert response.status_code == 422
    errors = response.json()["errors"]
    assert any(e.startswith("$.date_from:") for e in errors)
    assert any(e.startswith("$.outcome:") for e in errors)


def test_a_decision_page_larger_than_the_cap_is_refused(client, reviewer):
    response = api_for(client, reviewer).get("/api/decisions", limit=API_PAGE_MAX + 1)

    assert response.status_code == 422
    assert response.json()["errors"][0].startswith("$.limit:")


def test_the_decision_list_needs_the_history_permission(client, support_agent):
    response = api_for(client, support_agent).get("/api/decisions")

    assert response.status_code == 403
    assert "decision history" in response.json()["detail"]


# --- claim and release --------------------------------------------------------------------


def test_a_reviewer_claims_and_releases_a_request(client, reviewer):
    interrupt = make_interrupt()
    api = api_for(client, reviewer)

    claimed = api.post(f"/api/interrupts/{interrupt.pk}/claim")
    assert claimed.status_code == 200, claimed.content
    assert claimed.json()["claimed_by"] == reviewer.username
    interrupt.refresh_from_db()
    assert interrupt.claimed_by == reviewer

    released = api.post(f"/api/interrupts/{interrupt.pk}/release")
    assert released.status_code == 200
    assert released.json()["claimed_by"] is None
    interrupt.refresh_from_db()
    assert interrupt.claimed_by is None


def test_a_request_claimed_by_someone_else_is_refused_with_409_naming_them(
    client, reviewer, second_reviewer
):
    interrupt = make_interrupt()
    api_for(client, second_reviewer).post(f"/api/interrupts/{interrupt.pk}/claim")

    response = api_for(client, reviewer).post(f"/api/interrupts/{interrupt.pk}/claim")

    assert response.status_code == 409
    assert second_reviewer.username in response.json()["detail"]


def test_releasing_someone_elses_claim_is_refused(client, reviewer, second_reviewer):
    interrupt = make_interrupt()
    api_for(client, second_reviewer).post(f"/api/interrupts/{interrupt.pk}/claim")

    response = api_for(client, reviewer).post(f"/api/interrupts/{interrupt.pk}/release")

    assert response.status_code == 403
    assert second_reviewer.username in response.json()["detail"]
    interrupt.refresh_from_db()
    assert interrupt.claimed_by == second_reviewer


def test_claiming_needs_the_decide_scope(client, reviewer):
    interrupt = make_interrupt()

    response = token_with(client, reviewer, "read").post(f"/api/interrupts/{interrupt.pk}/claim")

    assert response.status_code == 403
    assert "'decide' scope" in response.json()["detail"]
    interrupt.refresh_from_db()
    assert interrupt.claimed_by is None


def test_claiming_a_decided_request_is_refused_with_409(client, reviewer, second_reviewer):
    interrupt = make_interrupt()
    make_decision(interrupt=interrupt, reviewer=second_reviewer)

    response = api_for(client, reviewer).post(f"/api/interrupts/{interrupt.pk}/claim")

    assert response.status_code == 409


# --- withdraw ------------------------------------------------------------------------------


def test_the_owner_withdraws_their_pending_request(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = api_for(client, support_agent).post(f"/api/interrupts/{interrupt.pk}/withdraw")

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "cancelled" and body["thread_id"] == str(interrupt.thread_id)
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.CANCELLED
    decision = Decision.objects.get(interrupt=interrupt)
    assert decision.reviewer == support_agent and decision.outcome == "cancelled"
    assert Run.objects.get(pk=body["run_id"]).kind == Run.Kind.RESUME


def test_only_the_owner_may_withdraw(client, support_agent, admin_user):
    interrupt = make_interrupt(owner=support_agent)

    response = api_for(client, admin_user).post(f"/api/interrupts/{interrupt.pk}/withdraw")

    assert response.status_code == 403
    assert "started this thread" in response.json()["detail"]
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


def test_withdrawing_twice_is_refused_with_409(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)
    api = api_for(client, support_agent)
    api.post(f"/api/interrupts/{interrupt.pk}/withdraw")

    response = api.post(f"/api/interrupts/{interrupt.pk}/withdraw")

    assert response.status_code == 409
    assert "already cancelled" in response.json()["detail"]


def test_withdrawing_needs_the_start_scope(client, support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = token_with(client, support_agent, "read", "decide").post(
        f"/api/interrupts/{interrupt.pk}/withdraw"
    )

    assert response.status_code == 403
    assert "'start' scope" in response.json()["detail"]


def test_a_stranger_cannot_see_a_request_to_withdraw_it(client, support_agent, other_support_agent):
    interrupt = make_interrupt(owner=support_agent)

    response = api_for(client, other_support_agent).post(f"/api/interrupts/{interrupt.pk}/withdraw")

    assert response.status_code == 404
    assert interrupt.pk in response.json()["detail"]


def test_an_answer_to_a_request_in_a_thread_the_decider_cannot_see_is_a_404_and_records_nothing(
    client, support_agent, other_support_agent
):
    from django.contrib.auth.models import Permission

    # May decide, but sees only their own threads.
    other_support_agent.user_permissions.add(Permission.objects.get(codename="decide_interrupt"))
    interrupt = make_interrupt(owner=support_agent)
    api = token_with(client, other_support_agent, "read", "decide")

    body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
    response = api.post(f"/api/threads/{interrupt.thread_id}/resume", body)

    assert response.status_code == 404, response.content
    assert str(interrupt.thread_id) in response.json()["detail"]
    assert not Decision.objects.exists()
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING


# --- the audit trail ------------------------------------------------------------------------


def test_claims_releases_and_withdrawals_over_the_api_are_in_the_audit_trail(
    client, reviewer, support_agent
):
    from portal.models import AuditEvent

    claimed = make_interrupt(owner=support_agent)
    withdrawn = make_interrupt(owner=support_agent)
    reviewing = api_for(client, reviewer)
    reviewing.post(f"/api/interrupts/{claimed.pk}/claim")
    reviewing.post(f"/api/interrupts/{claimed.pk}/release")
    api_for(client, support_agent).post(f"/api/interrupts/{withdrawn.pk}/withdraw")

    trail = list(
        AuditEvent.objects.filter(target_id__in=[claimed.pk, withdrawn.pk])
        .order_by("id")
        .values_list("action", "actor_name", "target_id")
    )
    assert trail == [
        (AuditEvent.Action.CLAIM, reviewer.username, claimed.pk),
        (AuditEvent.Action.RELEASE, reviewer.username, claimed.pk),
        (AuditEvent.Action.WITHDRAW, support_agent.username, withdrawn.pk),
    ]


# --- refusals no endpoint makes itself ------------------------------------------------------


def test_a_wrong_method_on_an_api_route_is_refused_as_json_naming_the_allowed_ones(
    client, reviewer
):
    response = api_for(client, reviewer).client.delete("/api/decisions")

    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json() == {
        "detail": "DELETE is not allowed on /api/decisions; it takes GET.",
        "errors": [],
    }


def test_an_unknown_api_path_is_refused_as_json(client, reviewer):
    response = api_for(client, reviewer).get("/api/nothing-here")

    assert response.status_code == 404
    assert "/api/docs" in response.json()["detail"]


def test_a_page_that_is_not_found_outside_the_api_stays_a_page(client, reviewer):
    client.force_login(reviewer)

    response = client.get("/nothing-here/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
