"""The portal's tables, one module per domain; this package names them all, so callers write
``from portal.models import Thread``. The models import nothing above this room: the hash
chains they seal on insert live here too (``chain``). See docs/architecture.md, "models".

Only the services of the rooms above (``portal.reviews``, the ORM checkpointer, the worker,
the notifier) write to these tables.
"""

from portal.models.audit import MAX_AUDIT_DETAIL_CHARS, AuditEvent, audit_record
from portal.models.decisions import (
    WITHDRAWN,
    WITHDRAWN_WORDS,
    Approval,
    Decision,
    ImmutableRecordError,
    outcome_name,
)
from portal.models.external import ExternalRequest
from portal.models.notifications import (
    Assignment,
    Delivery,
    DeliveryAttempt,
    Notification,
    RoutingEvent,
    Subscription,
    outbox_backlog,
)
from portal.models.requests import Interrupt, ToolCall, summary_beside, tool_calls_in
from portal.models.rules import Rule, RuleHit, RuleSimulation, RuleVersion, rule_of, rule_words
from portal.models.slack import SlackLink, SlackReplay
from portal.models.threads import TITLE_MAX_CHARS, Checkpoint, Run, Thread, conversation
from portal.models.tokens import ApiToken, password_fingerprint
from portal.models.workers import WorkerHeartbeat

__all__ = [
    "MAX_AUDIT_DETAIL_CHARS",
    "TITLE_MAX_CHARS",
    "WITHDRAWN",
    "WITHDRAWN_WORDS",
    "ApiToken",
    "Approval",
    "Assignment",
    "AuditEvent",
    "Checkpoint",
    "Decision",
    "Delivery",
    "DeliveryAttempt",
    "ExternalRequest",
    "ImmutableRecordError",
    "Interrupt",
    "Notification",
    "RoutingEvent",
    "Rule",
    "RuleHit",
    "RuleSimulation",
    "RuleVersion",
    "Run",
    "SlackLink",
    "SlackReplay",
    "Subscription",
    "Thread",
    "ToolCall",
    "WorkerHeartbeat",
    "audit_record",
    "conversation",
    "outbox_backlog",
    "outcome_name",
    "password_fingerprint",
    "rule_of",
    "rule_words",
    "summary_beside",
    "tool_calls_in",
]
