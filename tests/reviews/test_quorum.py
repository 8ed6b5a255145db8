"""M-of-N approvals: a policy asks several reviewers, each answer is recorded as a vote,
and the one that reaches the count records the decision and resumes the run, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from portal.accounts.tokens import api_token_create
from portal.errors import AlreadyDecided, AlreadyVoted, DecisionForbidden, InvalidDecision
from portal.models import Approval, Decision, ImmutableRecordError, Interrupt, Run, chain, policies
from portal.reviews.claims import interrupt_claim
from portal.reviews.decisions import decision_submit
from tests.factories import make_interrupt, make_tool_approval, make_user

pytestmark = pytest.mark.django_db

APPROVE = {"approved": True}
REJECT = {"approved": False}


@pytest.fixture
def two_of_n(settings):
    settings.PORTAL_POLICIES = {"*:*": {}, "refunds:tool_approval": {"approvals_required": 2}}


@pytest.fixture
def panel(roles):
    return [make_user(f"panel-{n}", role="reviewer") for n in range(4)]


def answer(request: Interrupt, reviewer, value=APPROVE, note: str = ""):
    return decision_submit(
        interrupt=request.pk,
        reviewer=reviewer,
        value=value,
        resume_interrupt_id=request.pk,
        note=note,
    )


def resumes(request: Interrupt) -> int:
    return Run.objects.filter(thread=request.thread, kind=Run.Kind.RESUME).count()


# --- the policy --------------------------------------------------------------------------


def test_a_policy_reads_its_counts_and_defaults_to_one_of_each(settings):
    settings.PORTAL_POLICIES = {
        "*:*": {},
        "transfers:*": {"approvals_required": 3, "rejections_required": 2},
    }
    assert policies.policy_for("transfers", "x").approvals_required == 3
    assert policies.policy_for("transfers", "x").rejections_required == 2
    assert policies.policy_for("transfers", "x").needs_several
    default = policies.policy_for("refunds", "x")
    assert (default.approvals_required, default.rejections_required) == (1, 1)
    assert not default.needs_several


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_count_that_is_not_a_whole_number_of_reviewers_is_refused_naming_it(settings, bad):
    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": bad}}
    with pytest.raises(ValueError) as refused:
        policies.policy_for("refunds", "tool_approval")
    assert "PORTAL_POLICIES['refunds:*']['approvals_required']" in str(refused.value)


# --- votes -------------------------------------------------------------------------------


def test_the_first_approval_is_recorded_and_the_run_waits(two_of_n, panel):
    request = make_interrupt()

    vote = answer(request, panel[0], note="looks right")

    assert isinstance(vote, Approval)
    assert (vote.reviewer, vote.outcome) == (panel[0], "approved")
    assert vote.value == {"approved": True, "note": "looks right"}
    assert vote.note == "looks right" and vote.created_at is not None
    assert vote.needed == "1 more approval"
    request.refresh_from_db()
    assert request.status == Interrupt.Status.PENDING
    assert not Decision.objects.filter(interrupt=request).exists()
    assert resumes(request) == 0


def test_the_approval_that_reaches_the_count_decides_and_resumes_once(two_of_n, panel):
    request = make_interrupt()
    answer(request, panel[0])

    decision = answer(request, panel[1])

    assert isinstance(decision, Decision)
    assert (decision.outcome, decision.reviewer) == ("approved", panel[1])
    request.refresh_from_db()
    assert request.status == Interrupt.Status.RESOLVED
    assert resumes(request) == 1
    assert list(
        Approval.objects.filter(interrupt=request).order_by("id").values_list("reviewer", flat=True)
    ) == [panel[0].pk, panel[1].pk]
    with pytest.raises(AlreadyDecided):
        answer(request, panel[2])
    assert Approval.objects.filter(interrupt=request).count() == 2


def test_the_same_reviewer_cannot_approve_twice(two_of_n, panel):
    request = make_interrupt()
    answer(request, panel[0])

    with pytest.raises(AlreadyVoted) as refused:
        answer(request, panel[0])

    assert "You already answered this request (approved)" in str(refused.value)
    assert "it needs 1 more approval from other reviewers" in str(refused.value)
    assert Approval.objects.filter(interrupt=request).count() == 1
    assert resumes(request) == 0


def test_the_database_refuses_a_second_vote_by_the_same_reviewer(two_of_n, panel):
    from django.db import IntegrityError, transaction

    request = make_interrupt()
    answer(request, panel[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        Approval.objects.create(interrupt=request, reviewer=panel[0], outcome="approved")


def test_separation_of_duties_applies_to_every_approver(two_of_n, panel, roles):
    both = make_user("writer-reviewer", role="reviewer")
    both.groups.add(roles["support"])
    request = make_interrupt(owner=both)
    answer(request, panel[0])

    with pytest.raises(DecisionForbidden) as refused:
        answer(request, both)

    assert "separation of duties" in str(refused.value)
    assert Approval.objects.filter(interrupt=request).count() == 1


def test_a_required_group_applies_to_every_approver(settings, panel, roles):
    from django.contrib.auth.models import Group

    settings.PORTAL_POLICIES = {
        "refunds:*": {"approvals_required": 2, "required_group": "finance"},
    }
    finance = Group.objects.create(name="finance")
    panel[0].groups.add(finance)
    request = make_interrupt()
    answer(request, panel[0])

    with pytest.raises(DecisionForbidden) as refused:
        answer(request, panel[1])

    assert "'finance' group" in str(refused.value)


def test_by_default_any_rejection_rejects(two_of_n, panel):
    request = make_interrupt()
    answer(request, panel[0])

    decision = answer(request, panel[1], REJECT, note="wrong order")

    assert isinstance(decision, Decision)
    assert decision.outcome == "rejected"
    run = Run.objects.get(thread=request.thread, kind=Run.Kind.RESUME)
    assert run.input["resume"] == {"approved": False, "note": "wrong order"}


def test_a_rejection_count_makes_a_rejection_wait_for_more(settings, panel):
    settings.PORTAL_POLICIES = {
        "refunds:*": {"approvals_required": 2, "rejections_required": 2},
    }
    request = make_interrupt()

    first = answer(request, panel[0], REJECT, note="Wrong order.")
    assert isinstance(first, Approval)
    assert first.needed == "2 more approvals or 1 more rejection to decline it"
    assert isinstance(answer(request, panel[1]), Approval)  # 1 yes, 1 no
    decision = answer(request, panel[2], REJECT, note="Wrong amount.")

    assert isinstance(decision, Decision) and decision.outcome == "rejected"
    assert resumes(request) == 1


def test_a_tool_approvals_ignore_and_response_each_count_as_a_no(settings, panel):
    settings.PORTAL_POLICIES = {
        "*:tool_approval": {"approvals_required": 2, "rejections_required": 2},
    }
    request = make_tool_approval()

    first = answer(request, panel[0], {"type": "ignore"}, note="Not a payment we make.")
    decision = answer(request, panel[1], {"type": "response", "args": "Ask for the invoice."})

    assert isinstance(first, Approval) and first.outcome == "ignored"
    assert isinstance(decision, Decision)
    assert (decision.outcome, decision.executed_args) == ("responded", None)
    assert resumes(request) == 1


def test_an_edit_is_refused_when_several_must_approve(settings, panel):
    settings.PORTAL_POLICIES = {"transfers:*": {"approvals_required": 2}}
    request = make_tool_approval()
    call_id = request.value["tool_calls"][0]["id"]
    edited = {"approved": True, "args": {call_id: {"amount": 1.0, "recipient": "Bob"}}}

    with pytest.raises(InvalidDecision) as refused:
        answer(request, panel[0], edited)

    assert "can only be approved as asked or declined" in str(refused.value)
    assert not Approval.objects.exists()


def test_a_later_approval_of_a_different_answer_is_refused(settings, panel):
    settings.PORTAL_POLICIES = {"asker:*": {"approvals_required": 2}}
    schema = {"type": "object", "properties": {"size": {"type": "string"}}}
    request = make_interrupt(agent="asker", schema=schema, reason="input_required")
    answer(request, panel[0], {"size": "large"})

    with pytest.raises(InvalidDecision) as refused:
        answer(request, panel[1], {"size": "small"})

    assert "panel-0 approved a different answer" in str(refused.value)
    assert isinstance(answer(request, panel[1], {"size": "large"}), Decision)


def test_a_vote_releases_the_voters_claim_so_the_next_reviewer_can_answer(two_of_n, panel):
    request = make_interrupt()
    interrupt_claim(interrupt=request, user=panel[0])
    answer(request, panel[0])

    request.refresh_from_db()
    assert request.claimed_by is None
    assert isinstance(answer(request, panel[1]), Decision)


def test_votes_are_never_changed_or_deleted(two_of_n, panel):
    vote = answer(make_interrupt(), panel[0])
    with pytest.raises(ImmutableRecordError):
        vote.save()
    with pytest.raises(ImmutableRecordError):
        Approval.objects.all().delete()
    with pytest.raises(ImmutableRecordError):
        Approval.objects.update(note="x")


# --- the audit chain ---------------------------------------------------------------------


def test_each_vote_is_in_the_approval_hash_chain(two_of_n, panel, capsys):
    first = make_interrupt()
    second = make_interrupt()
    answer(first, panel[0])
    answer(second, panel[0])
    answer(first, panel[1])

    votes = list(Approval.objects.order_by("id"))
    assert votes[0].prev_hash == chain.GENESIS
    assert [v.prev_hash for v in votes[1:]] == [v.hash for v in votes[:-1]]
    fields = {f: getattr(votes[0], f) for f in chain.APPROVAL_FIELDS}
    assert votes[0].hash == chain.approval_hash(
        fields, prev_hash=chain.GENESIS, payload=votes[0].payload_hash
    )
    call_command("verify_audit")
    out = capsys.readouterr().out
    assert "ok: 1 decisions verified" in out
    assert f"ok: 3 approvals verified (head {votes[-1].hash})" in out


def _tamper(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(
                "ALTER TABLE portal_approval DISABLE TRIGGER portal_approval_append_only"
            )
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE portal_approval ENABLE TRIGGER portal_approval_append_only")


def test_verify_audit_finds_an_edited_vote(two_of_n, panel):
    answer(make_interrupt(), panel[0])
    vote = answer(make_interrupt(), panel[1])
    _tamper("UPDATE portal_approval SET outcome = 'rejected' WHERE id = %s", [vote.pk])

    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")

    assert str(failure.value).startswith(f"first broken link: approval {vote.pk}: edited row")
    assert "(1 approvals before it verified)" in str(failure.value)


def test_verify_audit_finds_a_deleted_vote(two_of_n, panel):
    gone = answer(make_interrupt(), panel[0])
    kept = answer(make_interrupt(), panel[1])
    _tamper("DELETE FROM portal_approval WHERE id = %s", [gone.pk])

    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")

    assert f"approval {kept.pk}: deleted row" in str(failure.value)


def test_verify_audit_given_the_approval_head_finds_the_newest_votes_deleted(two_of_n, panel):
    answer(make_interrupt(), panel[0])
    newest = answer(make_interrupt(), panel[1])
    _tamper("DELETE FROM portal_approval WHERE id = %s", [newest.pk])

    with pytest.raises(CommandError) as failure:
        call_command("verify_audit", "--expect-approval-head", newest.hash)

    assert "the approvals after this one, up to that head, were deleted" in str(failure.value)


@pytest.mark.postgres
def test_the_database_refuses_to_change_a_vote(two_of_n, panel):
    from django.db import DatabaseError, transaction

    vote = answer(make_interrupt(), panel[0])
    for statement in (
        "UPDATE portal_approval SET note = 'x' WHERE id = %s",
        "DELETE FROM portal_approval WHERE id = %s",
    ):
        with pytest.raises(DatabaseError) as refused, transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement, [vote.pk])
        assert "portal_approval is append-only" in str(refused.value)


# --- where votes are shown ---------------------------------------------------------------


def test_the_request_page_shows_each_vote_and_refuses_a_second_one(two_of_n, panel):
    request = make_interrupt()
    answer(request, panel[0], note="fine by me")
    client = Client()

    client.force_login(panel[0])
    page = client.get(f"/interrupts/{request.pk}/").content.decode()
    assert "Approvals: 1 of 2" in page
    assert "<strong>panel-0</strong>" in page and "fine by me" in page
    assert "You already answered this request (approved)" in page
    assert 'id="decision-form"' not in page

    client.force_login(panel[1])
    response = client.post(
        f"/interrupts/{request.pk}/decide",
        {"resume_interrupt_id": request.pk, "action": "approve"},
    )
    assert response.status_code == 302
    request.refresh_from_db()
    assert request.status == Interrupt.Status.RESOLVED
    page = client.get(f"/interrupts/{request.pk}/").content.decode()
    assert "Approvals: 2 of 2" in page


def test_a_partial_approval_from_the_page_says_what_the_request_waits_for(two_of_n, panel):
    request = make_interrupt()
    client = Client()
    client.force_login(panel[0])

    response = client.post(
        f"/interrupts/{request.pk}/decide",
        {"resume_interrupt_id": request.pk, "action": "approve"},
        follow=True,
    )

    assert "the request now waits for 1 more approval" in response.content.decode()


def test_the_queue_row_shows_the_count_and_who_approved(two_of_n, panel, reviewer):
    request = make_interrupt()
    answer(request, panel[0])
    client = Client()
    client.force_login(reviewer)

    page = client.get("/queue/").content.decode()

    row = page[page.index(f'id="q-{request.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "1 of 2 approvals" in row
    assert "panel-0 approved" in row


def test_the_queue_row_of_a_one_reviewer_request_says_nothing_of_votes(panel, reviewer):
    make_interrupt()
    client = Client()
    client.force_login(reviewer)
    assert "approvals" not in client.get("/queue/").content.decode()


def test_the_api_shows_the_votes_and_a_vote_answers_with_what_is_still_needed(two_of_n, panel):
    request = make_interrupt()
    _, token = api_token_create(user=panel[0])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client = Client()

    response = client.post(
        f"/api/threads/{request.thread_id}/resume",
        json.dumps({"resume": APPROVE, "resume_interrupt_id": request.pk, "note": "ok"}),
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["decision_id"] is None and body["run_id"] is None
    assert body["approval_id"] == Approval.objects.get().pk
    assert body["waiting_for"] == "1 more approval"

    shown = client.get(f"/api/interrupts/{request.pk}", **auth).json()
    assert (shown["approvals_required"], shown["rejections_required"]) == (2, 1)
    [vote] = shown["approvals"]
    assert (vote["reviewer"], vote["outcome"], vote["note"]) == ("panel-0", "approved", "ok")
    assert vote["created_at"]
    listed = client.get("/api/interrupts?status=pending", **auth).json()["items"]
    assert [v["reviewer"] for v in listed[0]["approvals"]] == ["panel-0"]


def test_a_policy_the_portal_cannot_read_fails_the_system_check(settings):
    from portal.checks import check_policies

    settings.PORTAL_POLICIES = {"*:*": {}, "transfers:*": {"approvals_required": 0}}

    [error] = check_policies()

    assert error.id == "portal.E001"
    assert "PORTAL_POLICIES['transfers:*']['approvals_required']" in error.msg


@pytest.mark.slow
def test_policies_come_from_the_environment_too():
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; "
        "django.setup(); from portal.models.policies import policy_for; "
        "print(policy_for('transfers', 'tool_approval').approvals_required)"
    )
    env = {"PORTAL_POLICIES_EXTRA": '{"transfers:tool_approval": {"approvals_required": 3}}'}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "3"
    env = {"PORTAL_POLICIES_EXTRA": '{"no-colon": {}}'}
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0
    assert 'PORTAL_POLICIES_EXTRA must be a JSON object of "<agent>:<reason>" keys' in bad.stderr


def test_a_vote_is_pushed_to_open_request_pages_from_the_same_partial(
    two_of_n, panel, client, django_capture_on_commit_callbacks, monkeypatch
):
    from portal.notify import broadcast
    from portal.web import live

    request = make_interrupt()
    announced: list[dict] = []
    monkeypatch.setattr(broadcast, "publish_queue_change", lambda **kw: announced.append(kw))
    with django_capture_on_commit_callbacks(execute=True):
        answer(request, panel[0], note="fine by me")
    broadcast.announced()  # from the announcer's thread
    [change] = announced
    assert change["status"] == "pending"
    assert change["news"].startswith("panel-0 approved “Approve a $42.50 refund")
    assert change["news"].endswith("; it needs 1 more approval")

    _queue, page_html = live.render_interrupt_change(request.pk)

    assert 'id="decision-approvals"' in page_html
    assert "hx-swap-oob=" in page_html
    assert "Approvals: 1 of 2" in page_html and "<strong>panel-0</strong>" in page_html
    # Said as what happened, not as a new request or a release.
    news = live.render_interrupt_change(
        request.pk, news="panel-0 approved “x”; it needs 1 more approval"
    )[1]
    assert "panel-0 approved “x”; it needs 1 more approval" in news
    client.force_login(panel[1])
    page = client.get(f"/interrupts/{request.pk}/").content.decode()
    start = page.index('<section id="decision-approvals"')
    assert page[start : page.index("</section>", start)].split(">", 1)[1] in page_html
