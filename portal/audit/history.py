"""The decision history, and the audit trail of other actions: for each, one filtered
queryset shared by the page and the exports.

``HistoryFilter`` validates what the auditor asks for; ``filtered(...)`` turns it into a
queryset of plain rows (``values()``, one join to the interrupt, one to the reviewer);
``page(...)`` and ``iter_rows(...)`` read it by keyset on ``(created_at, id)``, newest first,
so page 20 000 costs what page 1 costs and an export of a million rows holds one batch in
memory at a time. ``COLUMNS`` is the one list of columns the page, the CSV and the JSON Lines
export all show. Full-text search: docs/architecture.md, "audit".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any, TypeVar

from django import forms
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import BooleanField, F, Func, Q, QuerySet, TextField, Value
from django.db.models.functions import Cast
from django.http import Http404, HttpRequest
from django.utils import timezone

from portal.accounts import access, roles
from portal.inputs import DayField
from portal.models import (
    AuditEvent,
    Checkpoint,
    Decision,
    Interrupt,
    Rule,
    outcome_name,
    paging,
    rule_words,
    summary_beside,
    tool_calls_in,
)
from portal.models.paging import Cursor

PAGE_SIZE = 50
EXPORT_BATCH = 2000

# Read straight from the database by the page and the exports (one query per page/batch).
_VALUES = (
    "id",
    "created_at",
    "thread_id",
    "interrupt_id",
    "interrupt__agent",
    "interrupt__external__source",
    "interrupt__reason",
    "interrupt__node",
    "interrupt__message",
    "interrupt__summary",
    "interrupt__value",
    "interrupt__tool",
    "interrupt__tool_call_id",
    "interrupt__created_at",
    "value",
    "original_args",
    "executed_args",
    "note",
    "outcome",
    "reviewer__username",
    "door",
    "rule_version_id",
    "rule_version__number",
    "rule_version__rule__name",
    "rule_hash",
    "reviewer_id",
    "thread__owner_id",
    "hash",
)

# (key, heading): the columns of the page and of both exports, in order.
COLUMNS = [
    ("decision_id", "Decision"),
    ("decided_at", "Decided at"),
    ("thread_id", "Thread"),
    ("agent", "Agent"),
    ("raised_through", "Raised through"),
    ("reason", "Reason"),
    ("tools", "Tools"),
    ("node", "Node"),
    ("message", "Message"),
    ("summary", "Summary"),
    ("payload", "Payload"),
    ("value", "Submitted value"),
    ("requested_args", "Requested arguments"),
    ("executed_args", "Executed arguments"),
    ("note", "Note"),
    ("outcome", "Outcome"),
    ("outcome_words", "Outcome in words"),
    ("decided_by", "Decided by"),
    ("rule", "Rule"),
    ("door", "Door"),
    ("requested_at", "Requested at"),
    ("time_to_decision_seconds", "Time to decision (s)"),
    ("interrupt_id", "Interrupt"),
    ("hash", "Chain hash"),
]
SYSTEM = roles.SYSTEM  # shown (and filterable) when no person decided: expiry, cancellation


def tool_names(payload: Any, tool: str = "") -> list[str]:
    """Names of the tools a request is about: the tool that raised it (``tool``, for an
    ``interrupt()`` inside a tool), or the calls a tool approval lists
    (``value["tool_calls"]``)."""
    names = [tool] if tool else []
    for call in tool_calls_in(payload):
        if call.name and call.name not in names:
            names.append(call.name)
    return names


def row_from(values: dict[str, Any]) -> dict[str, Any]:
    """One decision as the page and the exports show it."""
    decided, requested = values["created_at"], values["interrupt__created_at"]
    withdrawn = (
        values["outcome"] == Decision.Outcome.CANCELLED
        and values["reviewer_id"] is not None
        and values["reviewer_id"] == values["thread__owner_id"]
    )
    rule = None
    if values["rule_version_id"] is not None:
        rule = {
            "name": values["rule_version__rule__name"],
            "version": values["rule_version__number"],
            "hash": values["rule_hash"],
        }
    waited = (decided - requested).total_seconds() if decided and requested else None
    return {
        "decision_id": values["id"],
        "decided_at": decided,
        "thread_id": values["thread_id"],
        "agent": values["interrupt__agent"],
        # The outside door that raised it (ExternalRequest.Source); empty for our agents.
        "raised_through": values["interrupt__external__source"] or "",
        "reason": values["interrupt__reason"],
        "tools": tool_names(values["interrupt__value"], values["interrupt__tool"]),
        "node": values["interrupt__node"],
        "message": values["interrupt__message"],
        "summary": values["interrupt__summary"],
        # Shown beside the message only when it says more than the message does.
        "summary_line": summary_beside(values["interrupt__summary"], values["interrupt__message"]),
        "payload": values["interrupt__value"],
        "value": values["value"],
        # Keyed by tool call id: what the model asked for, and what ran (after an edit).
        "requested_args": values["original_args"],
        "executed_args": values["executed_args"],
        "note": values["note"],
        "outcome": values["outcome"],
        "decided_by": rule_words(rule["name"], rule["version"])
        if rule
        else values["reviewer__username"] or SYSTEM,
        # The decision rule's version that decided (no person), with its hash; else None.
        "rule": rule,
        "rule_version_id": values["rule_version_id"],  # for a link to the version's page
        "reviewer": values["reviewer__username"],
        # Where it came in (empty for decisions recorded before doors were).
        "door": values["door"],
        "requested_at": requested,
        "time_to_decision_seconds": round(waited, 3) if waited is not None else None,
        "interrupt_id": values["interrupt_id"],
        "tool_call_id": values["interrupt__tool_call_id"],
        "hash": values["hash"],
        # The requester took the request back: shown as such, never as a reviewer's no.
        "withdrawn": withdrawn,
        "outcome_words": outcome_name(values["outcome"], withdrawn=withdrawn),
    }


# --- who may look ---------------------------------------------------------------------


def require_history_access(request: HttpRequest) -> None:
    if not roles.can_view_history(request.user):
        raise PermissionDenied("Decision history is for reviewers and auditors.")


def require_export_access(request: HttpRequest) -> None:
    if not roles.can_export_history(request.user):
        raise PermissionDenied("Exporting the decision history needs the export permission.")


def require_metrics_access(request: HttpRequest) -> None:
    if not roles.can_view_metrics(request.user):
        raise PermissionDenied("The metrics page needs the metrics permission.")


def get_decision_for_user(request: HttpRequest, decision_id: int) -> Decision:
    """The decision if its thread is visible to the user (404 otherwise); 403 for a user who
    may see the thread but not the history (a support agent on their own thread)."""
    try:
        related = Decision.objects.select_related(
            "interrupt", "thread", "reviewer", "rule_version__rule"
        )
        decision = access.in_visible_threads(related, request.user).get(pk=decision_id)
    except Decision.DoesNotExist:
        raise Http404("No such decision") from None
    require_history_access(request)
    return decision


# --- filters --------------------------------------------------------------------------


class KeysetFilter(forms.Form):
    """Days and a page cursor; the history's and the audit trail's filters add theirs."""

    date_from = DayField(required=False, label="From")
    date_to = DayField(required=False, label="To")
    after = forms.CharField(required=False, max_length=200)

    def clean_after(self) -> Cursor | None:
        text = self.cleaned_data.get("after") or ""
        if not text:
            return None
        cursor = Cursor.decode(text, int)
        if cursor is None:
            raise forms.ValidationError("This page link is damaged; start from the first page.")
        return cursor

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            raise forms.ValidationError("“From” is after “To”.")
        return data

    def criteria(self) -> dict[str, Any]:
        """The valid filters (invalid ones are dropped; the page shows their errors)."""
        data = getattr(self, "cleaned_data", {}) if self.is_bound else {}
        return {k: v for k, v in data.items() if v not in (None, "") and k != "after"}

    def cursor(self) -> Cursor | None:
        return (getattr(self, "cleaned_data", None) or {}).get("after")

    def query_string(self, **extra: str) -> str:
        """The current filters as a query string (for page links and export links)."""
        from urllib.parse import urlencode

        pairs = {k: str(v) for k, v in self.criteria().items()}
        pairs.update(extra)
        return urlencode(pairs)


class HistoryFilter(KeysetFilter):
    agent = forms.CharField(required=False, max_length=64)
    reviewer = forms.CharField(required=False, max_length=150, label="Decided by")
    by_rules = forms.BooleanField(required=False, label="Decided by rules")
    rule = forms.CharField(required=False, max_length=120, label="Rule")
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *Decision.Outcome.choices])
    reason = forms.CharField(required=False, max_length=64)
    tool = forms.CharField(required=False, max_length=128)
    q = forms.CharField(required=False, max_length=200, label="Search")


def _day_start(day: Any) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


QS = TypeVar("QS", QuerySet[Decision], QuerySet[AuditEvent])


def between_days(qs: QS, criteria: dict[str, Any]) -> QS:
    """``qs`` created from the start of ``date_from`` to the end of ``date_to`` (either may
    be missing)."""
    if day := criteria.get("date_from"):
        qs = qs.filter(created_at__gte=_day_start(day))
    if day := criteria.get("date_to"):
        qs = qs.filter(created_at__lt=_day_start(day + timedelta(days=1)))
    return qs


class _FullText(Func):
    """``message`` and ``payload`` match the web-search style query (PostgreSQL).

    The document expression must stay the same as the GIN index in migration 0003: the
    planner picks an expression index only when the expressions are equal.
    """

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        (message, p1), (payload, p2), (query, p3) = (
            compiler.compile(e) for e in self.get_source_expressions()
        )
        sql = (
            f"to_tsvector('simple'::regconfig, COALESCE({message}, '') || ' ' || "
            f"COALESCE({payload}, '')) @@ websearch_to_tsquery('simple'::regconfig, {query})"
        )
        return sql, (*p1, *p2, *p3)


class _HasToolCall(Func):
    """SQLite: the payload's ``tool_calls`` array has an element named ``name``."""

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        (payload, p1), (name, p2) = (compiler.compile(e) for e in self.get_source_expressions())
        # Both pieces are compiled expressions; the name travels as a parameter.
        sql = (
            f"EXISTS (SELECT 1 FROM json_each({payload}, '$.tool_calls') AS call "  # noqa: S608
            f"WHERE json_extract(call.value, '$.name') = {name})"
        )
        return sql, (*p1, *p2)


