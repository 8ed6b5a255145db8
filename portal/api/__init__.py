"""The JSON API (django-ninja), mounted at ``/api/``; OpenAPI at ``/api/openapi.json``, docs
at ``/api/docs``.

Auth is ``Authorization: Bearer <token>``. Tokens are made by ``manage.py create_api_token
USER --scope ...`` (``api_token_create``); only their SHA-256 is stored. A token carries
scopes (``read`` for every GET, ``start`` to start, retry and cancel threads and withdraw
their requests, ``decide`` to claim, release and answer, ``request`` for an outside agent
to raise requests; a missing one is a 403 naming it), may expire, and is refused (401,
saying why) once expired or once its user is deactivated or changes password. Each token
may make ``settings.PORTAL_API_RATE`` requests; more get 429 with ``Retry-After``. With
``settings.PORTAL_API_ENABLED`` off every endpoint answers 403,
whatever the token.

Every refusal has the same body: ``{"detail": "<readable message>", "errors": [lines]}``;
``errors`` holds one line per problem for 422s (the runtime's wording for schema problems,
e.g. ``$.approved: expected boolean, got str``) and is empty otherwise. Decisions go
through ``portal.reviews.decisions`` like the dashboard and the admin, so the status codes are the
service's: 401 bad token, 403 scope/role/policy/API off, 404 not visible or not paused,
409 stale or already decided, 422 invalid, 429 too many requests. The OpenAPI document
lists these on every operation (``PortalApi``).

Lists cap their page at ``API_PAGE_MAX``; threads and decisions page by keyset
(``portal.models.paging``). ``GET /threads/{id}/events`` follows a thread as server-sent events
(``portal.api.follow``).
"""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import base64
import math
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Literal

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.db import connection
from django.db.models import F, Prefetch, Q, QuerySet, Window, prefetch_related_objects
from django.db.models.functions import RowNumber
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.utils.decorators import sync_and_async_middleware
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.pagination import LimitOffsetPagination, paginate
from ninja.security import HttpBearer
from ninja.throttling import SimpleRateThrottle
from pydantic import ConfigDict

from agents import inbox
from agents.checkpoint import ThreadStatus
from portal.accounts import access, roles
from portal.accounts.tokens import hash_token
from portal.api import follow
from portal.audit import history
from portal.errors import (
    InputError,
    InterruptNotPending,
    ThreadActionForbidden,
    ThreadNotCancellable,
    ThreadNotRetryable,
)
from portal.inputs import API_PREFIX
from portal.models import (
    ApiToken,
    Approval,
    Assignment,
    Checkpoint,
    Decision,
    Interrupt,
    RoutingEvent,
    Run,
    Thread,
    paging,
    policies,
    waiting,
)
from portal.notify.assignments import assigned_to
from portal.reviews.decisions import (
    DecisionRefused,
    decision_submit_for_thread,
    interrupt_claim,
    interrupt_unclaim,
)
from portal.reviews.services import interrupt_withdraw, thread_cancel, thread_retry, thread_start
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.registry import UnknownAgentError

# The most requests one page of a list endpoint returns.
API_PAGE_MAX = 100
# How precisely a token's last_used_at is kept: it is written when older than this.
TOKEN_LAST_USED_RESOLUTION = timedelta(minutes=1)
# The longest a waiting GET holds its answer back.
WAIT_MAX_SECONDS = 30


class ApiProblem(HttpError):
    """A refusal with error lines, answered in the common ``{"detail", "errors"}`` shape."""

    def __init__(self, status_code: int, detail: str, errors: list[str] | None = None) -> None:
        super().__init__(status_code, detail)
        self.errors = list(errors or [])


class ApiDisabled(HttpError):
    def __init__(self) -> None:
        super().__init__(
            403, "The JSON API is turned off on this server (PORTAL_API_ENABLED is false)."
        )


class BearerToken(HttpBearer):
    """A valid token carrying ``scope``: checked before the body is read, so a token
    without the scope gets 403 naming it whatever it sends."""

    def __init__(self, scope: str = ApiToken.Scope.READ) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> Any:
        # Checked before the token, so a disabled API says so even to a bad token.
        if not settings.PORTAL_API_ENABLED:
            raise ApiDisabled()
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        if not token:
            return None
        row = (
            ApiToken.objects.select_related("user")
            .filter(token_hash=hash_token(token.strip()))
            .first()
        )
        if row is None:
            return None
        refusal = row.refusal()
        if refusal is not None:
            raise ApiProblem(401, refusal)
        if self.scope not in (row.scopes or []):
            raise ApiProblem(
                403,
                f"This token lacks the '{self.scope}' scope; create one with "
                f"manage.py create_api_token USER --scope {self.scope}.",
            )
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at >= TOKEN_LAST_USED_RESOLUTION:
            # At most one durable write per token and minute, not one per request: reads
            # would otherwise each wait for the disk.
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        request.user = row.user
        request.api_token = row  # type: ignore[attr-defined]
        return row.user


class TokenRateThrottle(SimpleRateThrottle):
    """At most ``settings.PORTAL_API_RATE`` requests per token (e.g. ``120/min``; empty:
    no limit). Counted in the default cache, which is Redis when ``REDIS_URL`` is set, so
    every web process shares one count."""

    scope = "token"

    def __init__(self) -> None:
        super().__init__(rate=settings.PORTAL_API_RATE or "1/s")

    def allow_request(self, request: HttpRequest) -> bool:
        # Read each time, so the setting can change without rebuilding the API.
        if not settings.PORTAL_API_RATE:
            return True
        self.rate = settings.PORTAL_API_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request)

    def get_cache_key(self, request: HttpRequest) -> str | None:
        token = getattr(request, "api_token", None)
        if token is None:
            return None
        # Keyed by the token's hash, not its row id: an id can come back (a row deleted
        # and its id reused, a rolled-back test), and the new token would inherit the
        # old one's count.
        return self.cache_format % {"scope": self.scope, "ident": token.token_hash}


