"""Threads: start one, write into it, retry it, cancel it; and withdraw one request.

Every function is keyword-only and named ``<thing>_<verb>``; write paths lock what they
read-then-write and leave waking workers and broadcasts to ``transaction.on_commit``.
A request leaves the queue here through ``resolve``, as everywhere.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.accounts import roles
from portal.errors import (
    InputError,
    InterruptNotPending,
    NotThreadOwner,
    ThreadActionForbidden,
    ThreadNotCancellable,
    ThreadNotRetryable,
    when,
    who,
)
from portal.inputs import check_input
from portal.models import (
    AuditEvent,
    Decision,
    ExternalRequest,
    Interrupt,
    Run,
    Thread,
    audit_record,
    waiting,
)
from portal.notify import broadcast
from portal.reviews.resolve import resolve
from portal.runs.queue import enqueue
from portal.runs.registry import UnknownAgentError, get_agent_builder

__all__ = [
    "InputError",
    "InterruptNotPending",
    "NotThreadOwner",
    "ThreadActionForbidden",
    "ThreadNotCancellable",
    "ThreadNotRetryable",
    "UnknownAgentError",
    "interrupt_withdraw",
    "thread_cancel",
    "thread_continue",
    "thread_message",
    "thread_retry",
    "thread_start",
]


def _user_or_none(user: Any) -> Any:
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def validate_start_input(data: Any) -> dict[str, list[dict[str, str]]]:
    """The input of a new turn, normalised; ``InputError`` naming the first problem."""
    if not isinstance(data, dict):
        raise InputError(
            f'input must be an object like {{"messages": [{{"role": "user", "content": "..."}}]}}'
            f", got {type(data).__name__}"
        )
    check_input(data, "input")
    extra = sorted(set(data) - {"messages"})
    if extra:
        raise InputError(f"input has unexpected keys {extra}: only 'messages' is accepted")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError("input has no messages: give a non-empty list under 'messages'")
    clean = []
    for n, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise InputError(f"message {n} must be an object, got {type(message).__name__}")
        role = message.get("role")
        if role != "user":
            raise InputError(
                f"message {n} has role {role!r}: only 'user' messages can be sent to an agent"
            )
        if "content" not in message or message["content"] is None:
            raise InputError(f"message {n} has no content")
        content = message["content"]
        if not isinstance(content, str):
            raise InputError(f"message {n} content must be a string, got {type(content).__name__}")
        if not content.strip():
            raise InputError(f"message {n} has no content (it is empty)")
        clean.append({"role": "user", "content": content})
    return {"messages": clean}


def thread_start(*, agent: str, input: Any, user: Any) -> tuple[Thread, Run]:
    """Create a thread for ``agent`` and queue its first run.

    Raises ``UnknownAgentError`` for an unregistered agent and ``InputError`` for input
    that is not ``{"messages": [{"role": "user", "content": str}, ...]}`` or is larger
    than ``PORTAL_MAX_INPUT_BYTES``.
    """
    get_agent_builder(agent)
    clean = validate_start_input(input)
    with transaction.atomic():
        author = _user_or_none(user)
        thread = Thread.objects.create(
            agent=agent,
            owner=author,
            title=Thread.title_from(clean["messages"][0]["content"]),
            status=Thread.Status.IDLE,
        )
        run = enqueue(thread=thread, kind=Run.Kind.START, input=clean, author=author)
    return thread, run


def interrupt_withdraw(*, interrupt: Interrupt, user: Any, door: str = "") -> Run | None:
    """Withdraw a pending request: the thread resumes with ``None`` (the tool declines)
    and goes on. (``thread_cancel`` stops the whole thread instead.) ``door`` is where it
    came in (a ``Decision.Door``), sealed with the decision and in the audit event.

    Raises ``InterruptNotPending`` when it was already decided, cancelled or expired.
    """
    with transaction.atomic():
        # Row lock: a reviewer's decision and this cancellation may arrive together; the
        # second to take the lock sees the first one's status and is refused. Only the
        # request's row (of=self): thread_cancel locks the thread, then its requests.
        locked = (
            Interrupt.objects.select_for_update(of=("self",))
            .select_related("thread")
            .get(pk=interrupt.pk)
        )
        if locked.status != Interrupt.Status.PENDING:
            raise InterruptNotPending(
                f"request {locked.pk} is already {locked.status}: there is nothing to cancel"
            )
        decision, run = resolve(
            locked,
            status=Interrupt.Status.CANCELLED,
            outcome=Decision.Outcome.CANCELLED,
            value=None,
            by=_user_or_none(user),
            at=timezone.now(),
            door=door,
        )
        audit_record(
            action=(
                AuditEvent.Action.WITHDRAW
                if decision.is_withdrawal(locked.thread)
                else AuditEvent.Action.CANCEL
            ),
            actor=user,
            target=locked,
            detail={"thread": str(locked.thread_id), "decision": decision.pk, "door": door},
        )
    interrupt.status, interrupt.resolved_at = locked.status, locked.resolved_at
    return run


def thread_continue(*, thread: Thread, user: Any) -> Run:
    """Retry a failed thread from its last checkpoint.

    Raises ``ThreadNotRetryable`` unless the thread failed and has no run waiting.
    """
    with transaction.atomic():
        # Row lock: two retry clicks at once would otherwise queue two runs for one thread.
        locked = Thread.objects.select_for_update().get(pk=thread.pk)
        if locked.status != Thread.Status.FAILED:
            raise ThreadNotRetryable(
                f"thread {locked.pk} is {locked.status}: only a failed thread can be retried"
            )
        busy = Run.objects.filter(
            thread=locked, status__in=[Run.Status.QUEUED, Run.Status.RUNNING]
        ).exists()
        if busy:
            raise ThreadNotRetryable(f"thread {locked.pk} already has a run queued or running")
        failed = locked.runs.order_by("-created_at").first()
        if failed is not None and not failed.checkpoints.exists():
            # The run failed before any step of it reached the database (a thread's first
            # turn, or a run whose worker kept dying before its first step was written):
            # its input was never applied, so the retry sends it again.
            payload: dict[str, Any] = (
                failed.input if isinstance(failed.input, dict) else {"messages": []}
            )
            author = failed.author_id  # the messages sent again are still theirs
        else:
            payload, author = {"messages": []}, None
        run = enqueue(thread=locked, kind=Run.Kind.CONTINUE, input=payload, author_id=author)
    return run


def thread_retry(*, thread: Thread, user: Any) -> Run:
    """Retry a failed thread from its last checkpoint, on behalf of ``user``: the thread
    page, the API and the admin's bulk action all come here.

    ``user`` must own the thread or may retry any (``roles.may_retry``), else
    ``ThreadActionForbidden``; ``ThreadNotRetryable`` unless the thread failed and has no
    run waiting (see ``thread_continue``, which does the work).
    """
    if not roles.may_retry(user, thread):
        raise ThreadActionForbidden(
            "Only the person who started this conversation, or someone allowed to retry "
            "any thread (portal.retry_thread), can retry it."
        )
    with transaction.atomic():
        run = thread_continue(thread=thread, user=user)
        audit_record(
            action=AuditEvent.Action.THREAD_RETRY,
            actor=user,
            target=thread,
            detail={"run": str(run.pk)},
        )
    return run


def thread_cancel(*, thread: Thread, user: Any, door: str = "") -> Thread:
    """Cancel ``thread`` for good, failing closed: its queued and running runs are
    cancelled, its pending request leaves the queue as a cancelled decision (the thread is
    not resumed), and it is marked ``cancelled`` with who did it and when.

    A worker already running one of its runs can record no further step: the
    checkpointer's compare-and-swap refuses writes to a cancelled thread, and a tool
    call runs only after it has been recorded. So no pending tool call runs afterwards.

    ``door`` (a ``Decision.Door``) is where it came in, sealed with each cancelled
    request's decision and in the audit event. ``user`` must own the thread or may cancel
    any (``roles.may_cancel``), else ``ThreadActionForbidden``. ``ThreadNotCancellable``
    when it was already cancelled, or is done with nothing queued (nothing to stop).
    """
    if not roles.may_cancel(user, thread):
        raise ThreadActionForbidden(
            "Only the person who started this conversation, or someone allowed to cancel "
            "any thread (portal.cancel_thread), can cancel it."
        )
    who_did = _user_or_none(user)
    now = timezone.now()

    def pending_requests() -> list[Interrupt]:
        return list(
            Interrupt.objects.select_for_update(of=("self",))
            .filter(thread_id=thread.pk, status=Interrupt.Status.PENDING)
            .order_by("created_at")
        )

    with transaction.atomic():
        # Row locks on its pending requests first, then its unfinished runs, then the
        # thread: a decision locks its request and then (an external agent's) writes the
        # thread, and a worker finishing a run locks the run and then the thread, so
        # taking the thread earlier would deadlock with either.
        pending_requests()
        list(
            Run.objects.select_for_update(no_key=True)
            .filter(thread_id=thread.pk, status__in=[Run.Status.QUEUED, Run.Status.RUNNING])
            .values_list("pk", flat=True)
        )
        # Row lock on the thread (NO KEY: a decision being recorded inserts a run that
        # references this row and must not wait for us while we wait for its request).
        # The races: a worker's next checkpoint write (its compare-and-swap updates this
        # row, so it waits here, then matches nothing), a retry or follow-up queuing a
        # run, a second cancellation.
        locked = Thread.objects.select_for_update(no_key=True).get(pk=thread.pk)
        if locked.cancelled_at is not None:
            raise ThreadNotCancellable(
                f"thread {locked.pk} was already cancelled by {who(locked.cancelled_by)} "
                f"at {when(locked.cancelled_at)}"
            )
        # The pending requests again, now that no step can be written: one a run paused
        # on since the first look. The race: a reviewer deciding one now. Who locks it
        # first wins; if the decision did, it is no longer pending here, and the resume it
        # queued is among the runs cancelled below (read after the wait).
        pending = pending_requests()
        unfinished = Run.objects.filter(
            thread=locked, status__in=[Run.Status.QUEUED, Run.Status.RUNNING]
        )
        if locked.status == Thread.Status.DONE and not pending and not unfinished.exists():
            raise ThreadNotCancellable(
                f"thread {locked.pk} is done and has nothing queued: there is nothing to cancel"
            )
        by_whom = who(who_did)
        cancelled_runs = list(unfinished.values_list("pk", flat=True))
        Run.objects.filter(pk__in=cancelled_runs).update(
            status=Run.Status.CANCELLED,
            finished_at=now,
            lease_expires_at=None,
            error=f"cancelled by {by_whom} at {when(now)}",
        )
        for request in pending:
            resolve(
                request,
                status=Interrupt.Status.CANCELLED,
                outcome=Decision.Outcome.CANCELLED,
                value=None,
                by=who_did,
                note=f"The conversation was cancelled by {by_whom}.",
                at=now,
                resume=False,
                door=door,
            )
        locked.status, locked.cancelled_at, locked.cancelled_by = (
            Thread.Status.CANCELLED,
            now,
            who_did,
        )
        locked.save(update_fields=["status", "cancelled_at", "cancelled_by", "updated_at"])
        audit_record(
            action=AuditEvent.Action.THREAD_CANCEL,
            actor=user,
            target=locked,
            detail={
                "runs": sorted(str(pk) for pk in cancelled_runs),
                "requests": [request.pk for request in pending],
                "door": door,
            },
        )
        # Whoever waits for the thread's work to settle (the API's ?wait=) is answered.
        waiting.changed(waiting.thread_key(locked.pk))
        transaction.on_commit(
            lambda: broadcast.publish_thread_status(locked.pk, Thread.Status.CANCELLED),
            robust=True,
        )
    return locked


def thread_message(*, thread: Thread, text: str, user: Any) -> Run:
    """Queue a new user turn on a finished thread (the support chat's follow-up).

    Only the thread's owner may write into it (``NotThreadOwner`` otherwise): separation
    of duties trusts that nobody else's words reach the agent. Raises ``InputError`` for
    an empty or oversized message and ``ThreadNotRetryable`` unless the thread is done
    with no run waiting: a new turn goes on only after the previous one finished (a
    failed thread is retried with ``thread_continue``). The run records its author.
    """
    author = _user_or_none(user)
    if author is None or thread.owner_id != author.pk:
        raise NotThreadOwner(
            "Only the person who started this conversation can write into it; "
            "start a new conversation instead."
        )
    clean = validate_start_input({"messages": [{"role": "user", "content": text}]})
    if ExternalRequest.objects.filter(interrupt__thread=thread).exists():
        raise ThreadNotRetryable(
            "This thread holds an external agent's request; that agent runs elsewhere and "
            "takes no messages here."
        )
    with transaction.atomic():
        # Row lock: two sends at once (a double click) would otherwise queue two turns
        # built on the same checkpoint.
        locked = Thread.objects.select_for_update().get(pk=thread.pk)
        if locked.status != Thread.Status.DONE:
            raise ThreadNotRetryable(
                f"thread {locked.pk} is {locked.status}: wait until it has finished "
                "before sending another message"
            )
        busy = Run.objects.filter(
            thread=locked, status__in=[Run.Status.QUEUED, Run.Status.RUNNING]
        ).exists()
        if busy:
            raise ThreadNotRetryable(f"thread {locked.pk} already has a run queued or running")
        # A new turn runs like the first one: its messages are the run's input.
        run = enqueue(thread=locked, kind=Run.Kind.START, input=clean, author=author)
    return run