class _CustomerSaid(Func):
    """A checkpoint's user messages hold the words of a web-search style query
    (PostgreSQL). The expression and its WHERE must stay the same as the GIN index in
    migration 0031: the planner picks a partial expression index only when they are equal.
    """

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        (messages, p1), (query, p2) = (compiler.compile(e) for e in self.get_source_expressions())
        said = f"jsonb_path_query_array({messages}, '$[*] ? (@.role == \"user\").content')"
        sql = (
            f'({messages} @> \'[{{"role": "user"}}]\' AND jsonb_to_tsvector('
            f"'simple'::regconfig, {said}, '[\"string\"]') "
            f"@@ websearch_to_tsquery('simple'::regconfig, {query}))"
        )
        return sql, (*p1, *p2)


class _CustomerSaidLike(Func):
    """SQLite: a checkpoint's user messages contain ``pattern`` (a LIKE pattern, which
    SQLite compares without case for ASCII letters)."""

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        (messages, p1), (pattern, p2) = (compiler.compile(e) for e in self.get_source_expressions())
        sql = (
            f"EXISTS (SELECT 1 FROM json_each({messages}) AS m "  # noqa: S608
            "WHERE json_extract(m.value, '$.role') = 'user' "
            f"AND json_extract(m.value, '$.content') LIKE {pattern} ESCAPE '\\')"
        )
        return sql, (*p1, *p2)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _search(qs: QuerySet[Decision], text: str) -> QuerySet[Decision]:
    """Decisions whose request's message or payload, or whose conversation's customer
    (its user messages), has ``text``; without regard to case on both stores."""
    if connection.vendor == "postgresql":
        payload_text = Cast("value", TextField())
        asked = Interrupt.objects.filter(
            _FullText(F("message"), payload_text, Value(text)), decided=True
        )
        said = Checkpoint.objects.filter(_CustomerSaid(F("messages"), Value(text)))
        by_request = Decision.objects.filter(interrupt__in=asked.values("id")).values("id")
        by_customer = Decision.objects.filter(thread__in=said.values("thread_id")).values("id")
        # One IN over a UNION, not an OR of two: PostgreSQL can then plan it as a join
        # driven by the two indexes, or walk the newest decisions, whichever is cheaper.
        return qs.filter(id__in=by_request.union(by_customer))
    customer = Checkpoint.objects.filter(_CustomerSaidLike(F("messages"), Value(_like(text))))
    return qs.filter(
        Q(interrupt__message__icontains=text)
        | Q(interrupt__value__icontains=text)
        | Q(thread__in=customer.values("thread_id"))
    )


