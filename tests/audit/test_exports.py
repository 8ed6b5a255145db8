"""CSV and JSON Lines exports: the page's rows and columns, streamed in constant memory."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from bench.history import export_peak, generate_decisions
from portal.audit import history
from portal.audit.history import COLUMNS
from portal.models import Decision, outcome_name
from portal.reviews.decisions import decision_submit
from portal.reviews.words import decision_words
from tests.audit import test_history
from tests.factories import make_interrupt, make_tool_approval, make_user

decisions = test_history.decisions  # the fixture: five decisions that differ in every way

pytestmark = pytest.mark.django_db

KEYS = [key for key, _ in COLUMNS]


def _body(response) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def _page_rows(client, params):
    return client.get(reverse("history"), params).context["page"].rows


def test_the_csv_export_has_the_pages_columns_and_the_filtered_rows_in_the_same_order(
    client, auditor, decisions
):
    client.force_login(auditor)
    params = {"reason": "tool_approval"}
    response = client.get(reverse("history_export_csv"), params)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="decisions-')
    rows = list(csv.reader(io.StringIO(_body(response))))
    assert rows[0] == KEYS
    page = _page_rows(client, params)
    assert [int(r[0]) for r in rows[1:]] == [p["decision_id"] for p in page]
    assert len(page) == 3
    transfer = dict(
        zip(
            KEYS,
            rows[1 + [p["decision_id"] for p in page].index(decisions["transfer"].pk)],
            strict=True,
        )
    )
    assert transfer["agent"] == "transfers"
    assert transfer["tools"] == "transfer_funds"
    assert transfer["outcome"] == "rejected"
    assert transfer["outcome_words"] == "Rejected"  # the pages' name, beside the code
    assert transfer["decided_by"] == "rob-reviewer"
    assert json.loads(transfer["payload"])["tool_calls"][0]["arguments"]["recipient"] == "Mallory"
    assert json.loads(transfer["value"]) == {"approved": False}
    assert transfer["hash"] == decisions["transfer"].hash
    assert transfer["decided_at"] == decisions["transfer"].created_at.isoformat()


def test_the_json_lines_export_has_the_same_columns_and_values_as_the_page(
    client, auditor, decisions
):
    client.force_login(auditor)
    params = {"reviewer": "system"}
    response = client.get(reverse("history_export_jsonl"), params)
    assert response["Content-Type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in _body(response).splitlines()]
    page = _page_rows(client, params)
    assert [list(r) for r in records] == [KEYS] * len(page)
    for record_, row in zip(records, page, strict=True):
        assert record_["decision_id"] == row["decision_id"]
        assert record_["payload"] == row["payload"]
        assert record_["value"] == row["value"]
        assert record_["decided_by"] == "system"
        assert record_["decided_at"] == row["decided_at"].isoformat()
        assert record_["thread_id"] == str(row["thread_id"])
        assert record_["time_to_decision_seconds"] == row["time_to_decision_seconds"]


def test_csv_cells_that_look_like_formulas_are_defused_and_json_lines_keeps_them(
    client, auditor, reviewer
):
    interrupt = make_interrupt(message='=HYPERLINK("http://evil.example","click")')
    test_history.record(interrupt, reviewer=reviewer, note="+1 from me")
    client.force_login(auditor)
    rows = list(csv.reader(io.StringIO(_body(client.get(reverse("history_export_csv"))))))
    row = dict(zip(KEYS, rows[1], strict=True))
    assert row["message"] == '\'=HYPERLINK("http://evil.example","click")'
    assert row["note"] == "'+1 from me"
    record_ = json.loads(_body(client.get(reverse("history_export_jsonl"))))
    assert record_["message"] == '=HYPERLINK("http://evil.example","click")'


def test_a_tool_name_that_looks_like_a_formula_is_defused_in_the_csv_too(client, auditor, reviewer):
    # Tool names come from the model's tool calls, so they are as untrusted as messages.
    interrupt = make_tool_approval(name="=cmd|' /C calc'!A0")
    test_history.record(interrupt, reviewer=reviewer)
    client.force_login(auditor)
    rows = list(csv.reader(io.StringIO(_body(client.get(reverse("history_export_csv"))))))
    row = dict(zip(KEYS, rows[1], strict=True))
    assert row["tools"] == "'=cmd|' /C calc'!A0"
    record_ = json.loads(_body(client.get(reverse("history_export_jsonl"))))
    assert record_["tools"] == ["=cmd|' /C calc'!A0"]


def test_both_exports_name_the_tool_and_carry_the_requested_and_executed_arguments(
    client, auditor, reviewer
):
    asked = make_interrupt()  # issue_refund asks from inside itself
    approval = make_tool_approval(args={"amount": 5000.0, "recipient": "Alice"})
    call_id = approval.value["tool_calls"][0]["id"]
    decision_submit(
        interrupt=asked,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=asked.pk,
    )
    edited = {"amount": 50.0, "recipient": "Alice"}
    decision_submit(
        interrupt=approval,
        reviewer=reviewer,
        value={"approved": True, "args": {call_id: edited}},
        resume_interrupt_id=approval.pk,
    )
    client.force_login(auditor)
    rows = list(csv.reader(io.StringIO(_body(client.get(reverse("history_export_csv"))))))
    by_tool = {row["tools"]: row for row in (dict(zip(KEYS, r, strict=True)) for r in rows[1:])}
    assert set(by_tool) == {"issue_refund", "transfer_funds"}
    refund_call = asked.tool_call_id
    assert json.loads(by_tool["issue_refund"]["requested_args"]) == {
        refund_call: {"order_id": "A-1001", "amount": 42.5}
    }
    transfer = by_tool["transfer_funds"]
    assert json.loads(transfer["requested_args"]) == {
        call_id: {"amount": 5000.0, "recipient": "Alice"}
    }
    assert json.loads(transfer["executed_args"]) == {call_id: edited}
    records = [
        json.loads(line) for line in _body(client.get(reverse("history_export_jsonl"))).splitlines()
    ]
    by_tool_json = {tuple(r["tools"]): r for r in records}
    assert by_tool_json[("transfer_funds",)]["executed_args"] == {call_id: edited}
    assert by_tool_json[("issue_refund",)]["executed_args"] == {
        refund_call: {"order_id": "A-1001", "amount": 42.5}
    }


def test_an_export_of_nothing_is_just_the_header(client, auditor, decisions):
    client.force_login(auditor)
    body = _body(client.get(reverse("history_export_csv"), {"agent": "nobody"}))
    assert body.splitlines() == [",".join(KEYS)]
    assert _body(client.get(reverse("history_export_jsonl"), {"agent": "nobody"})) == ""


def test_an_export_reads_the_table_in_batches_not_all_at_once(
    client, auditor, decisions, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(history, "EXPORT_BATCH", 2)
    client.force_login(auditor)
    response = client.get(reverse("history_export_csv"))
    # Five rows in batches of two: three queries, each issued as the stream reaches it.
    with django_assert_num_queries(3):
        lines = _body(response).splitlines()
    assert len(lines) == 6


def _reviewers():
    return [make_user(f"gen-reviewer-{k:02d}", role="reviewer").pk for k in range(20)]


def _peak_for(client, n: int, reviewer_ids: list[int]) -> int:
    from portal.models import Decision

    already = Decision.objects.count()
    generate_decisions(n - already, reviewer_ids=reviewer_ids, first=already)
    peak, chunks, _size, _seconds = export_peak(client, reverse("history_export_csv"))
    assert chunks == n + 1  # header + one line per decision
    return peak


def _check_memory_is_flat(client, auditor, monkeypatch, small: int, large: int) -> None:
    # Small batches, so even the small export spans several of them; a version that held
    # the whole result would need about large/small times the memory for the large one.
    monkeypatch.setattr(history, "EXPORT_BATCH", 250)
    client.force_login(auditor)
    client.get(reverse("history"))  # warm caches (session, permissions, templates)
    reviewer_ids = _reviewers()
    peak_small = _peak_for(client, small, reviewer_ids)
    peak_large = _peak_for(client, large, reviewer_ids)
    assert peak_large < peak_small * 1.5 + 256 * 1024, (peak_small, peak_large)
    assert peak_large < 8 * 1024 * 1024


def test_export_memory_does_not_grow_with_the_number_of_rows(client, auditor, monkeypatch):
    _check_memory_is_flat(client, auditor, monkeypatch, small=1_000, large=5_000)


@pytest.mark.postgres
def test_export_memory_does_not_grow_with_the_number_of_rows_on_postgres(
    client, auditor, monkeypatch
):
    # generate_series makes the rows in a second; bench/history.py measures 1,000,000.
    _check_memory_is_flat(client, auditor, monkeypatch, small=2_000, large=10_000)


def test_every_outcome_is_exported_with_the_name_the_pages_use():
    for code, _ in Decision.Outcome.choices:
        assert outcome_name(code) == decision_words(code)
    assert outcome_name("edited") == "Approved with edited arguments"
    assert outcome_name("cancelled", withdrawn=True) == decision_words("cancelled", withdrawn=True)