# Refusals any endpoint may answer, whatever its own: documented on every operation.
COMMON_REFUSALS = {
    400: "The request carries input no endpoint takes (a NUL character, JSON that is not "
    "JSON); errors names it.",
    401: "No token, or one that is unknown, expired or revoked; detail says which.",
    403: "The token lacks the scope this endpoint needs, the user's role may not do it, "
    "or the API is turned off; detail says which.",
    422: "A parameter or the body does not have the expected shape; errors has one line "
    "per problem ($.field: what is wrong).",
    429: "Too many requests with this token; Retry-After says when to try again.",
}


class PortalApi(NinjaAPI):
    """The API, documented with every answer it gives: the refusals every endpoint may
    give (``COMMON_REFUSALS``, all in the ``Problem`` shape) are added to each operation,
    and an operation marked ``x-event-stream`` documents its 200 body as what it is,
    ``text/event-stream`` (its schema describes one event), not JSON."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        problem = {"$ref": "#/components/schemas/Problem"}
        for operations in schema["paths"].values():
            for operation in operations.values():
                responses = operation["responses"]
                for status, description in COMMON_REFUSALS.items():
                    if status not in responses and str(status) not in responses:
                        responses[status] = {
                            "description": description,
                            "content": {self.renderer.media_type: {"schema": problem}},
                        }
                if not operation.get("x-event-stream"):
                    continue
                for status, response in responses.items():
                    if str(status) == "200":
                        body = response["content"].pop(self.renderer.media_type)
                        response["content"]["text/event-stream"] = body
        return schema


api = PortalApi(
    title="Reviewer portal API",
    version="1",
    description=(
        "List and answer the requests agents raise, start threads and read them. "
        "Authenticate with `Authorization: Bearer <token>` (`manage.py create_api_token`). "
        "Tokens carry scopes: `read` for the GET endpoints, `start` to start, retry and "
        "cancel threads and withdraw their requests, `decide` to claim, release and "
        "answer requests, `request` for an outside agent to raise them (`/api/requests`). "
        "Lists return at most 100 items a page; `/threads` and `/decisions` page by the `next` "
        "cursor. `GET /threads/{thread_id}`, `POST /threads` and `POST "
        "/threads/{thread_id}/resume` take `wait` (seconds, at most 30): the answer comes "
        "once the thread's run has paused or finished, instead of being polled for. Every "
        "refusal has the body `{detail, errors}`. Too many requests with one "
        "token get 429 and Retry-After."
    ),
    auth=BearerToken(),
    throttle=[TokenRateThrottle()],
    urls_namespace="api",
)


# --- refusals the API's routes do not make themselves --------------------------------------


def _json_refusal(request: HttpRequest, response: Any) -> Any:
    """An HTML or text 404/405 under /api/ (Django's page for a path no route serves,
    django-ninja's "Method not allowed") as the API's refusal body, saying what to do."""
    if not request.path.startswith(API_PREFIX) or response.status_code not in (404, 405):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    if response.status_code == 405:
        allowed = response.get("Allow", "")
        detail = f"{request.method} is not allowed on {request.path}; it takes {allowed}."
    else:
        detail = f"No API endpoint at {request.path}; the endpoints are listed at /api/docs."
    refusal = JsonResponse({"detail": detail, "errors": []}, status=response.status_code)
    if response.has_header("Allow"):
        refusal["Allow"] = response["Allow"]
    return refusal


@sync_and_async_middleware
def json_refusals(get_response: Any) -> Any:
    """Middleware: every refusal under /api/ has the API's body (see ``_json_refusal``)."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> Any:
            return _json_refusal(request, await get_response(request))

        return middleware_async

    def middleware(request: HttpRequest) -> Any:
        return _json_refusal(request, get_response(request))

    return middleware


def _user(request: HttpRequest) -> Any:
    """The token's user (ninja puts what the auth returned on ``request.auth``)."""
    return getattr(request, "auth", None)


def _refusal(
    request: HttpRequest, status: int, detail: str, errors: list[str] | None = None
) -> HttpResponse:
    body = {"detail": detail, "errors": errors or []}
    response: HttpResponse = api.create_response(request, body, status=status)
    return response


@api.exception_handler(DecisionRefused)
def _on_refused(request: HttpRequest, exc: DecisionRefused) -> HttpResponse:
    return _refusal(request, exc.status_code, exc.message, exc.errors)


@api.exception_handler(HttpError)
def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    detail = exc.message
    if isinstance(exc, ApiProblem):
        return _refusal(request, exc.status_code, detail, exc.errors)
    if isinstance(exc, Throttled):
        wait = math.ceil(exc.wait) if exc.wait is not None else 1
        response = _refusal(
            request,
            429,
            f"Too many requests with this token (the limit is {settings.PORTAL_API_RATE}); "
            f"retry in {wait} s.",
        )
        response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, AuthenticationError):
        detail = "Send a valid token: Authorization: Bearer <token> (manage.py create_api_token)."
    elif exc.status_code == 400 and detail.startswith("Cannot parse request body"):
        detail = "The request body is not valid JSON."
    return _refusal(request, exc.status_code, detail)


def _error_line(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] == "body":
        loc = loc[2:]  # ("body", "<param name>", field, ...)
    elif loc and loc[0] in ("query", "path"):
        loc = loc[1:]
    path = "$" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc)
    kind = error.get("type", "")
    if kind == "missing":
        return f"{path}: required"
    if kind == "extra_forbidden":
        return f"{path}: unexpected field"
    return f"{path}: {error.get('msg', 'invalid')}"


@api.exception_handler(ValidationError)
def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    lines = [_error_line(e) for e in exc.errors]
    return _refusal(request, 422, "The request does not have the expected shape.", lines)


