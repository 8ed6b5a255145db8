"""Approval requests from agents that run outside the portal.

``external_request_create`` raises one as an ordinary pause (a thread of its own with one
checkpoint), so the queue, history, policies and ``decision_submit`` treat it like any
other request. Its thread has no graph: an answer closes it (``external_request_close``)
and the requester hears by a signed webhook or by reading it. See docs/architecture.md,
reviews.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from agents import inbox
from agents.checkpoint import CheckpointWrite, ThreadStatus
from agents.errors import InvalidInterruptError
from agents.interrupt import MAX_REASON_CHARS, check_interrupt, fallback_summary
from agents.interrupt import Interrupt as RuntimeInterrupt
from agents.schema import json_problem, text_problem
from agents.state import new_id
from portal.accounts import roles
from portal.errors import Refused
from portal.models import (
    ApiToken,
    Decision,
    Delivery,
    ExternalRequest,
    Interrupt,
    Thread,
    audit_record,
    chain,
    rule_of,
)
from portal.notify import broadcast, outbox, targets
from portal.runs.checkpointer import DjangoCheckpointer

log = logging.getLogger(__name__)

__all__ = [
    "IdempotencyConflict",
    "RequestInvalid",
    "RequestSpec",
    "external_answer",
    "external_answer_queue",
    "external_request_close",
    "external_request_collect",
    "external_request_create",
    "is_external",
]

# The node and answer key every external request is raised at: it has no graph, so these
# only say where it came from (timelines, the audit payload).
NODE = "external"
KEY = "external:-:0"
# The longest an external request may wait for a person.
MAX_EXPIRES_IN = 30 * 24 * 3600
AGENT_MAX_CHARS = 64
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The audit trail's action for a request an external agent raised.
RAISE_ACTION = "interrupt.raise"
TITLE_MAX_CHARS = 200
CALLBACK_MAX_CHARS = 500


class RequestInvalid(Refused):
    """The request cannot be raised as sent; ``errors`` holds one line per problem."""

    status_code = 422

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = list(errors or [message])


class IdempotencyConflict(Refused):
    """The idempotency key names an earlier request that was made with other fields."""

    status_code = 409

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.errors: list[str] = []


@dataclass(frozen=True)
class RequestSpec:
    """What an external agent asks (the API's body, checked by ``external_request_create``)."""

    agent: str
    title: str = ""
    message: str = ""
    summary: str = ""
    payload: Any = None
    reason: str = "input_required"
    response_schema: dict[str, Any] | None = None
    actions: list[str] | None = None
    args: dict[str, Any] | None = None
    args_schema: dict[str, Any] | None = None
    expires_in: int | None = None
    assign_to: dict[str, list[str]] | None = None
    external_ref: str = ""
    callback_url: str = ""
    idempotency_key: str = ""
    source: str = ExternalRequest.Source.CLIENT

    def fingerprint(self) -> str:
        # The door it came through is not part of the ask (and fingerprints stored before
        # it was recorded stay valid).
        skip = {"idempotency_key", "source"}
        fields = {k: v for k, v in self.__dict__.items() if k not in skip}
        return hashlib.sha256(chain.canonical(fields).encode()).hexdigest()


def _text(errors: list[str], name: str, value: str, limit: int, *, required: bool = False) -> None:
    if required and not value.strip():
        errors.append(f"$.{name}: required (it is empty)")
    elif len(value) > limit:
        errors.append(f"$.{name}: {len(value):,} characters, over the limit of {limit:,}")
    elif (bad := text_problem(value)) is not None:
        errors.append(f"$.{name}: {bad}")


def _check_agent(errors: list[str], agent: str) -> None:
    before = len(errors)
    _text(errors, "agent", agent, AGENT_MAX_CHARS, required=True)
    if len(errors) > before:
        return
    # Policies and the queue's filters go by name: an outside agent must not pass for one
    # the portal runs, so no spaces, invisible characters or other case to hide behind.
    if not AGENT_NAME.fullmatch(agent):
        errors.append(
            f"$.agent: {agent!r} is not a plain name; use letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    elif agent.lower() in {name.lower() for name in settings.PORTAL_AGENTS}:
        errors.append(
            f"$.agent: {agent!r} is an agent this portal runs itself; give your agent a "
            "name of its own"
        )


def _check_callback(errors: list[str], url: str) -> None:
    if not url:
        return
    if len(url) > CALLBACK_MAX_CHARS:
        errors.append(
            f"$.callback_url: {len(url):,} characters, over the limit of {CALLBACK_MAX_CHARS}"
        )
        return
    # The rule every outgoing target keeps (portal.notify.targets).
    if (problem := targets.url_problem(url)) is not None:
        errors.append(f"$.callback_url: {problem}")


def _check_size(errors: list[str], name: str, value: Any) -> None:
    if (bad := json_problem(value)) is not None:
        errors.append(f"$.{name}{bad.removeprefix('$')}")
        return
    size = len(json.dumps(value, separators=(",", ":")).encode())
    limit = settings.PORTAL_MAX_INPUT_BYTES
    if size > limit:
        errors.append(
            f"$.{name}: {size:,} bytes of JSON, over the limit of {limit:,} "
            "(PORTAL_MAX_INPUT_BYTES)"
        )


def _check_message(errors: list[str], message: str) -> None:
    # Shown whole on the request's page and in the queue's search: the same bound as the
    # payload's, on its text as stored.
    size = len(message.encode("utf-8", "surrogatepass"))
    limit = settings.PORTAL_MAX_INPUT_BYTES
    if size > limit:
        errors.append(
            f"$.message: {size:,} bytes of text, over the limit of {limit:,} "
            "(PORTAL_MAX_INPUT_BYTES); link to the detail instead"
        )


def _assignees(errors: list[str], assign_to: dict[str, list[str]] | None) -> list[str]:
    """The request's assignees as the routing reads them from its checkpoint, as an
    in-process ``interrupt()`` names them: ``user:<name>`` and ``group:<name>``."""
    if not assign_to:
        return []
    users = sorted(set(assign_to.get("users") or []))
    groups = sorted(set(assign_to.get("groups") or []))
    User = get_user_model()
    found = set(
        User.objects.filter(**{f"{User.USERNAME_FIELD}__in": users}).values_list(
            User.USERNAME_FIELD, flat=True
        )
    )
    for name in users:
        if name not in found:
            errors.append(f"$.assign_to.users: there is no user {name!r}")
    known = set(Group.objects.filter(name__in=groups).values_list("name", flat=True))
    for name in groups:
        if name not in known:
            errors.append(f"$.assign_to.groups: there is no group {name!r}")
    return [f"user:{name}" for name in users] + [f"group:{name}" for name in groups]


def _runtime_interrupt(
    spec: RequestSpec, assign_to: list[str], errors: list[str]
) -> RuntimeInterrupt | None:
    schema = spec.response_schema
    if spec.actions is not None:
        if schema is not None:
            errors.append(
                "$.actions: give either actions or response_schema, not both: the actions "
                "define the answer's schema (use args_schema for what an edit must fit)"
            )
            return None
        try:
            schema = inbox.response_schema(
                spec.actions, args=spec.args, args_schema=spec.args_schema
            )
        except ValueError as exc:
            errors.append(f"$.actions: {exc}")
            return None
    elif spec.args is not None or spec.args_schema is not None:
        errors.append("$.args: arguments to edit go with actions that include 'edit'")
        return None
    request = RuntimeInterrupt(
        id=new_id("int"),
        key=KEY,
        node=NODE,
        value=spec.payload,
        message=spec.message or None,
        reason=spec.reason,
        response_schema=schema,
        assign_to=assign_to or None,
        # As interrupt() does for an agent that wrote no summary of its own.
        summary=spec.summary or fallback_summary(spec.message, spec.reason),
    )
    try:
        check_interrupt(request)
    except InvalidInterruptError as exc:
        for problem in exc.context.get("problems") or [str(exc)]:
            # The runtime names the interrupt's fields ("value $.a: ..."); say them as the
            # API's body does.
            field, _, rest = problem.partition(" ")
            name = "payload" if field == "value" else field
            if rest.startswith("$"):
                errors.append(f"$.{name}{rest[1:]}")
            else:
                errors.append(f"$.{name}: {rest}")
        return None
    return request


def _expiry(spec: RequestSpec, now: datetime, errors: list[str]) -> datetime | None:
    if spec.expires_in is None:
        return None
    if not 1 <= spec.expires_in <= MAX_EXPIRES_IN:
        errors.append(
            f"$.expires_in: {spec.expires_in} seconds; give 1 to {MAX_EXPIRES_IN:,} (30 days)"
        )
        return None
    return now + timedelta(seconds=spec.expires_in)


def _existing(user: Any, spec: RequestSpec) -> ExternalRequest | None:
    found = (
        ExternalRequest.objects.select_related("interrupt", "interrupt__thread")
        .filter(requester=user, idempotency_key=spec.idempotency_key)
        .first()
    )
    if found is not None and found.fingerprint != spec.fingerprint():
        raise IdempotencyConflict(
            f"The idempotency key {spec.idempotency_key!r} was used for request "
            f"{found.interrupt_id} with other fields; use a new key for a new request."
        )
    return found


def external_request_create(
    *, user: Any, spec: RequestSpec, token: ApiToken | None = None
) -> tuple[ExternalRequest, bool]:
    """Raise ``spec`` as a pending request of ``user`` (who may ``raise_request``).

    Returns (the request, whether it was created now): the same ``idempotency_key`` again
    returns the first request, also when both arrive at once (a unique constraint decides).
    Raises ``RequestInvalid`` (422, one line per problem), ``IdempotencyConflict`` (409,
    the key was used with other fields) or ``PermissionError``.
    """
    if not roles.can_raise_requests(user):
        raise PermissionError("Your role cannot raise approval requests.")
    if spec.idempotency_key and (found := _existing(user, spec)) is not None:
        return found, False
    now = timezone.now()
    errors: list[str] = []
    _check_agent(errors, spec.agent)
    _text(errors, "title", spec.title, TITLE_MAX_CHARS)
    _text(errors, "external_ref", spec.external_ref, 200)
    _text(errors, "idempotency_key", spec.idempotency_key, 200)
    if len(spec.reason) > MAX_REASON_CHARS:
        errors.append(
            f"$.reason: {len(spec.reason)} characters, over the limit of {MAX_REASON_CHARS}; "
            "use a short label and put the detail in the message"
        )
    _check_size(errors, "payload", spec.payload)
    _check_message(errors, spec.message)
    _check_callback(errors, spec.callback_url)
    if spec.source not in ExternalRequest.Source.values:
        errors.append(
            f"$.source: {spec.source!r} is not one the portal knows; give one of "
            + ", ".join(repr(s) for s in ExternalRequest.Source.values)
        )
    if spec.callback_url and not (token is not None and token.webhook_secret):
        # Fail closed: an unsigned answer could not be told from anyone else's.
        errors.append(
            "$.callback_url: this token has no webhook secret to sign the answer with; "
            "make one with manage.py create_api_token USER --scope request"
        )
    expires_at = _expiry(spec, now, errors)
    assign_to = _assignees(errors, spec.assign_to)
    request = None if errors else _runtime_interrupt(spec, assign_to, errors)
    if errors or request is None:
        raise RequestInvalid(f"The request was not raised: {'; '.join(errors)}.", errors)
    try:
        with transaction.atomic():
            thread = Thread.objects.create(
                agent=spec.agent,
                owner=user,
                title=spec.title or Thread.title_from(spec.message or spec.agent),
                status=Thread.Status.IDLE,
            )
            pause = CheckpointWrite(
                status=ThreadStatus.INTERRUPTED,
                next_node=None,
                interrupt=request.to_dict(),
                node=NODE,
            )
            DjangoCheckpointer().put_sync(str(thread.pk), pause, parent_seq=None)
            interrupt = Interrupt.objects.get(pk=request.id)
            if expires_at is not None and (
                interrupt.expires_at is None or expires_at < interrupt.expires_at
            ):
                # The earlier of the policy's expiry and the requester's wins.
                interrupt.expires_at = expires_at
                interrupt.save(update_fields=["expires_at"])
            row = ExternalRequest.objects.create(
                interrupt=interrupt,
                requester=user,
                token=token,
                idempotency_key=spec.idempotency_key,
                fingerprint=spec.fingerprint(),
                external_ref=spec.external_ref,
                source=spec.source,
                callback_url=spec.callback_url,
                callback_secret=(token.webhook_secret if token is not None else ""),
            )
            audit_record(
                action=RAISE_ACTION,
                actor=user,
                target=interrupt,
                detail={
                    "agent": spec.agent,
                    "external_ref": spec.external_ref,
                    "source": spec.source,
                    "token": token.pk if token is not None else None,
                    "callback": urlsplit(spec.callback_url).hostname or "",
                },
            )
    except IntegrityError:
        # The race: the same key sent twice at once. Both passed the lookup above; the
        # unique constraint let one commit, and this one's thread and pause rolled back.
        found = _existing(user, spec) if spec.idempotency_key else None
        if found is None:
            raise
        return found, False
    return row, True


def is_external(interrupt_id: str, *, node: str | None = None) -> bool:
    """Whether the request was raised by an outside agent. ``node``: the request's, when
    in hand: every outside agent's request has ``NODE``, so any other needs no query."""
    if node is not None and node != NODE:
        return False
    return ExternalRequest.objects.filter(interrupt_id=interrupt_id).exists()


def external_request_close(*, thread: Thread, interrupt_id: str) -> None:
    """Close an external request's thread once its request was answered, in the caller's
    transaction (the decision service's): its last checkpoint says it is done, where an
    in-process thread would get a resume, and the requester's webhook is queued."""
    # The checkpointer's compare-and-swap on last_seq guards the write; nothing else
    # writes into this thread (it has no graph and takes no follow-ups).
    last = Thread.objects.filter(pk=thread.pk).values_list("last_seq", flat=True).get()
    done = CheckpointWrite(
        status=ThreadStatus.DONE, next_node=None, node=NODE, meta={"answered": interrupt_id}
    )
    DjangoCheckpointer().put_sync(str(thread.pk), done, parent_seq=last)
    external_answer_queue(interrupt_id)
    # Whoever follows the thread (its pages, the API's event stream) learns it is done,
    # as a worker's finished run would tell them.
    transaction.on_commit(
        partial(broadcast.publish_thread_status, thread.pk, Thread.Status.DONE), robust=True
    )


def external_answer_queue(interrupt_id: str) -> None:
    """Queue the answer for the requester's callback URL, when it gave one, in the
    decision's transaction. ``external_request_close`` calls it, and so does whatever
    ends a request without closing its thread (a cancelled thread's requests). The
    outbox signs it with the token's webhook secret and retries it until the receiver
    takes it, so a receiver that is down delays the answer but never blocks the decision
    nor loses the answer."""
    request = ExternalRequest.objects.select_related("interrupt", "interrupt__thread").get(
        pk=interrupt_id
    )
    if not request.callback_url:
        return
    # Named as the portal's own notification of the same decision is (outbox).
    decision = Decision.objects.select_related("thread").get(interrupt_id=interrupt_id)
    kind = outbox.REQUEST_DECIDED
    if decision.outcome == Decision.Outcome.EXPIRED:
        kind = outbox.REQUEST_EXPIRED
    elif decision.is_withdrawal():
        kind = outbox.REQUEST_WITHDRAWN
    target = outbox.Target.webhook(request.callback_url, secret=request.callback_secret)
    try:
        target.check()
    except outbox.TargetError as exc:
        # Taken when the request was raised, refused since (PORTAL_ALLOW_PRIVATE_TARGETS
        # turned off): the answer stands and is read by long-poll; no webhook is posted.
        log.warning("request %s: its callback is not posted to: %s", request.pk, exc)
        return
    outbox.outbox_enqueue(
        kind=kind, payload=external_answer(request), interrupt=request.interrupt, to=target
    )


# What a request's ``Interrupt.status`` means to the requester.
_STATES: dict[str, str] = {
    Interrupt.Status.PENDING: "pending",
    Interrupt.Status.RESOLVED: "decided",
    Interrupt.Status.EXPIRED: "expired",
    Interrupt.Status.CANCELLED: "cancelled",
}


def _iso(moment: datetime) -> str:
    # As the API writes times, so the webhook and the long-poll say the same. The API
    # reads this text back and writes it again, to the millisecond and with no fraction
    # when that is 0: cut to the millisecond first, so both say ".000" or neither does.
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return str(DjangoJSONEncoder().default(moment))


def request_state(interrupt: Interrupt) -> str:
    """What the request's status means to its requester: pending, decided, expired or
    cancelled."""
    return _STATES.get(interrupt.status, interrupt.status)


def external_answer(request: ExternalRequest) -> dict[str, Any]:
    """The request and, once it left the queue, its answer: what the long-poll returns
    and the webhook carries. ``answer.audit_hash`` is the decision's place in the audit
    hash chain (``manage.py verify_audit``)."""
    interrupt = request.interrupt
    decision = (
        Decision.objects.select_related("reviewer", "rule_version__rule")
        .filter(interrupt_id=interrupt.pk)
        .first()
        if interrupt.status != Interrupt.Status.PENDING
        else None
    )
    answer = None
    if decision is not None:
        answer = {
            "outcome": decision.outcome,
            "value": decision.value,
            "note": decision.note,
            "decided_by": decision.reviewer.get_username() if decision.reviewer else None,
            "decided_at": _iso(decision.created_at),
            "decision_id": decision.pk,
            "audit_hash": decision.hash,
            "rule": rule_of(decision),
        }
    return {
        "id": interrupt.pk,
        "status": request_state(interrupt),
        "agent": interrupt.agent,
        "reason": interrupt.reason,
        "title": interrupt.thread.title,
        "external_ref": request.external_ref,
        "source": request.source,
        "thread_id": str(interrupt.thread_id),
        "created_at": _iso(interrupt.created_at),
        "expires_at": _iso(interrupt.expires_at) if interrupt.expires_at else None,
        "answer": answer,
    }


def with_collection(queryset: QuerySet[ExternalRequest]) -> QuerySet[ExternalRequest]:
    """``queryset`` with ``delivered``: whether the answer's webhook reached its receiver
    (which collects it as surely as reading it does)."""
    sent = Delivery.objects.filter(
        notification__interrupt_id=OuterRef("pk"),
        target=OuterRef("callback_url"),
        status=Delivery.Status.SENT,
    )
    return queryset.annotate(delivered=Exists(sent))


def external_request_collect(request: ExternalRequest) -> None:
    """Note that the answer reached the agent (the first time only)."""
    if request.collected_at is None:
        now = timezone.now()
        ExternalRequest.objects.filter(pk=request.pk, collected_at__isnull=True).update(
            collected_at=now
        )
        request.collected_at = now


def external_request_for(*, user: Any, request_id: str) -> ExternalRequest | None:
    """The external request ``request_id`` if ``user`` raised it."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return (
        ExternalRequest.objects.select_related("interrupt", "interrupt__thread")
        .filter(pk=request_id, requester=user)
        .first()
    )


def external_request_settled(request_id: str) -> bool:
    """Whether the request left the queue (decided, expired or withdrawn)."""
    return not Interrupt.objects.filter(pk=request_id, status=Interrupt.Status.PENDING).exists()
