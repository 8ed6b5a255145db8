"""``/api/decisions``: the decision history, with the history page's filters."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from portal.accounts import roles
from portal.api.auth import token_user
from portal.api.errors import ApiProblem, Problem
from portal.api.pages import AFTER_HELP, API_PAGE_MAX, LIMIT_HELP, cursor_from, next_page
from portal.api.schemas import RuleOut
from portal.audit import history
from portal.models import Decision

router = Router(tags=["decisions"])


class DecisionFilter(Schema):
    """The history page's filters (``portal.audit.history.HistoryFilter`` checks them)."""

    date_from: str | None = Field(None, description="Decided on or after this day, YYYY-MM-DD.")
    date_to: str | None = Field(None, description="Decided on or before this day, YYYY-MM-DD.")
    agent: str | None = Field(None, description="The agent that asked.")
    reviewer: str | None = Field(
        None, description=f"Who decided (a username; `{history.SYSTEM}` for expiries)."
    )
    by_rules: bool | None = Field(None, description="Only decisions made by decision rules.")
    rule: str | None = Field(None, description="Only decisions made by this rule (its name).")
    outcome: str | None = Field(None, description=f"One of {', '.join(Decision.Outcome.values)}.")
    reason: str | None = Field(None, description="The request's reason label.")
    tool: str | None = Field(None, description="A tool the request was about.")
    q: str | None = Field(None, description="Words in the request's message or payload.")
    limit: int = Field(API_PAGE_MAX, ge=1, le=API_PAGE_MAX, description=LIMIT_HELP)
    after: str | None = Field(None, max_length=200, description=AFTER_HELP)


class DecisionOut(Schema):
    """One decision, with the columns of the history page and its exports."""

    decision_id: int
    decided_at: datetime
    thread_id: str
    agent: str
    reason: str
    tools: list[str] = Field(..., description="The tools the request was about.")
    node: str
    message: str
    payload: Any = Field(None, description="What the agent sent with the request.")
    value: Any = Field(None, description="The answer submitted (null: cancelled or expired).")
    requested_args: dict[str, Any] | None = Field(
        None, description="Per tool call id: the arguments the model asked for."
    )
    executed_args: dict[str, Any] | None = Field(
        None, description="Per tool call id: the arguments that ran (after an edit)."
    )
    note: str
    outcome: str = Field(..., description=f"One of {', '.join(Decision.Outcome.values)}.")
    decided_by: str = Field(
        ..., description=f"A username, `rule <name> v<n>`, or `{history.SYSTEM}`."
    )
    reviewer: str | None = Field(None, description="The person who decided; null otherwise.")
    rule: RuleOut | None = Field(
        None, description="The decision rule's version that decided (no person); else null."
    )
    door: str = Field(
        ...,
        description=f"Where it came in: one of {', '.join(Decision.Door.values)}; empty for "
        "decisions recorded before doors were.",
    )
    requested_at: datetime | None = None
    time_to_decision_seconds: float | None = None
    interrupt_id: str
    hash: str = Field(..., description="The decision's link in the audit hash chain.")
    withdrawn: bool = Field(..., description="The requester took the request back.")

    @staticmethod
    def resolve_thread_id(obj: dict[str, Any]) -> str:
        return str(obj["thread_id"])


class DecisionPage(Schema):
    items: list[DecisionOut]
    next: str | None = Field(
        None, description="Pass it as `after` for the next page; null on the last page."
    )


@router.get("", response={200: DecisionPage, 403: Problem, 422: Problem})
def list_decisions(request: HttpRequest, filters: Query[DecisionFilter]) -> Any:
    """The decision history, newest first, with the history page's filters (all of them
    must hold). Needs the view-history permission (reviewers, auditors)."""
    if not roles.can_view_history(token_user(request)):
        raise ApiProblem(403, "Your role cannot read the decision history.")
    given = filters.dict(exclude={"limit", "after"}, exclude_none=True)
    form = history.HistoryFilter(given)
    if not form.is_valid():
        lines = [
            f"$.{field}: {message}" if field != "__all__" else f"$: {message}"
            for field, messages in form.errors.items()
            for message in messages
        ]
        raise ApiProblem(422, "The filters are not valid.", lines)
    found = history.page(
        form.criteria(),
        cursor_from(filters.after, int),
        viewer=token_user(request),
        size=filters.limit,
    )
    return {
        "items": found.rows,
        "next": next_page(found.next_cursor),
    }