# --- schemas ---------------------------------------------------------------------------


class Problem(Schema):
    detail: str
    errors: list[str] = []


def _first_user_words(newest_first: Iterable[Any]) -> str | None:
    for message in newest_first:
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content") or "")
    return None


def latest_user_message(interrupt: Interrupt) -> str | None:
    """The user's words that led to ``interrupt`` (newest checkpoints first, so this stops
    after a step or two however long the thread is)."""
    if hasattr(interrupt, "_latest_user_message"):  # set for a whole page by InterruptPage
        return interrupt._latest_user_message  # type: ignore[no-any-return]
    steps = Checkpoint.objects.filter(
        thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq
    )
    return _first_user_words(steps.messages_newest_first())


# Newest checkpoints read per thread for a page of requests; the user's words are almost
# always among them, and a request whose are not is looked up on its own.
_RECENT_CHECKPOINTS = 8


def attach_latest_user_messages(interrupts: list[Interrupt]) -> None:
    """``latest_user_message`` for a page of interrupts in one query, not one per row."""
    if not interrupts:
        return
    wanted = Q()
    for interrupt in interrupts:
        wanted |= Q(thread_id=interrupt.thread_id, seq__lte=interrupt.checkpoint_seq)
    recent = Window(RowNumber(), partition_by=[F("thread_id")], order_by=F("seq").desc())
    rows = (
        Checkpoint.objects.filter(wanted)
        .annotate(recent=recent)
        .filter(recent__lte=_RECENT_CHECKPOINTS)
        .order_by("thread_id", "-seq")
        .values_list("thread_id", "seq", "messages")
    )
    by_thread: dict[Any, list[tuple[int, Any]]] = {}
    for thread_id, seq, messages in rows:
        by_thread.setdefault(thread_id, []).append((seq, messages))
    for interrupt in interrupts:
        read = by_thread.get(interrupt.thread_id, [])
        found = _first_user_words(
            message
            for seq, messages in read
            if seq <= interrupt.checkpoint_seq
            for message in reversed(messages or [])
        )
        if found is None and len(read) == _RECENT_CHECKPOINTS:
            found = latest_user_message(interrupt)  # older than the window: look further
        interrupt._latest_user_message = found  # type: ignore[attr-defined]


class ApprovalOut(Schema):
    reviewer: str = Field(..., description="Who answered (their username).")
    outcome: str = Field(
        ..., description="How: approved counts towards going ahead; anything else against."
    )
    note: str
    created_at: datetime

    @staticmethod
    def resolve_reviewer(obj: Approval) -> str:
        return str(obj.reviewer.get_username())


class AssigneeOut(Schema):
    user: str | None = Field(
        None, description="The user it is assigned to (their username), or null for a group."
    )
    group: str | None = Field(
        None, description="The group it is assigned to (its name), or null for a user."
    )
    source: str = Field(
        ...,
        description="Why: ``policy`` (its policy's assign_to), ``interrupt`` (the agent "
        "named them when it asked) or ``escalation``.",
    )
    assigned_at: datetime

    @staticmethod
    def resolve_user(obj: Assignment) -> str | None:
        return obj.user.get_username() if obj.user else None

    @staticmethod
    def resolve_group(obj: Assignment) -> str | None:
        return obj.group.name if obj.group else None

    @staticmethod
    def resolve_assigned_at(obj: Assignment) -> datetime:
        return obj.created_at


class InterruptOut(Schema):
    id: str
    thread_id: str
    agent: str
    node: str
    reason: str
    message: str
    summary: str = Field(
        "", description="What the agent wants, in one plain line (empty on old requests)."
    )
    value: Any = None
    response_schema: dict[str, Any] | None = None
    status: str
    created_at: datetime
    expires_at: datetime | None = None
    claimed_by: str | None = None
    user_message: str | None = Field(
        None, description="The latest user message before the request was raised."
    )
    actions: list[str] | None = Field(
        None,
        description=(
            "The answers this request allows, when it declares them: resume with "
            '{"type": "accept"}, {"type": "edit", "args": {...}}, {"type": "response", '
            '"args": "text"} or {"type": "ignore"}; any other type is refused (422).'
        ),
    )

    approvals_required: int = Field(
        1,
        description="How many distinct reviewers must approve before the run goes ahead "
        "(the request's policy).",
    )
    rejections_required: int = Field(
        1, description="How many distinct reviewers must decline before it is declined."
    )
    approvals: list[ApprovalOut] = Field(
        [],
        description="The answers recorded so far on a request that needs several "
        "reviewers, oldest first: who, how and when.",
    )
    assigned_to: list[AssigneeOut] = Field(
        [],
        description="The users and groups the request is routed to, oldest first (empty "
        "until the notifier has routed a new request, and for one no policy routes).",
    )
    reminded_at: datetime | None = Field(
        None, description="When the reminder before expiry went out, if it has."
    )
    escalated_at: datetime | None = Field(
        None, description="When the request was escalated to its policy's escalate_to group."
    )

    @staticmethod
    def resolve_approvals_required(obj: Interrupt) -> int:
        return policies.policy_for(obj.agent, obj.reason).approvals_required

    @staticmethod
    def resolve_rejections_required(obj: Interrupt) -> int:
        return policies.policy_for(obj.agent, obj.reason).rejections_required

    @staticmethod
    def resolve_approvals(obj: Interrupt) -> list[Approval]:
        return list(obj.approvals.all())

    @staticmethod
    def resolve_assigned_to(obj: Interrupt) -> list[Assignment]:
        return list(obj.assignments.all())

    @staticmethod
    def resolve_reminded_at(obj: Interrupt) -> datetime | None:
        return _routed_at(obj, RoutingEvent.Action.REMINDED)

    @staticmethod
    def resolve_escalated_at(obj: Interrupt) -> datetime | None:
        return _routed_at(obj, RoutingEvent.Action.ESCALATED)

    @staticmethod
    def resolve_user_message(obj: Interrupt) -> str | None:
        return latest_user_message(obj)

    @staticmethod
    def resolve_actions(obj: Interrupt) -> list[str] | None:
        found = inbox.declared(obj.response_schema)
        return found.actions if found else None

    @staticmethod
    def resolve_thread_id(obj: Interrupt) -> str:
        return str(obj.thread_id)

    @staticmethod
    def resolve_claimed_by(obj: Interrupt) -> str | None:
        return obj.claimed_by.get_username() if obj.claimed_by else None