def tool_q(name: str, prefix: str = "") -> Q:
    """Requests about tool ``name`` (raised inside it, or listing a call of it);
    ``prefix`` is the path to the request (``"interrupt__"`` from a decision)."""
    by_node = (
        Q(**{f"{prefix}tool": name})
        | Q(**{f"{prefix}node": name})
        | Q(**{f"{prefix}tool_call_id": name})
    )
    if connection.vendor == "postgresql":
        # jsonb containment: an element of tool_calls whose name is `name`. (No index
        # serves it: with the OR, the other conditions select the rows; migration 0010.)
        return Q(**{f"{prefix}value__contains": {"tool_calls": [{"name": name}]}}) | by_node
    return Q(_HasToolCall(F(f"{prefix}value"), Value(name))) | by_node


def _tool(qs: QuerySet[Decision], name: str) -> QuerySet[Decision]:
    return qs.filter(tool_q(name, "interrupt__"))


def customer_said(text: str) -> QuerySet[Any]:
    """The ids of threads whose customer (a user message) wrote ``text``, without regard
    to case, by plain matching (a subquery)."""
    if connection.vendor == "postgresql":
        said = Checkpoint.objects.filter(
            messages__icontains=text, messages__contains=[{"role": "user"}]
        )
    else:
        said = Checkpoint.objects.filter(_CustomerSaidLike(F("messages"), Value(_like(text))))
    return said.values("thread_id")


