"""The JSON API for agents that run outside the portal: ``/api/requests``.

A token with the ``request`` scope, whose user may ``raise_request``, raises an approval
request (``POST /api/requests``) and reads its answer (``GET /api/requests/<id>``, which
may wait for it: ``?wait=<seconds>``). The answer also goes to the request's
``callback_url`` as a signed webhook (``Portal-Signature``, keyed with the token's
webhook secret; see ``agents.signing`` and ``agents.portal_client``).
"""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from agents import inbox
from portal.api.auth import BearerToken
from portal.api.errors import ApiProblem, Problem
from portal.api.schemas import WAIT_MAX_SECONDS, RuleOut
from portal.models import ApiToken, ExternalRequest, waiting
from portal.reviews import external, rule_decisions

router = Router(tags=["external agents"], auth=BearerToken(ApiToken.Scope.REQUEST))


# Strict: a JSON true or "60" is not a number of seconds, nor 7 a name (422, naming the field).
class AssignTo(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    users: list[str] = Field([], description="Usernames the request is assigned to.")
    groups: list[str] = Field([], description="Group names the request is assigned to.")


class RequestIn(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    agent: str = Field(
        ...,
        description="Your agent's name, shown in the queue; policies match it. Not the "
        "name of an agent the portal runs itself.",
        examples=["invoice-bot"],
    )
    title: str = Field("", description="A short title, shown under the message in the queue.")
    message: str = Field(
        "", description="What the reviewer is asked (Markdown; at most PORTAL_MAX_INPUT_BYTES)."
    )
    summary: str = Field(
        "",
        description="What the agent wants, in one plain line (at most 200 characters), "
        "shown beside the message; by default the message's first line.",
    )
    payload: Any = Field(None, description="The data the reviewer needs to see (JSON).")
    reason: str = Field("input_required", description="A label (64 characters at most).")
    response_schema: dict[str, Any] | None = Field(
        None,
        description="A JSON schema (draft 2020-12) every answer must fit: at most 64 KiB and "
        "64 levels, $ref only into itself, patterns RE2 accepts.",
    )
    actions: list[str] | None = Field(
        None,
        max_length=len(inbox.RESPONSE_TYPES),
        description='Instead of a schema, the answers allowed: any of "accept", "edit", '
        '"response", "ignore" (the answer is then {"type": ..., "args": ...}).',
    )
    args: dict[str, Any] | None = Field(None, description="Arguments offered for an edit.")
    args_schema: dict[str, Any] | None = Field(None, description="What an edit must fit.")
    expires_in: int | None = Field(
        None, description="Seconds until the request expires undecided (a decline)."
    )
    assign_to: AssignTo | None = None
    external_ref: str = Field("", description="Your own reference, returned with the answer.")
    callback_url: str = Field(
        "", description="An http(s) URL the answer is posted to, signed, with retries."
    )
    source: str = Field(
        "client",
        description="Which door raised it, shown with the request: client, langgraph, mcp "
        "or openai-agents (the adapters set it).",
    )
    idempotency_key: str = Field(
        "",
        description="The same key again returns the first request (200) instead of raising "
        "a second; with other fields, 409.",
    )


class AnswerOut(Schema):
    outcome: str = Field(
        description="approved, rejected, edited, responded, ignored, expired or cancelled."
    )
    value: Any = Field(None, description="The answer, validated against the request's schema.")
    note: str = ""
    decided_by: str | None = Field(
        None, description="The reviewer; null when the system or a decision rule did."
    )
    decided_at: datetime
    decision_id: int
    audit_hash: str = Field(description="The decision's hash in the audit chain.")
    rule: RuleOut | None = Field(
        None, description="The decision rule's version that decided (no person); else null."
    )


class RequestOut(Schema):
    id: str
    status: str = Field(description="pending, decided, expired or cancelled.")
    agent: str
    reason: str
    title: str
    external_ref: str
    source: str = Field(description="client, langgraph, mcp or openai-agents.")
    thread_id: str
    created_at: datetime
    expires_at: datetime | None = None
    answer: AnswerOut | None = None


class WaitParams(Schema):
    wait: float = Field(
        0,
        ge=0,
        le=WAIT_MAX_SECONDS,
        description=(
            f"Seconds to wait, at most {WAIT_MAX_SECONDS:g}, for the answer while the "
            "request is pending. The answer comes as soon as it is recorded; at the limit, "
            "the request as it is then (still `pending`)."
        ),
    )


@router.post(
    "",
    response={200: RequestOut, 201: RequestOut, 403: Problem, 409: Problem, 422: Problem},
)
def raise_request(request: HttpRequest, payload: RequestIn) -> Any:
    """Raise an approval request (201). It waits in the reviewers' queue like any other;
    the same ``idempotency_key`` again returns it (200)."""
    spec = external.RequestSpec(
        **payload.dict(exclude={"assign_to"}),
        assign_to=payload.assign_to.dict() if payload.assign_to else None,
    )
    try:
        row, created = rule_decisions.external_request_raise(
            user=request.user, spec=spec, token=getattr(request, "api_token", None)
        )
    except PermissionError as exc:
        raise ApiProblem(403, str(exc)) from None
    except (external.RequestInvalid, external.IdempotencyConflict) as exc:
        raise ApiProblem(exc.status_code, exc.message, exc.errors) from None
    return Status(201 if created else 200, external.external_answer(row))


@router.get("/{request_id}", response={200: RequestOut, 404: Problem, 422: Problem})
async def get_request(request: HttpRequest, request_id: str, params: Query[WaitParams]) -> Any:
    """A request you raised, with its answer once decided. ``?wait=<seconds>`` holds the
    answer back until the decision is recorded or the seconds have passed: long-poll
    with it instead of polling often. Reading an answer marks it collected."""
    if not params.wait:
        return await sync_to_async(_answer_found)(request, request_id)  # one hand-off
    found = await sync_to_async(_found)(request, request_id)

    async def settled() -> bool:
        return await sync_to_async(external.external_request_settled)(found.pk)

    await waiting.await_until(waiting.interrupt_key(found.pk), settled, seconds=params.wait)
    return await sync_to_async(_answer_again)(found.pk)


def _found(request: HttpRequest, request_id: str) -> ExternalRequest:
    found = external.external_request_for(user=request.user, request_id=request_id)
    if found is None:
        raise ApiProblem(404, f"No request {request_id} that you raised.")
    return found


def _answer_found(request: HttpRequest, request_id: str) -> dict[str, Any]:
    return _answer(_found(request, request_id))


def _answer_again(request_id: str) -> dict[str, Any]:
    related = ExternalRequest.objects.select_related("interrupt", "interrupt__thread")
    return _answer(related.get(pk=request_id))


def _answer(row: ExternalRequest) -> dict[str, Any]:
    body = external.external_answer(row)
    if body["answer"] is not None:
        external.external_request_collect(row)
    return body
