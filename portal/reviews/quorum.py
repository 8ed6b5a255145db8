"""Votes: a request whose policy needs several reviewers counts their answers.

Each answer is an ``Approval``, recorded under the request's row lock (``decision_submit``
holds it); only the vote that reaches a count closes the request (``resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from portal.errors import AlreadyVoted, InvalidDecision, when, who
from portal.models import Approval, AuditEvent, Decision, Interrupt, audit_record, policies
from portal.notify import broadcast

__all__ = ["Quorum", "already_voted", "quorum_of", "vote_record"]


@dataclass(frozen=True)
class Quorum:
    """Where a request that needs several reviewers stands: its counts and the votes so
    far, oldest first."""

    approvals_required: int
    rejections_required: int
    votes: list[Approval]

    @property
    def approvals(self) -> int:
        return sum(1 for v in self.votes if v.approves)

    @property
    def rejections(self) -> int:
        return len(self.votes) - self.approvals

    @property
    def needed(self) -> str:
        """What the request still waits for, in words: "1 more approval"."""
        more_yes = max(self.approvals_required - self.approvals, 0)
        parts = [f"{more_yes} more approval{'s' if more_yes != 1 else ''}"]
        if self.rejections_required > 1:
            more_no = max(self.rejections_required - self.rejections, 0)
            parts.append(f"{more_no} more rejection{'s' if more_no != 1 else ''} to decline it")
        return " or ".join(parts)

    def voted(self, user: Any) -> Approval | None:
        return next((v for v in self.votes if v.reviewer_id == user.pk), None)


def quorum_of(interrupt: Any) -> Quorum | None:
    """The votes on ``interrupt`` if its policy needs several reviewers, else None (no
    query then). Uses the ``approvals`` a page prefetched (with their reviewers)."""
    policy = policies.policy_of(interrupt)
    if not policy.needs_several:
        return None
    votes: list[Approval] = []
    if isinstance(interrupt, Interrupt) and interrupt.pk:
        cached = getattr(interrupt, "_prefetched_objects_cache", {}).get("approvals")
        if cached is not None:
            votes = list(cached)
        else:
            votes = list(
                Approval.objects.filter(interrupt=interrupt)
                .select_related("reviewer")
                .order_by("id")
            )
    return Quorum(policy.approvals_required, policy.rejections_required, votes)


def already_voted(mine: Approval, quorum: Quorum) -> AlreadyVoted:
    return AlreadyVoted(
        f"You already answered this request ({mine.outcome}) at {when(mine.created_at)}; "
        f"it needs {quorum.needed} from other reviewers."
    )


def _same_answer(a: Any, b: Any) -> bool:
    def bare(value: Any) -> Any:
        return {k: v for k, v in value.items() if k != "note"} if isinstance(value, dict) else value

    return bool(bare(a) == bare(b))


def vote_record(
    locked: Interrupt,
    reviewer: Any,
    value: Any,
    note: str,
    outcome: str,
    policy: policies.Policy,
    *,
    door: str = "",
) -> Approval | None:
    """Record ``reviewer``'s vote on ``locked``, as coming in at ``door`` (a
    ``Decision.Door``, sealed with the vote); caller holds the row lock. Returns it when
    the request still waits for more; None when this vote reached a count, and the caller
    goes on to record the decision with this answer."""
    votes = list(
        Approval.objects.filter(interrupt=locked).select_related("reviewer").order_by("id")
    )
    quorum = Quorum(policy.approvals_required, policy.rejections_required, votes)
    mine = quorum.voted(reviewer)
    if mine is not None:
        raise already_voted(mine, quorum)
    goes_ahead = outcome in Approval.GOES_AHEAD
    if outcome == Decision.Outcome.EDITED:
        raise InvalidDecision(
            f"This request needs {policy.approvals_required} approvals, so it can only be "
            "approved as asked or declined: an edit would go ahead with something the other "
            "approvers did not see. Nothing was recorded.",
            errors=["$: edits are not accepted on a request that needs several approvals"],
        )
    approvals = [v for v in votes if v.approves]
    if goes_ahead and approvals and not _same_answer(approvals[0].value, value):
        raise InvalidDecision(
            f"{approvals[0].reviewer.get_username()} approved a different answer; approve the "
            "same one, or decline. Nothing was recorded.",
            errors=["$: differs from the answer already approved"],
        )
    try:
        # A savepoint, so a unique violation leaves the outer transaction usable.
        with transaction.atomic():
            vote = Approval.objects.create(
                interrupt=locked,
                reviewer=reviewer,
                outcome=outcome,
                value=value,
                note=note,
                door=door,
            )
    except IntegrityError:
        raise AlreadyVoted("You already answered this request. Nothing was changed.") from None
    quorum = Quorum(policy.approvals_required, policy.rejections_required, [*votes, vote])
    if (goes_ahead and quorum.approvals >= policy.approvals_required) or (
        not goes_ahead and quorum.rejections >= policy.rejections_required
    ):
        return None
    if locked.claimed_by_id == reviewer.pk:
        # Their part is done: let the next reviewer take the request.
        locked.claimed_by, locked.claimed_at = None, None
        locked.save(update_fields=["claimed_by", "claimed_at"])
        audit_record(
            action=AuditEvent.Action.RELEASE,
            actor=reviewer,
            target=locked,
            detail={"held_by": reviewer.get_username(), "why": "answered"},
        )
    vote.needed = quorum.needed  # type: ignore[attr-defined]
    said = locked.message or "a request"
    broadcast.queue_change_on_commit(
        locked, news=f"{who(reviewer)} {outcome} “{said}”; it needs {quorum.needed}"
    )
    return vote