def _routed_at(interrupt: Interrupt, action: str) -> datetime | None:
    # Prefetched (_visible_interrupts); each happens once per request.
    return next((e.created_at for e in interrupt.routing_events.all() if e.action == action), None)


class ThreadOut(Schema):
    id: str
    agent: str
    status: str
    title: str
    created_at: datetime
    updated_at: datetime
    messages: list[dict[str, Any]]
    pending_interrupt: InterruptOut | None = None


class StartIn(Schema):
    model_config = ConfigDict(extra="forbid")

    agent: str
    input: Any = Field(
        ..., examples=[{"messages": [{"role": "user", "content": "Refund $42.50 for A-1001"}]}]
    )


# The ``thread`` of a start or an answer sent with ``?wait``.
WAITED_THREAD = (
    "Only with `wait`: the thread as `GET /threads/{thread_id}` returns it, once nothing of "
    "it is queued or running (200) or as it was when the seconds ran out (202); null "
    "without `wait`."
)


class StartOut(Schema):
    thread_id: str
    run_id: str
    thread: ThreadOut | None = Field(None, description=WAITED_THREAD)


class ResumeIn(Schema):
    model_config = ConfigDict(extra="forbid")

    resume: Any = Field(..., description="The answer; it must fit the request's schema.")
    resume_interrupt_id: str | None = Field(
        None, description="The id of the request this answers (required)."
    )
    note: str = Field("", description="Recorded with the decision.")


class ResumeOut(Schema):
    thread_id: str
    run_id: str | None = Field(
        ...,
        description="The queued resume; null while the request waits for more reviewers, "
        "and for an external agent's request, which has no graph to resume (its agent is "
        "told instead).",
    )
    decision_id: int | None = Field(
        ..., description="The decision; null while the request waits for more reviewers."
    )
    outcome: str
    approval_id: int | None = Field(
        None, description="Your vote, on a request that needs several reviewers."
    )
    waiting_for: str | None = Field(
        None, description='What the request still waits for, e.g. "1 more approval".'
    )
    thread: ThreadOut | None = Field(None, description=WAITED_THREAD)


class InterruptFilter(Schema):
    status: Literal["pending", "resolved", "cancelled", "expired"] | None = None
    assigned: Literal["me"] | None = Field(
        None,
        description="``me``: only requests assigned to you or to one of your groups "
        "(by a policy, by the agent, or by an escalation).",
    )


# --- endpoints -------------------------------------------------------------------------


def _interrupt_relations() -> dict[str, Any]:
    """What ``InterruptOut`` reads of an interrupt's related rows, by relation name."""
    votes = Approval.objects.select_related("reviewer").order_by("id")
    assignees = Assignment.objects.select_related("user", "group").order_by("created_at", "id")
    routed = RoutingEvent.objects.filter(
        action__in=[RoutingEvent.Action.REMINDED, RoutingEvent.Action.ESCALATED]
    )
    return {
        "approvals": Prefetch("approvals", queryset=votes),
        "assignments": Prefetch("assignments", queryset=assignees),
        "routing_events": Prefetch("routing_events", queryset=routed),
    }


def _visible_interrupts(user: Any) -> QuerySet[Interrupt]:
    related = Interrupt.objects.select_related("claimed_by").prefetch_related(
        *_interrupt_relations().values()
    )
    return access.in_visible_threads(related, user)


# A thread's pending request and whether it has any rows in each relation InterruptOut
# reads. Written out, not built with the ORM: composing this query (three Exists and a
# select_related) cost more CPU than the four queries it replaces.
_PENDING_SQL = """
SELECT i.*,
  EXISTS (SELECT 1 FROM {approval} a WHERE a.interrupt_id = i.id) AS has_approvals,
  EXISTS (SELECT 1 FROM {assignment} s WHERE s.interrupt_id = i.id) AS has_assignments,
  EXISTS (
    SELECT 1 FROM {routing} r WHERE r.interrupt_id = i.id AND r.action IN (%s, %s)
  ) AS has_routing_events
FROM {interrupt} i
WHERE i.id = %s
"""


def _pending_request(user: Any, thread: Thread, interrupt_id: Any) -> Interrupt | None:
    """``thread``'s request ``interrupt_id`` as ``_visible_interrupts`` gives it, in one
    query while it has no votes, assignees or reminders (most have none of the three): a
    relation is read only when the row says it has some."""
    if interrupt_id is None or not access.can_see_thread(user, thread):
        return None
    query = _PENDING_SQL.format(
        approval=Approval._meta.db_table,
        assignment=Assignment._meta.db_table,
        routing=RoutingEvent._meta.db_table,
        interrupt=Interrupt._meta.db_table,
    )
    actions = [RoutingEvent.Action.REMINDED, RoutingEvent.Action.ESCALATED]
    found = list(Interrupt.objects.raw(query, [*actions, str(interrupt_id)]))
    if not found or found[0].thread_id != thread.pk:
        return None
    interrupt = found[0]
    relations = _interrupt_relations()
    cache = interrupt.__dict__.setdefault("_prefetched_objects_cache", {})
    for name in relations:
        if not getattr(interrupt, f"has_{name}"):
            # As prefetch_related leaves a relation it found empty.
            empty = getattr(interrupt, name).none()
            empty._result_cache, empty._prefetch_done = [], True
            cache[name] = empty
    wanted = [p for name, p in relations.items() if getattr(interrupt, f"has_{name}")]
    if wanted:
        prefetch_related_objects([interrupt], *wanted)
    return interrupt