def text_q(text: str) -> Q:
    """Requests whose message, payload or customer's words hold ``text``, without regard
    to case, by plain matching: for the queue's pending requests, which no search index
    holds (the history's ``_search`` uses them)."""
    return Q(message__icontains=text) | Q(value__icontains=text) | Q(thread__in=customer_said(text))


def filtered(criteria: dict[str, Any], viewer: Any) -> QuerySet[Decision]:
    """Decisions matching ``criteria`` (``HistoryFilter.criteria()``) on threads ``viewer``
    may see (as a decision's own page does), newest first."""
    qs = between_days(access.in_visible_threads(Decision.objects.all(), viewer), criteria)
    if agent := criteria.get("agent"):
        qs = qs.filter(interrupt__agent=agent)
    if who := criteria.get("reviewer"):
        qs = (
            qs.filter(reviewer__isnull=True, rule_version__isnull=True)
            if who == SYSTEM
            else qs.filter(reviewer__username=who)
        )
    if criteria.get("by_rules"):
        qs = qs.filter(rule_version__isnull=False)
    if rule := criteria.get("rule"):
        qs = qs.filter(rule_version__rule__name=rule)
    if outcome := criteria.get("outcome"):
        qs = qs.filter(outcome=outcome)
    if reason := criteria.get("reason"):
        qs = qs.filter(interrupt__reason=reason)
    if tool := criteria.get("tool"):
        qs = _tool(qs, tool)
    if text := criteria.get("q"):
        qs = _search(qs, text)
    return qs.order_by("-created_at", "-id")


