"""Decision history for auditors and reviewers: the list, one decision, exports, metrics.

Everything here is read-only (GET only). The list and both exports read the same filtered
queryset (``portal.audit.history``), so an export holds exactly the rows and columns the page
shows; exports stream keyset batches, so their memory does not grow with the row count.
"""

from __future__ import annotations

import csv
import functools
import itertools
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from portal.audit import history, metrics, trail
from portal.audit.history import COLUMNS, HistoryFilter
from portal.audit.trail import EVENT_COLUMNS, EventFilter
from portal.models import Checkpoint, Decision, ExternalRequest, Interrupt, tool_calls_in
from portal.reviews.words import (
    agent_words,
    answer_words,
    arg_changes,
    call_words,
    decision_words,
    edits_in_words,
    outcome_choices,
    reason_words,
    submitted_words,
    tool_words,
)
from portal.web.threads import decisions_by_call, display_message


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


# How much of the thread the decision page shows around the decision.
CONTEXT_MESSAGES = 6
NEXT_CHECKPOINTS = 8


F = TypeVar("F", HistoryFilter, EventFilter)


def _filter_form(request: HttpRequest, form_class: type[F]) -> F:
    form = form_class(request.GET or None)
    if form.is_bound:
        form.is_valid()  # errors are shown; valid fields still filter
    return form


def _results(
    request: HtmxRequest, form: F, page: Any, partial: str, context: dict[str, Any]
) -> HttpResponse:
    """A filtered, paged list: the whole page, or for htmx's own requests only the
    ``partial`` (``template#fragment``) that holds the results."""
    cursor = page.next_cursor
    context |= {
        "form": form,
        "page": page,
        "filters_qs": form.query_string(),
        "next_qs": form.query_string(after=cursor.encode()) if cursor else "",
        "is_first": form.cursor() is None,
        "filtered": bool(form.criteria()),
    }
    template = partial if request.htmx and not request.htmx.boosted else partial.split("#")[0]
    return render(request, template, context)


@require_GET
@login_required
def history_list(request: HtmxRequest) -> HttpResponse:
    history.require_history_access(request)
    form = _filter_form(request, HistoryFilter)
    page = history.page(form.criteria(), form.cursor(), viewer=request.user)
    for row in page.rows:
        row |= _row_words(row)
    context = {"columns": COLUMNS, "choices": _choices(form)}
    return _results(request, form, page, "portal/history.html#history-results", context)


def _choices(form: HistoryFilter) -> dict[str, list[tuple[str, str]]]:
    """The filters' dropdowns: (code, words) pairs, the words the rows show."""
    codes = history.filter_choices(form.criteria())
    return {
        "agents": [(a, agent_words(a)) for a in codes["agents"]],
        "reasons": [(r, reason_words(r)) for r in codes["reasons"]],
        "tools": [(t, tool_words(t)) for t in codes["tools"]],
        "outcomes": outcome_choices(),
        "reviewers": [(r, r) for r in codes["reviewers"]],
        "rules": [(r, r) for r in codes["rules"]],
    }


def _call_names(payload: Any, tool: str, tool_call_id: str | None) -> dict[str, str]:
    names = {call.id: call.name for call in tool_calls_in(payload)}
    if tool_call_id and tool:
        names.setdefault(tool_call_id, tool)
    return names


def _row_words(row: dict[str, Any]) -> dict[str, Any]:
    """What a history row shows in words: the outcome, what was submitted as a sentence,
    and an edit's changes field by field (the JSON stays folded beside them)."""
    names = _call_names(row["payload"], (row["tools"] or [""])[0], row["tool_call_id"])
    return {
        "outcome_text": decision_words(row["outcome"], withdrawn=row["withdrawn"]),
        "submitted": submitted_words(row["outcome"], row["value"], withdrawn=row["withdrawn"]),
        "edits": edits_in_words(row["requested_args"], row["executed_args"], names),
    }


# --- one decision ---------------------------------------------------------------------


def _thread_url(thread_id: object) -> str | None:
    try:
        return reverse("thread_detail", kwargs={"thread_id": thread_id})
    except NoReverseMatch:  # the threads pages are not installed in this build
        return None


def _state_lines(status: str, next_node: Any, interrupt: Any, messages: list[Any]) -> list[str]:
    state = {"status": status, "next_node": next_node, "interrupt": interrupt}
    lines = json.dumps(state, indent=2, sort_keys=True, default=str).splitlines()
    for message in messages:
        lines.append(json.dumps(message, sort_keys=True, default=str))
    return lines


def _diff(before: list[str], after: list[str]) -> list[tuple[str, str]]:
    """(kind, line) pairs: kind is "add", "del" or "same"."""
    import difflib

    rows = []
    for line in difflib.ndiff(before, after):
        tag, text = line[:2], line[2:]
        if tag == "? ":
            continue
        rows.append(({"+ ": "add", "- ": "del"}.get(tag, "same"), text))
    return rows