API_OFFSET_MAX = 1_000_000


class InterruptPage(LimitOffsetPagination):
    """Limit/offset with ``limit`` capped (a larger one is a 422 naming the maximum), and
    the page's user messages read in one query."""

    class Input(Schema):
        limit: int = Field(
            API_PAGE_MAX,
            ge=1,
            le=API_PAGE_MAX,
            description=f"How many requests to return, at most {API_PAGE_MAX}.",
        )
        # Bounded so that a huge number is a 422 naming the bound, not a database
        # error; past a million rows a client should filter instead.
        offset: int = Field(
            0, ge=0, le=API_OFFSET_MAX, description=f"Rows to skip, at most {API_OFFSET_MAX}."
        )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_limit=API_PAGE_MAX, **kwargs)

    def paginate_queryset(
        self, queryset: QuerySet[Interrupt], pagination: Any, request: HttpRequest, **params: Any
    ) -> Any:
        page = super().paginate_queryset(queryset, pagination, request, **params)
        page["items"] = list(page["items"])
        attach_latest_user_messages(page["items"])
        return page


@api.get("/interrupts", response=list[InterruptOut], tags=["interrupts"])
@paginate(InterruptPage)
def list_interrupts(request: HttpRequest, filters: Query[InterruptFilter]) -> Any:
    """Requests visible to you, oldest first; ``?status=pending`` for the queue and
    ``?assigned=me`` for those assigned to you. Pages hold at most 100 requests
    (``limit``); walk them with ``offset``."""
    user = _user(request)
    qs = _visible_interrupts(user)
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.assigned == "me":
        qs = qs.filter(assigned_to(user))
    return qs.order_by("created_at", "id")


@api.get(
    "/interrupts/{interrupt_id}",
    response={200: InterruptOut, 404: Problem},
    tags=["interrupts"],
)
def get_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    interrupt = _visible_interrupts(_user(request)).filter(pk=interrupt_id).first()
    if interrupt is None:
        raise ApiProblem(404, f"No request {interrupt_id} that you can see.")
    return interrupt


def _waited(done: str) -> dict[str, Any]:
    """The OpenAPI descriptions of a start's or an answer's 200 and 202."""
    return {
        "responses": {
            200: {
                "description": f"{done}, and (asked with `wait`) nothing of the thread is "
                "queued or running any more: its run paused or finished. `thread` shows it."
            },
            202: {
                "description": f"{done}. Asked with `wait`: the thread's run was still "
                "queued or running when the seconds ran out; `thread` is as it was then."
            },
        }
    }


class WaitParams(Schema):
    wait: float = Field(
        0,
        ge=0,
        le=WAIT_MAX_SECONDS,
        description=(
            "Seconds to wait, at most "
            f"{WAIT_MAX_SECONDS:g}, for the thread's queued or running work to finish or "
            "pause before answering. The answer comes as soon as it does; at the limit, "
            "the thread as it is then (still `running`, or `idle` while queued)."
        ),
    )


@api.post(
    "/threads",
    response={200: StartOut, 202: StartOut, 403: Problem, 422: Problem},
    tags=["threads"],
    auth=BearerToken(ApiToken.Scope.START),
    openapi_extra=_waited("Started"),
)
async def start_thread(request: HttpRequest, payload: StartIn, params: Query[WaitParams]) -> Any:
    """Start a conversation with an agent; the worker runs it (202: queued).

    With ``?wait=<seconds>`` the thread is started (committed) first, then the answer
    waits like ``GET /threads/{thread_id}?wait``: 200 once its run has paused or
    finished, 202 if the seconds ran out first; either way with ``thread``, the thread
    as that GET returns it. A refused start is refused at once."""
    accepted = await sync_to_async(_start)(request, payload)
    return await _after_wait(request, StartOut, accepted, params.wait)


def _start(request: HttpRequest, payload: StartIn) -> Status[dict[str, Any]]:
    user = _user(request)
    if not roles.can_start(user):
        raise ApiProblem(403, "Your role cannot start conversations.")
    try:
        thread, run = thread_start(agent=payload.agent, input=payload.input, user=user)
    except UnknownAgentError as exc:
        raise ApiProblem(422, str(exc), [f"$.agent: {exc}"]) from None
    except InputError as exc:
        raise ApiProblem(422, str(exc), [f"$.input: {exc}"]) from None
    return Status(202, {"thread_id": str(thread.pk), "run_id": str(run.pk)})


def _thread_or_404(request: HttpRequest, thread_id: str) -> Thread:
    try:
        return access.get_thread_for_user(request, thread_id)
    except Http404 as exc:
        raise ApiProblem(404, f"No thread {thread_id} that you can see.") from exc


def _thread_busy(thread_id: Any) -> bool:
    busy = Run.objects.filter(
        thread_id=thread_id, status__in=[Run.Status.QUEUED, Run.Status.RUNNING]
    ).exists()
    if busy:
        _release_connection()  # it will wait
    return busy


def _release_connection() -> None:
    # A waiting request holds no database connection between its looks (back to the pool,
    # or closed), so many waiters do not hold as many connections. Not inside a
    # transaction: a test's own would be lost.
    if not connection.in_atomic_block:
        connection.close()


async def _settle(thread_id: Any, seconds: float) -> bool:
    """Wait up to ``seconds`` until nothing of the thread is queued or running; whether
    that happened."""

    async def settled() -> bool:
        return not await sync_to_async(_thread_busy)(thread_id)

    return await waiting.await_until(waiting.thread_key(thread_id), settled, seconds=seconds)


