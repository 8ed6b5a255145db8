"""``/api/threads``: start a thread, read it (waiting for it if asked), answer the request
it waits on, list threads, retry a failed one and cancel one. Following a thread as
server-sent events is ``portal.api.follow``."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from agents.checkpoint import ThreadStatus
from portal.accounts import access, roles
from portal.api import sql
from portal.api.auth import BearerToken, token_user
from portal.api.errors import ApiProblem, Problem
from portal.api.lookups import named_request, pending_request, thread_or_404
from portal.api.pages import AFTER_HELP, API_PAGE_MAX, LIMIT_HELP, cursor_from, next_page
from portal.api.schemas import THREAD_STATUSES, WAIT_MAX_SECONDS, ThreadOut, first_user_words
from portal.errors import (
    InputError,
    ThreadActionForbidden,
    ThreadNotCancellable,
    ThreadNotRetryable,
)
from portal.models import (
    ApiToken,
    Approval,
    Decision,
    Interrupt,
    Run,
    Thread,
    paging,
    rows,
    waiting,
)
from portal.models.db import prepared_cursor
from portal.reviews.decisions import decision_submit_for_thread
from portal.reviews.threads import thread_cancel, thread_retry, thread_start
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.registry import UnknownAgentError

router = Router(tags=["threads"])

T = TypeVar("T")


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


@router.post(
    "",
    response={200: StartOut, 202: StartOut, 403: Problem, 422: Problem},
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
    user = token_user(request)
    if not roles.can_start(user):
        raise ApiProblem(403, "Your role cannot start conversations.")
    try:
        thread, run = thread_start(agent=payload.agent, input=payload.input, user=user)
    except UnknownAgentError as exc:
        raise ApiProblem(422, str(exc), [f"$.agent: {exc}"]) from None
    except InputError as exc:
        raise ApiProblem(422, str(exc), [f"$.input: {exc}"]) from None
    return Status(202, {"thread_id": str(thread.pk), "run_id": str(run.pk)})


def _thread_busy(thread_id: Any) -> bool:
    with prepared_cursor() as cursor:
        cursor.execute(
            _statement("busy"),
            [_thread_key(thread_id), Run.Status.QUEUED, Run.Status.RUNNING],
        )
        busy = cursor.fetchone() is not None
    if busy:
        _release_connection()  # it will wait
    return busy


def _release_connection() -> None:
    # A waiting request holds no database connection between its looks (back to the pool,
    # or closed), so many waiters do not hold as many connections. Not inside a
    # transaction: a test's own would be lost.
    if not connection.in_atomic_block:
        connection.close()


async def _settled(thread_id: Any, seconds: float, answer: Callable[[], T]) -> tuple[bool, T]:
    """Wait up to ``seconds`` until nothing of the thread is queued or running: whether
    that happened, and ``answer()``. The look that finds the thread settled builds the
    answer in its own hand-off, on the connection it holds; when the time is up it is
    built as the thread is then."""
    built: list[T] = []

    def look() -> bool:
        if _thread_busy(thread_id):
            return False
        built.append(answer())
        return True

    async def settled() -> bool:
        return await sync_to_async(look)()

    if await waiting.await_until(waiting.thread_key(thread_id), settled, seconds=seconds):
        return True, built[0]
    return False, await sync_to_async(answer)()


async def _after_wait(
    request: HttpRequest, schema: type[Schema], accepted: Status[dict[str, Any]], seconds: float
) -> Any:
    """The answer to a start or a resume: ``accepted`` (202) at once without a wait; with
    one, what was recorded and the thread once settled (200) or as it is when the time is
    up (202)."""
    if not seconds:
        return accepted
    recorded = accepted.value

    def answer() -> Schema:
        # Validated whole, in a thread (the resolvers read the database): a schema built
        # apart and nested would be validated again, from its own fields, not the rows.
        return schema.model_validate(
            {**recorded, "thread": _thread_data(request, recorded["thread_id"])}
        )

    settled, built = await _settled(recorded["thread_id"], seconds, answer)
    return Status(200 if settled else 202, built)


@router.get("/{thread_id}", response={200: ThreadOut, 404: Problem})
async def get_thread(request: HttpRequest, thread_id: str, params: Query[WaitParams]) -> Any:
    """A thread's status, its messages and the request it waits on (if any).

    With ``?wait=<seconds>`` the answer waits until nothing of the thread is queued or
    running (its run paused, finished or failed), or until the seconds have passed: poll
    with it instead of polling often."""
    if not params.wait:
        return await sync_to_async(_visible_thread_out)(request, thread_id)  # one hand-off
    thread = await sync_to_async(thread_or_404)(request, thread_id)
    _, out = await _settled(thread.pk, params.wait, lambda: _thread_out(request, thread.pk))
    return out


def _visible_thread_out(request: HttpRequest, thread_id: str) -> ThreadOut:
    return _thread_out(request, thread_or_404(request, thread_id).pk)


def _thread_out(request: HttpRequest, thread_id: Any) -> ThreadOut:
    # Built here, in a thread, because the schema's resolvers may read the database.
    return ThreadOut.model_validate(_thread_data(request, thread_id))


def _thread_with_owner(thread_id: Any) -> Thread:
    """As ``Thread.objects.select_related("owner").get(pk=thread_id)``, in ``sql``'s
    statement."""
    with prepared_cursor() as cursor:
        cursor.execute(_statement("thread"), [_thread_key(thread_id)])
        found = cursor.fetchone()
    if found is None:
        raise Thread.DoesNotExist("Thread matching query does not exist.")
    split = rows.width(Thread)
    thread = rows.loaded(Thread, found[:split])
    owner = rows.loaded(get_user_model(), found[split:]) if thread.owner_id else None
    Thread.owner.field.set_cached_value(thread, owner)
    return thread


def _thread_key(thread_id: Any) -> Any:
    # The id as the database keeps it (SQLite: hex without dashes), as a filter binds it.
    return Thread._meta.pk.get_db_prep_value(thread_id, connection)


@cache
def _statements(vendor: str) -> dict[str, str]:
    user = get_user_model()
    return {
        "busy": sql.THREAD_BUSY.format(run=Run._meta.db_table),
        "thread": sql.THREAD_WITH_OWNER.format(
            thread=rows.columns(Thread, "t"),
            owner=rows.columns(user, "u"),
            thread_table=Thread._meta.db_table,
            user_table=user._meta.db_table,
        ),
    }


def _statement(name: str) -> str:
    return _statements(connection.vendor)[name]


def _thread_data(request: HttpRequest, thread_id: Any) -> dict[str, Any]:
    thread = _thread_with_owner(thread_id)
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    messages = [m for m in (snapshot.messages if snapshot else []) if m.get("role") != "system"]
    pending = None
    if snapshot is not None and snapshot.status is ThreadStatus.INTERRUPTED:
        pending_id = (snapshot.interrupt or {}).get("id")
        pending = pending_request(token_user(request), thread, pending_id)
        if pending is not None and pending.status != Interrupt.Status.PENDING:
            # The checkpoint still names the pause of a thread cancelled while it waited;
            # the request left the queue then, and nothing waits on it now.
            pending = None
        if pending is not None and pending.checkpoint_seq == snapshot.seq:
            # The snapshot holds the messages up to the request's checkpoint already.
            pending._latest_user_message = first_user_words(  # type: ignore[attr-defined]
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


@router.post(
    "/{thread_id}/resume",
    response={
        200: ResumeOut,
        202: ResumeOut,
        403: Problem,
        404: Problem,
        409: Problem,
        422: Problem,
    },
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
    user = token_user(request)
    if not roles.can_decide(user):
        raise ApiProblem(403, "Your role cannot decide requests.")
    # The request the answer names, with its thread, in one query; without one (or none
    # of this thread's that the user can see) the thread is looked up for its refusal.
    named = named_request(user, thread_id, payload.resume_interrupt_id)
    thread = named.thread if named is not None else thread_or_404(request, thread_id)
    recorded = decision_submit_for_thread(
        thread=thread,
        reviewer=user,
        value=payload.resume,
        resume_interrupt_id=payload.resume_interrupt_id,
        note=payload.note,
        named=named,
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


@router.get("", response={200: ThreadPage, 422: Problem})
def list_threads(request: HttpRequest, filters: Query[ThreadFilter]) -> Any:
    """Threads visible to you (your own, or all of them with the view-all permission),
    most recently active first. Walk the pages with ``after``; a thread that becomes
    active while you walk moves to the front, where a fresh first page shows it."""
    qs = access.visible_threads(token_user(request)).select_related("owner")
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.owner:
        qs = qs.filter(owner__username=filters.owner)
    cursor = cursor_from(filters.after, uuid.UUID)
    items, more = paging.page(qs, cursor, field="updated_at", descending=True, size=filters.limit)
    return {
        "items": items,
        "next": next_page(paging.Cursor.of(items[-1], "updated_at") if more else None),
    }


class RetryOut(Schema):
    thread_id: str
    run_id: str = Field(..., description="The run that goes on from the last checkpoint.")


@router.post(
    "/{thread_id}/retry",
    response={202: RetryOut, 403: Problem, 404: Problem, 409: Problem},
    auth=BearerToken(ApiToken.Scope.START),
)
def retry_thread(request: HttpRequest, thread_id: str) -> Any:
    """Retry a failed thread from its last checkpoint; the worker runs it (202: queued).
    Its owner may, or whoever may retry any thread; 409 unless it failed and has nothing
    queued."""
    thread = thread_or_404(request, thread_id)
    try:
        run = thread_retry(thread=thread, user=token_user(request))
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


@router.post(
    "/{thread_id}/cancel",
    response={200: CancelOut, 403: Problem, 404: Problem, 409: Problem},
    auth=BearerToken(ApiToken.Scope.START),
)
def cancel_thread(request: HttpRequest, thread_id: str) -> Any:
    """Stop a thread for good, failing closed: its queued and running runs are cancelled
    and its pending request leaves the queue as cancelled, so no pending tool call runs.
    Its owner may, or whoever may cancel any thread; 409 when it was already cancelled or
    is done with nothing queued."""
    thread = thread_or_404(request, thread_id)
    try:
        stopped = thread_cancel(thread=thread, user=token_user(request), door=Decision.Door.API)
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