def _keyset(qs: QuerySet[Any], cursor: Cursor | None, size: int) -> tuple[list[Any], bool]:
    return paging.page(qs, cursor, field="created_at", descending=True, size=size)


@dataclass
class Page:
    rows: list[dict[str, Any]]
    next_cursor: Cursor | None


def page_of(
    qs: Any, to_row: Callable[[dict[str, Any]], dict[str, Any]], cursor: Cursor | None, size: int
) -> Page:
    values, more = _keyset(qs, cursor, size)
    rows = [to_row(v) for v in values]
    return Page(rows, Cursor.of(values[-1], "created_at") if more else None)


def walk(
    qs: Any, to_row: Callable[[dict[str, Any]], dict[str, Any]], batch_size: int
) -> Iterator[dict[str, Any]]:
    cursor = None
    while True:
        batch, more = _keyset(qs, cursor, batch_size)
        for values in batch:
            yield to_row(values)
        if not more:
            return
        cursor = Cursor.of(batch[-1], "created_at")
        del batch


def page(
    criteria: dict[str, Any],
    cursor: Cursor | None = None,
    *,
    viewer: Any,
    size: int | None = None,
) -> Page:
    """One page of rows after ``cursor``: a single query whatever the page number."""
    qs = filtered(criteria, viewer).values(*_VALUES)
    return page_of(qs, row_from, cursor, size or PAGE_SIZE)


def iter_rows(
    criteria: dict[str, Any], *, viewer: Any, batch_size: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every matching row, newest first, reading ``batch_size`` rows per query."""
    qs = filtered(criteria, viewer).values(*_VALUES)
    return walk(qs, row_from, batch_size or EXPORT_BATCH)


# The reasons the runtime raises: offered even before any request of theirs was decided.
KNOWN_REASONS = [
    "tool_approval",
    "transfer_approval",
    "breakpoint",
    "input_required",
    "uncertain_outcome",
]
# How many of the newest decided requests the dropdowns read their agents, reasons and
# tools from: one bounded query on the resolved_at index, never a scan of the table.
CHOICES_FROM = 500


def choices_from(requests: QuerySet[Interrupt], selected: dict[str, Any]) -> dict[str, list[str]]:
    """The agents, reasons and tools of the first ``CHOICES_FROM`` of ``requests`` (an
    ordered queryset), with the configured agents, the known reasons, and whatever
    ``selected`` asks for (so a filter in a link stays shown)."""
    agents = set(getattr(settings, "PORTAL_AGENTS", {}))
    reasons, tools = set(KNOWN_REASONS), set()
    rows = requests.values_list("agent", "reason", "tool", "value__tool_calls")[:CHOICES_FROM]
    for agent, reason, tool, calls in rows:
        agents.add(agent)
        reasons.add(reason)
        tools.update(tool_names({"tool_calls": calls}, tool or ""))
    for key, known in (("agent", agents), ("reason", reasons), ("tool", tools)):
        if selected.get(key):
            known.add(selected[key])
    return {
        "agents": sorted(a for a in agents if a),
        "reasons": sorted(r for r in reasons if r),
        "tools": sorted(t for t in tools if t),
    }


def filter_choices(selected: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """The codes the history's dropdowns offer, built from the data: the newest decided
    requests (``choices_from``), the reviewers and the outcomes. The pages put them in
    words."""
    reviewers = list(roles.deciders().order_by("username").values_list("username", flat=True)[:200])
    decided = Interrupt.objects.filter(resolved_at__isnull=False).order_by("-resolved_at")
    return {
        **choices_from(decided, selected or {}),
        "reviewers": [*reviewers, SYSTEM],
        "rules": list(Rule.objects.order_by("name").values_list("name", flat=True)[:200]),
        "outcomes": [value for value, _ in Decision.Outcome.choices],
    }