async def _after_wait(
    request: HttpRequest, schema: type[Schema], accepted: Status[dict[str, Any]], seconds: float
) -> Any:
    """The answer to a start or a resume: ``accepted`` (202) at once without a wait; with
    one, what was recorded and the thread once settled (200) or as it is when the time is
    up (202)."""
    if not seconds:
        return accepted
    recorded = accepted.value
    settled = await _settle(recorded["thread_id"], seconds)

    def answer() -> Schema:
        # Validated whole, in a thread (the resolvers read the database): a schema built
        # apart and nested would be validated again, from its own fields, not the rows.
        return schema.model_validate(
            {**recorded, "thread": _thread_data(request, recorded["thread_id"])}
        )

    return Status(200 if settled else 202, await sync_to_async(answer)())


@api.get("/threads/{thread_id}", response={200: ThreadOut, 404: Problem}, tags=["threads"])
async def get_thread(request: HttpRequest, thread_id: str, params: Query[WaitParams]) -> Any:
    """A thread's status, its messages and the request it waits on (if any).

    With ``?wait=<seconds>`` the answer waits until nothing of the thread is queued or
    running (its run paused, finished or failed), or until the seconds have passed: poll
    with it instead of polling often."""
    thread = await sync_to_async(_thread_or_404)(request, thread_id)
    if params.wait:
        await _settle(thread.pk, params.wait)
    return await sync_to_async(_thread_out)(request, thread.pk)


def _thread_out(request: HttpRequest, thread_id: Any) -> ThreadOut:
    # Built here, in a thread, because the schema's resolvers may read the database.
    return ThreadOut.model_validate(_thread_data(request, thread_id))


def _thread_data(request: HttpRequest, thread_id: Any) -> dict[str, Any]:
    thread = Thread.objects.get(pk=thread_id)
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    messages = [m for m in (snapshot.messages if snapshot else []) if m.get("role") != "system"]
    pending = None
    if snapshot is not None and snapshot.status is ThreadStatus.INTERRUPTED:
        pending_id = (snapshot.interrupt or {}).get("id")
        pending = _pending_request(_user(request), thread, pending_id)
        if pending is not None and pending.checkpoint_seq == snapshot.seq:
            # The snapshot holds the messages up to the request's checkpoint already.
            pending._latest_user_message = _first_user_words(  # type: ignore[attr-defined]
                reversed(snapshot.messages)
            )
    return {
        "id": str(thread.pk),
        "agent": thread.agent,
        "status": thread.status,
        "title": thread.title,
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "messages": messages,
        "pending_interrupt": pending,
    }


@api.post(
    "/threads/{thread_id}/resume",
    response={
        200: ResumeOut,
        202: ResumeOut,
        403: Problem,
        404: Problem,
        409: Problem,
        422: Problem,
    },
    tags=["threads"],
    auth=BearerToken(ApiToken.Scope.DECIDE),
    openapi_extra=_waited("Recorded"),
)
async def resume_thread(
    request: HttpRequest, thread_id: str, payload: ResumeIn, params: Query[WaitParams]
) -> Any:
    """Answer the request a thread waits on; the worker resumes it (202: queued).

    409 when the request named by ``resume_interrupt_id`` was already decided (even once
    the thread has finished) or is stale, 404 when the thread is not paused and the
    answer names none of its requests, 422 with one line per problem when the answer
    breaks the request's schema.

    With ``?wait=<seconds>`` the answer is recorded (committed) first, then the reply
    waits like ``GET /threads/{thread_id}?wait``: 200 once the resumed run has paused or
    finished (at once when nothing was queued: a vote that awaits more reviewers), 202 if
    the seconds ran out first; either way with ``thread``, the thread as that GET returns
    it. A refused answer is refused at once.
    """
    accepted = await sync_to_async(_resume)(request, thread_id, payload)
    return await _after_wait(request, ResumeOut, accepted, params.wait)


def _resume(request: HttpRequest, thread_id: str, payload: ResumeIn) -> Status[dict[str, Any]]:
    user = _user(request)
    if not roles.can_decide(user):
        raise ApiProblem(403, "Your role cannot decide requests.")
    thread = _thread_or_404(request, thread_id)
    recorded = decision_submit_for_thread(
        thread=thread,
        reviewer=user,
        value=payload.resume,
        resume_interrupt_id=payload.resume_interrupt_id,
        note=payload.note,
    )
    if isinstance(recorded, Approval):  # a vote; the request waits for more reviewers
        return Status(
            202,
            {
                "thread_id": str(thread.pk),
                "run_id": None,
                "decision_id": None,
                "outcome": recorded.outcome,
                "approval_id": recorded.pk,
                "waiting_for": getattr(recorded, "needed", None),
            },
        )
    run = recorded.resume_run  # type: ignore[attr-defined]
    return Status(
        202,
        {
            "thread_id": str(thread.pk),
            "run_id": str(run.pk) if run is not None else None,
            "decision_id": recorded.pk,
            "outcome": recorded.outcome,
        },
    )


# --- lists with a keyset cursor ----------------------------------------------------------

THREAD_STATUSES = f"One of {', '.join(Thread.Status.values)}."
LIMIT_HELP = (
    f"How many items to return, 1 to {API_PAGE_MAX} (default {API_PAGE_MAX}); a larger "
    "value is refused with 422 naming the maximum."
)
AFTER_HELP = "The `next` value of the previous page: the page after it. Omit it for the first page."


def _next(cursor: paging.Cursor | None) -> str | None:
    # URL-safe, so a client can paste it into a query string as it is (an ISO time's "+"
    # would otherwise arrive as a space).
    if cursor is None:
        return None
    return base64.urlsafe_b64encode(cursor.encode().encode()).decode().rstrip("=")