def _thread_context(decision: Decision) -> dict[str, Any]:
    """The checkpoint holding the interrupt, the first one after the resume, their diff,
    and what the agent did next. Reads a bounded number of rows whatever the thread's
    length: the checkpoint before is fetched by seq, the message tail by a LIMIT."""
    interrupt = decision.interrupt
    seq = interrupt.checkpoint_seq
    checkpoints = Checkpoint.objects.filter(thread_id=decision.thread_id)
    paused = checkpoints.filter(seq=seq).first()
    following = list(checkpoints.filter(seq__gt=seq).order_by("seq")[:NEXT_CHECKPOINTS])
    resumed = following[0] if following else None
    newest = checkpoints.filter(seq__lte=seq).messages_newest_first()
    tail = list(reversed(list(itertools.islice(newest, CONTEXT_MESSAGES))))
    before = _state_lines(
        paused.status if paused else "unknown",
        paused.next_node if paused else None,
        paused.interrupt if paused else None,
        tail,
    )
    after = None
    if resumed is not None:
        added = list(resumed.messages or [])
        after = _state_lines(resumed.status, resumed.next_node, resumed.interrupt, tail + added)
    return {
        "paused": paused,
        "resumed": resumed,
        "diff": _diff(before, after) if after is not None else None,
        "next_steps": following,
        "more_steps": len(following) == NEXT_CHECKPOINTS,
    }


def _calls_in_words(decision: Decision) -> tuple[list[str], list[dict[str, Any]]]:
    """The tool calls the request was about, and what was asked and executed of each,
    in the words the request page uses (the raw JSON stays in the page's <details>)."""
    interrupt = decision.interrupt
    names = interrupt.call_names()
    original = decision.original_args if isinstance(decision.original_args, dict) else {}
    executed = decision.executed_args if isinstance(decision.executed_args, dict) else None
    asked = [
        call_words(call.name, call.args if isinstance(call.args, dict) else None)
        for call in interrupt.tool_calls
    ]
    rows = []
    for call_id, args in original.items():
        name = names.get(call_id, "")
        ran = executed.get(call_id) if executed is not None else None
        rows.append(
            {
                "asked": call_words(name, args) if isinstance(args, dict) else "",
                "executed": call_words(name, ran) if isinstance(ran, dict) else None,
                "changed": isinstance(ran, dict) and ran != args,
                "changes": arg_changes(args, ran) if isinstance(ran, dict) else [],
            }
        )
    if not asked and interrupt.tool_call_id in original:
        args = original[interrupt.tool_call_id]
        asked = [call_words(interrupt.tool or "", args if isinstance(args, dict) else None)]
    return asked, rows


def _raised_through(interrupt: Interrupt) -> str:
    """The outside door that raised the request, in words; empty for the portal's agents."""
    outside = ExternalRequest.objects.filter(interrupt=interrupt).first()
    return outside.get_source_display() if outside is not None else ""


@require_GET
@login_required
def decision_detail(request: HttpRequest, decision_id: int) -> HttpResponse:
    decision = history.get_decision_for_user(request, decision_id)
    interrupt = decision.interrupt
    waited = (decision.created_at - interrupt.created_at).total_seconds()
    asked, arg_rows = _calls_in_words(decision)
    thread_context = _thread_context(decision)
    decided = decisions_by_call(decision.thread)
    # What the agent did next, in the same words as the transcript (tool names and calls
    # in words, a tool's JSON result as a sentence); the raw steps are in the diff.
    # A step that added no message and paused on nothing ("step 4: running") says nothing.
    next_steps = [
        step
        for step in (
            {
                "seq": step.seq,
                "status": step.status,
                "interrupt": step.interrupt,
                "messages": [
                    display_message(m, decided)
                    for m in step.messages or []
                    if isinstance(m, dict) and m.get("role") != "system"
                ],
            }
            for step in thread_context.pop("next_steps")
        )
        if step["messages"] or step["interrupt"]
    ]
    context = {
        "decision": decision,
        "interrupt": interrupt,
        "tools": history.tool_names(interrupt.value, interrupt.tool),
        "asked_calls": asked,
        "arg_rows": arg_rows,
        "answer_text": answer_words(
            decision.outcome, decision.value, withdrawn=decision.is_withdrawal()
        ),
        "outcome_text": decision_words(decision.outcome, withdrawn=decision.is_withdrawal()),
        "time_to_decision": waited,
        "thread_url": _thread_url(decision.thread_id),
        "payload_json": json.dumps(interrupt.value, indent=2, sort_keys=True, default=str),
        "schema_json": json.dumps(interrupt.response_schema, indent=2, sort_keys=True),
        "value_json": json.dumps(decision.value, indent=2, sort_keys=True, default=str),
        "args_json": json.dumps(
            {"original": decision.original_args, "executed": decision.executed_args},
            indent=2,
            sort_keys=True,
            default=str,
        ),
        "next_steps": next_steps,
        "raised_through": _raised_through(interrupt),
        **thread_context,
    }
    return render(request, "portal/decision.html", context)


