"""``/api/interrupts``: the requests agents raise, and claiming, releasing and withdrawing
one. Answering goes through the thread (``POST /api/threads/{id}/resume``)."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.pagination import paginate

from portal.api.auth import BearerToken, token_user
from portal.api.errors import ApiProblem, Problem
from portal.api.lookups import interrupt_or_404, visible_interrupts
from portal.api.pages import InterruptPage
from portal.api.schemas import InterruptOut
from portal.errors import InterruptNotPending
from portal.models import ApiToken, Decision
from portal.notify.assignments import assigned_to
from portal.reviews.claims import interrupt_claim, interrupt_unclaim
from portal.reviews.threads import interrupt_withdraw

router = Router(tags=["interrupts"])


class InterruptFilter(Schema):
    status: Literal["pending", "resolved", "cancelled", "expired"] | None = None
    assigned: Literal["me"] | None = Field(
        None,
        description="``me``: only requests assigned to you or to one of your groups "
        "(by a policy, by the agent, or by an escalation).",
    )


@router.get("", response=list[InterruptOut])
@paginate(InterruptPage)
def list_interrupts(request: HttpRequest, filters: Query[InterruptFilter]) -> Any:
    """Requests visible to you, oldest first; ``?status=pending`` for the queue and
    ``?assigned=me`` for those assigned to you. Pages hold at most 100 requests
    (``limit``); walk them with ``offset``."""
    user = token_user(request)
    qs = visible_interrupts(user)
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.assigned == "me":
        qs = qs.filter(assigned_to(user))
    return qs.order_by("created_at", "id")


@router.get(
    "/{interrupt_id}",
    response={200: InterruptOut, 404: Problem},
)
def get_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    return interrupt_or_404(request, interrupt_id)


@router.post(
    "/{interrupt_id}/claim",
    response={200: InterruptOut, 403: Problem, 404: Problem, 409: Problem},
    auth=BearerToken(ApiToken.Scope.DECIDE),
)
def claim_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Claim a pending request, so other reviewers see who is on it. 409 when someone
    else holds it (unless you may take claims over) or it is no longer pending; claiming
    your own claim again changes nothing."""
    interrupt = interrupt_or_404(request, interrupt_id)
    return interrupt_claim(interrupt=interrupt, user=token_user(request))


@router.post(
    "/{interrupt_id}/release",
    response={200: InterruptOut, 403: Problem, 404: Problem},
    auth=BearerToken(ApiToken.Scope.DECIDE),
)
def release_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Release a claim: your own, or anyone's if you may take claims over (403
    otherwise). Releasing an unclaimed request changes nothing."""
    interrupt = interrupt_or_404(request, interrupt_id)
    return interrupt_unclaim(interrupt=interrupt, user=token_user(request))


class WithdrawOut(Schema):
    interrupt_id: str
    thread_id: str
    run_id: str | None = Field(
        ...,
        description="The run that resumes the thread with a decline; null for an external "
        "agent's request, which has no graph (its agent is told instead).",
    )
    status: str = Field(..., description="The request's status now: cancelled.")


@router.post(
    "/{interrupt_id}/withdraw",
    response={202: WithdrawOut, 403: Problem, 404: Problem, 409: Problem},
    auth=BearerToken(ApiToken.Scope.START),
)
def withdraw_interrupt(request: HttpRequest, interrupt_id: str) -> Any:
    """Take back a pending request you raised by starting the thread: the agent resumes
    with a decline and says the action was not done (202: queued). Only the thread's
    owner may, with a token carrying the ``start`` scope; 409 when the request is no
    longer pending."""
    user = token_user(request)
    interrupt = interrupt_or_404(request, interrupt_id)
    if interrupt.thread.owner_id != user.pk:
        raise ApiProblem(
            403,
            "Only the person who started this thread can withdraw its request; "
            "reviewers reject it instead (POST /api/threads/{thread_id}/resume).",
        )
    try:
        run = interrupt_withdraw(interrupt=interrupt, user=user, door=Decision.Door.API)
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