def _cursor(text: str | None, ident: Any) -> paging.Cursor | None:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raw = ""
    cursor = paging.Cursor.decode(raw, ident)
    if cursor is None:
        raise ApiProblem(
            422,
            "The cursor is damaged; start again from the first page (omit `after`).",
            ["$.after: not a cursor this API returned"],
        )
    return cursor


class ThreadFilter(Schema):
    status: Thread.Status | None = Field(None, description="Only threads with this status.")
    agent: str | None = Field(None, max_length=64, description="Only threads of this agent.")
    owner: str | None = Field(
        None, max_length=150, description="Only threads started by this username."
    )
    limit: int = Field(API_PAGE_MAX, ge=1, le=API_PAGE_MAX, description=LIMIT_HELP)
    after: str | None = Field(None, max_length=200, description=AFTER_HELP)


class ThreadSummaryOut(Schema):
    id: str
    agent: str
    status: str = Field(..., description=THREAD_STATUSES)
    title: str
    owner: str | None = Field(None, description="Who started it (null: the system).")
    created_at: datetime
    updated_at: datetime = Field(..., description="Its last activity; the list's order.")

    @staticmethod
    def resolve_id(obj: Thread) -> str:
        return str(obj.pk)

    @staticmethod
    def resolve_owner(obj: Thread) -> str | None:
        return obj.owner.get_username() if obj.owner else None


class ThreadPage(Schema):
    items: list[ThreadSummaryOut]
    next: str | None = Field(
        None, description="Pass it as `after` for the next page; null on the last page."
    )


@api.get("/threads", response={200: ThreadPage, 422: Problem}, tags=["threads"])
def list_threads(request: HttpRequest, filters: Query[ThreadFilter]) -> Any:
    """Threads visible to you (your own, or all of them with the view-all permission),
    most recently active first. Walk the pages with ``after``; a thread that becomes
    active while you walk moves to the front, where a fresh first page shows it."""
    qs = access.visible_threads(_user(request)).select_related("owner")
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.owner:
        qs = qs.filter(owner__username=filters.owner)
    cursor = _cursor(filters.after, uuid.UUID)
    items, more = paging.page(qs, cursor, field="updated_at", descending=True, size=filters.limit)
    return {
        "items": items,
        "next": _next(paging.Cursor.of(items[-1], "updated_at") if more else None),
    }


class DecisionFilter(Schema):
    """The history page's filters (``portal.audit.history.HistoryFilter`` checks them)."""

    date_from: str | None = Field(None, description="Decided on or after this day, YYYY-MM-DD.")
    date_to: str | None = Field(None, description="Decided on or before this day, YYYY-MM-DD.")
    agent: str | None = Field(None, description="The agent that asked.")
    reviewer: str | None = Field(
        None, description=f"Who decided (a username; `{history.SYSTEM}` for expiries)."
    )
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
    decided_by: str = Field(..., description=f"A username, or `{history.SYSTEM}`.")
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


@api.get("/decisions", response={200: DecisionPage, 403: Problem, 422: Problem}, tags=["decisions"])
def list_decisions(request: HttpRequest, filters: Query[DecisionFilter]) -> Any:
    """The decision history, newest first, with the history page's filters (all of them
    must hold). Needs the view-history permission (reviewers, auditors)."""
    if not roles.can_view_history(_user(request)):
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
        form.criteria(), _cursor(filters.after, int), viewer=_user(request), size=filters.limit
    )
    return {
        "items": found.rows,
        "next": _next(found.next_cursor),
    }


# --- acting on a request ----------------------------------------------------------------


def _interrupt_or_404(request: HttpRequest, interrupt_id: str) -> Interrupt:
    found = _visible_interrupts(_user(request)).select_related("thread").filter(pk=interrupt_id)
    interrupt = found.first()
    if interrupt is None:
        raise ApiProblem(404, f"No request {interrupt_id} that you can see.")
    return interrupt


@api.post(
    "/interrupts/{interrupt_id}/claim",
    response={200: InterruptOut, 403: Problem, 404: Problem, 409: Problem},
    tags=["interrupts"],
    auth=BearerToken(ApiToken.Scope.DECIDE),
)
def claim_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Claim a pending request, so other reviewers see who is on it. 409 when someone
    else holds it (unless you may take claims over) or it is no longer pending; claiming
    your own claim again changes nothing."""
    interrupt = _interrupt_or_404(request, interrupt_id)
    return interrupt_claim(interrupt=interrupt, user=_user(request))


@api.post(
    "/interrupts/{interrupt_id}/release",
    response={200: InterruptOut, 403: Problem, 404: Problem},
    tags=["interrupts"],
    auth=BearerToken(ApiToken.Scope.DECIDE),
)
def release_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Release a claim: your own, or anyone's if you may take claims over (403
    otherwise). Releasing an unclaimed request changes nothing."""
    interrupt = _interrupt_or_404(request, interrupt_id)
    return interrupt_unclaim(interrupt=interrupt, user=_user(request))


class WithdrawOut(Schema):
    interrupt_id: str
    thread_id: str
    run_id: str | None = Field(
        ...,
        description="The run that resumes the thread with a decline; null for an external "
        "agent's request, which has no graph (its agent is told instead).",
    )
    status: str = Field(..., description="The request's status now: cancelled.")