# --- exports --------------------------------------------------------------------------


# A spreadsheet opening the CSV would run a cell that starts like a formula. Messages,
# notes and tool names come from agents and users, so such cells get a leading apostrophe (the usual
# defence); the JSON Lines export keeps every value exactly.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose ``write`` hands the line back (for csv.writer)."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(
    rows: Iterable[dict[str, Any]], columns: list[tuple[str, str]] = COLUMNS
) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow([key for key, _ in columns])
    for row in rows:
        yield writer.writerow(
            [_cell(";".join(row[k]) if k == "tools" else row[k]) for k, _ in columns]
        )


def _json_default(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)  # UUIDs


def _jsonl_lines(
    rows: Iterable[dict[str, Any]], columns: list[tuple[str, str]] = COLUMNS
) -> Iterator[str]:
    for row in rows:
        record = {k: row[k] for k, _ in columns}
        yield json.dumps(record, default=_json_default, ensure_ascii=False) + "\n"


def _export(request: HttpRequest, kind: str) -> HttpResponse | StreamingHttpResponse:
    history.require_export_access(request)
    form = _filter_form(request, HistoryFilter)
    rows = functools.partial(history.iter_rows, viewer=request.user)
    return _stream(form, rows, COLUMNS, kind, "decisions")


def _stream(
    form: history.KeysetFilter,
    iter_rows: Any,
    columns: list[tuple[str, str]],
    kind: str,
    name: str,
) -> HttpResponse | StreamingHttpResponse:
    if form.errors:
        # The page drops a bad filter and says so; a file cannot, and would hold rows
        # that were not asked for.
        lines = [f"{name}: {e}" for name, errors in form.errors.items() for e in errors]
        return HttpResponse(
            "Nothing was exported; fix the filters: " + " ".join(lines),
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    rows = iter_rows(form.criteria())
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if kind == "csv":
        response = StreamingHttpResponse(
            _csv_lines(rows, columns), content_type="text/csv; charset=utf-8"
        )
    else:
        response = StreamingHttpResponse(
            _jsonl_lines(rows, columns), content_type="application/x-ndjson; charset=utf-8"
        )
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.{kind}"'
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@login_required
def export_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return _export(request, "csv")


@require_GET
@login_required
def export_jsonl(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return _export(request, "jsonl")


# --- the audit trail of actions --------------------------------------------------------


@require_GET
@login_required
def audit_trail(request: HtmxRequest) -> HttpResponse:
    trail.require_audit_trail_access(request)
    form = _filter_form(request, EventFilter)
    page = trail.events_page(form.criteria(), form.cursor())
    context = {"choices": trail.event_filter_choices()}
    return _results(request, form, page, "portal/audit_trail.html#audit-results", context)


def _export_events(request: HttpRequest, kind: str) -> HttpResponse | StreamingHttpResponse:
    trail.require_audit_trail_export(request)
    form = _filter_form(request, EventFilter)
    return _stream(form, trail.iter_event_rows, EVENT_COLUMNS, kind, "audit-trail")


@require_GET
@login_required
def audit_trail_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return _export_events(request, "csv")


@require_GET
@login_required
def audit_trail_jsonl(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return _export_events(request, "jsonl")


# --- metrics --------------------------------------------------------------------------


@require_GET
@login_required
def metrics_page(request: HttpRequest) -> HttpResponse:
    history.require_metrics_access(request)
    form = metrics.MetricsRange(request.GET or None)
    start, end = form.bounds()
    context = {
        "form": form,
        "start": start,
        "end": end,
        **metrics.charts(start, end),
    }
    return render(request, "portal/metrics.html", context)


urlpatterns = [
    path("history/", history_list, name="history"),
    path("history/export.csv", export_csv, name="history_export_csv"),
    path("history/export.jsonl", export_jsonl, name="history_export_jsonl"),
    path("history/<int:decision_id>/", decision_detail, name="decision_detail"),
    path("history/actions/", audit_trail, name="audit_trail"),
    path("history/actions/export.csv", audit_trail_csv, name="audit_trail_export_csv"),
    path("history/actions/export.jsonl", audit_trail_jsonl, name="audit_trail_export_jsonl"),
    path("metrics/", metrics_page, name="metrics"),
]