@api.post(
    "/interrupts/{interrupt_id}/withdraw",
    response={202: WithdrawOut, 403: Problem, 404: Problem, 409: Problem},
    tags=["interrupts"],
    auth=BearerToken(ApiToken.Scope.START),
)
def withdraw_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Take back a pending request you raised by starting the thread: the agent resumes
    with a decline and says the action was not done (202: queued). Only the thread's
    owner may, with a token carrying the ``start`` scope; 409 when the request is no
    longer pending."""
    user = _user(request)
    interrupt = _interrupt_or_404(request, interrupt_id)
    if interrupt.thread.owner_id != user.pk:
        raise ApiProblem(
            403,
            "Only the person who started this thread can withdraw its request; "
            "reviewers reject it instead (POST /api/threads/{thread_id}/resume).",
        )
    try:
        run = interrupt_withdraw(interrupt=interrupt, user=user)
    except InterruptNotPending as exc:
        raise ApiProblem(409, f"Not withdrawn: {exc}.") from None
    return Status(
        202,
        {
            "interrupt_id": interrupt.pk,
            "thread_id": str(interrupt.thread_id),
            "run_id": str(run.pk) if run is not None else None,
            "status": interrupt.status,
        },
    )


# --- following a thread -------------------------------------------------------------------


class ThreadStatusData(Schema):
    thread_id: str
    status: str = Field(..., description=THREAD_STATUSES)
    run_id: str | None = Field(None, description="The run that changed it (null: a snapshot).")
    run_status: str | None = None
    error: str = ""


class ChunkData(Schema):
    chunk: dict[str, Any] = Field(
        ...,
        description=(
            "A streamed chunk: event (state, message, error, updates), message, state, "
            "data, thread_id, run_id."
        ),
    )


class ClosedData(Schema):
    detail: str = Field(..., description="Why the stream ended.")


class ThreadEvent(Schema):
    """One server-sent event: its ``event:`` line and its ``data:`` (JSON, except for
    ``html``, which is the HTML the pages swap in)."""

    event: Literal["status", "chunk", "html", "closed"]
    data: ThreadStatusData | ChunkData | ClosedData | str


def _thread_status(thread_id: Any) -> dict[str, Any]:
    status = Thread.objects.filter(pk=thread_id).values_list("status", flat=True).first()
    return {
        "thread_id": str(thread_id),
        "status": status or "",
        "run_id": None,
        "run_status": None,
        "error": "",
    }


def _may_still_follow(token_id: int, thread_id: Any) -> str | None:
    """Why the token may no longer follow the thread (None: it may), read afresh."""
    row = ApiToken.objects.select_related("user").filter(pk=token_id).first()
    if row is None:
        return "This token was deleted."
    refusal = row.refusal()
    if refusal is not None:
        return refusal
    if ApiToken.Scope.READ not in (row.scopes or []):
        return "This token lacks the 'read' scope."
    if not access.visible_threads(row.user).filter(pk=thread_id).exists():
        return f"You can no longer see thread {thread_id}."
    return None


@api.get(
    "/threads/{thread_id}/events",
    response={200: ThreadEvent, 404: Problem},
    tags=["threads"],
    openapi_extra={"x-event-stream": True},
)
async def thread_events(request: HttpRequest, thread_id: str) -> Any:
    """Follow a thread without polling: server-sent events (``text/event-stream``)
    carrying what its pages get live. First a ``status`` snapshot, then ``status`` when a
    run changes it, ``chunk`` for each streamed token or step, ``html`` for the pages'
    swaps (a finished message, a request claimed, released or decided), and ``closed``
    when the token may no longer follow (revoked, expired, access lost), after which the
    stream ends. A comment line every 15 s keeps it open through proxies."""
    thread = await sync_to_async(_thread_or_404)(request, thread_id)
    token = request.api_token  # type: ignore[attr-defined]
    stream = follow.follow_thread(
        thread_id=thread.pk,
        user_id=token.user_id,
        refusal=lambda: _may_still_follow(token.pk, thread.pk),
        snapshot=lambda: _thread_status(thread.pk),
    )
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy must pass each event on at once
    return response


# --- recovering and stopping a thread -----------------------------------------------------


class RetryOut(Schema):
    thread_id: str
    run_id: str = Field(..., description="The run that goes on from the last checkpoint.")


@api.post(
    "/threads/{thread_id}/retry",
    response={202: RetryOut, 403: Problem, 404: Problem, 409: Problem},
    tags=["threads"],
    auth=BearerToken(ApiToken.Scope.START),
)
def retry_thread(request: HttpRequest, thread_id: str) -> Any:
    """Retry a failed thread from its last checkpoint; the worker runs it (202: queued).
    Its owner may, or whoever may retry any thread; 409 unless it failed and has nothing
    queued."""
    thread = _thread_or_404(request, thread_id)
    try:
        run = thread_retry(thread=thread, user=_user(request))
    except ThreadActionForbidden as exc:
        raise ApiProblem(403, str(exc)) from None
    except ThreadNotRetryable as exc:
        raise ApiProblem(409, f"Not retried: {exc}.") from None
    return Status(202, {"thread_id": str(thread.pk), "run_id": str(run.pk)})


class CancelOut(Schema):
    thread_id: str
    status: str = Field(..., description="The thread's status now: cancelled.")
    cancelled_at: datetime
    cancelled_by: str | None = Field(None, description="Who cancelled it (null: the system).")


@api.post(
    "/threads/{thread_id}/cancel",
    response={200: CancelOut, 403: Problem, 404: Problem, 409: Problem},
    tags=["threads"],
    auth=BearerToken(ApiToken.Scope.START),
)
def cancel_thread(request: HttpRequest, thread_id: str) -> Any:
    """Stop a thread for good, failing closed: its queued and running runs are cancelled
    and its pending request leaves the queue as cancelled, so no pending tool call runs.
    Its owner may, or whoever may cancel any thread; 409 when it was already cancelled or
    is done with nothing queued."""
    thread = _thread_or_404(request, thread_id)
    try:
        stopped = thread_cancel(thread=thread, user=_user(request))
    except ThreadActionForbidden as exc:
        raise ApiProblem(403, str(exc)) from None
    except ThreadNotCancellable as exc:
        raise ApiProblem(409, f"Not cancelled: {exc}.") from None
    return {
        "thread_id": str(stopped.pk),
        "status": stopped.status,
        "cancelled_at": stopped.cancelled_at,
        "cancelled_by": stopped.cancelled_by.get_username() if stopped.cancelled_by else None,
    }
