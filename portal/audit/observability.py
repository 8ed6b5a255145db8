"""What an operator's monitoring reads: ``/healthz`` and the Prometheus metrics.

Every number is computed from the database when it is asked for, never counted in a
process: the portal runs as several web processes and workers, and any of them may answer
a scrape, so a counter kept in memory would be one process's share. Counters are counts of
rows that are never deleted (decisions) or rarely (runs go with their thread); histograms
are conditional counts over the same rows. A scrape is a handful of grouped queries.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.db.models.functions import Now
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from portal.models import (
    WITHDRAWN,
    Decision,
    Delivery,
    Interrupt,
    Notification,
    RuleHit,
    Run,
    WorkerHeartbeat,
    outbox_backlog,
)

__all__ = ["CONTENT_TYPE_LATEST", "Health", "health", "metrics_text", "token_matches"]

# Upper bounds, in seconds, of the histogram buckets ("+Inf" is added).
DECISION_BUCKETS = (60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)
RUN_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 1800)


# --- health ---------------------------------------------------------------------------


@dataclass
class Health:
    checks: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "unhealthy",
            "problems": self.problems,
            **self.checks,
        }


def _failure(exc: BaseException) -> str:
    # The kind of failure only: this endpoint answers anyone, and an exception's text can
    # name hosts, users and paths.
    return type(exc).__name__


def _check_database(report: Health) -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        report.checks["database"] = "unreachable"
        report.problems.append(f"database: unreachable ({_failure(exc)})")
        return False
    report.checks["database"] = "ok"
    return True


def _check_redis(report: Health) -> None:
    if not settings.REDIS_URL:
        report.checks["redis"] = "not configured"
        return
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2, retry_on_timeout=False
    )
    try:
        client.ping()
    except Exception as exc:
        report.checks["redis"] = "unreachable"
        report.problems.append(f"redis: unreachable ({_failure(exc)})")
    else:
        report.checks["redis"] = "ok"
    finally:
        client.close()


def heartbeat_ages() -> dict[str, dict[str, float]]:
    """Seconds since each loop's last heartbeat, by kind (run worker, notifier) and name,
    on the database's clock."""
    age = ExpressionWrapper(Now() - F("beat_at"), output_field=DurationField())
    out: dict[str, dict[str, float]] = {kind: {} for kind in WorkerHeartbeat.Kind.values}
    for name, kind, value in WorkerHeartbeat.objects.annotate(age=age).values_list(
        "name", "kind", "age"
    ):
        out.setdefault(kind, {})[name] = max(_seconds(value), 0.0)
    return out


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value or 0) / 1_000_000  # SQLite hands durations back in microseconds


# (check name, heartbeat kind, what one is called, its limit's setting)
_LOOPS = (
    ("workers", WorkerHeartbeat.Kind.WORKER, "worker", "PORTAL_HEALTH_WORKER_MAX_AGE"),
    ("notifiers", WorkerHeartbeat.Kind.NOTIFIER, "notifier", "PORTAL_HEALTH_NOTIFIER_MAX_AGE"),
)


def _check_loops(report: Health) -> None:
    by_kind = heartbeat_ages()
    for check, kind, one, setting in _LOOPS:
        limit = getattr(settings, setting)
        ages = by_kind.get(kind, {})
        freshest = min(ages.values()) if ages else None
        report.checks[check] = {
            "count": len(ages),
            "freshest_heartbeat_age_seconds": round(freshest, 3) if freshest is not None else None,
            "max_age_seconds": limit or None,
        }
        if not limit:
            continue
        if freshest is None:
            report.problems.append(f"{check}: no {one} has sent a heartbeat")
        elif freshest > limit:
            report.problems.append(
                f"{check}: the freshest heartbeat is {freshest:.0f} s old, over the limit of "
                f"{limit} s ({setting})"
            )


def health() -> Health:
    """The database, Redis when configured, and the run workers' and notifiers'
    heartbeats."""
    report = Health()
    database = _check_database(report)
    _check_redis(report)
    if database:
        _check_loops(report)
    return report


# --- metrics --------------------------------------------------------------------------


def token_matches(header: str) -> bool:
    """Whether an ``Authorization`` header carries ``PORTAL_METRICS_TOKEN``."""
    expected = settings.PORTAL_METRICS_TOKEN
    scheme, _, token = header.partition(" ")
    if not expected or scheme.lower() != "bearer" or not token.strip():
        return False
    return hmac.compare_digest(token.strip().encode(), expected.encode())


def _outbox(now: Any) -> Iterator[Metric]:
    counts = outbox_backlog()
    backlog = GaugeMetricFamily(
        "portal_outbox_backlog",
        "Notifications still owed: not yet fanned out to subscriptions (undispatched), "
        "and deliveries not yet sent, retries included (pending).",
        labels=["stage"],
    )
    for stage in ("undispatched", "pending"):
        backlog.add_metric([stage], counts[stage])
    yield backlog
    yield GaugeMetricFamily(
        "portal_outbox_given_up",
        "Deliveries whose every attempt failed (the admin's delivery log says why).",
        value=counts["failed"],
    )
    owed = [
        Notification.objects.filter(dispatched_at__isnull=True).aggregate(at=Min("created_at")),
        Delivery.objects.filter(status=Delivery.Status.PENDING).aggregate(at=Min("created_at")),
    ]
    known = [row["at"] for row in owed if row["at"] is not None]
    yield GaugeMetricFamily(
        "portal_outbox_oldest_age_seconds",
        "How long the oldest notification still owed has waited (0 when none is).",
        value=max((now - min(known)).total_seconds(), 0.0) if known else 0.0,
    )


def _waited(end: str, start: str) -> ExpressionWrapper[Any]:
    return ExpressionWrapper(F(end) - F(start), output_field=DurationField())


def _histogram_counts(bounds: tuple[float, ...]) -> dict[str, Any]:
    counts: dict[str, Any] = {
        f"le{i}": Count("pk", filter=Q(waited__lte=timedelta(seconds=b)))
        for i, b in enumerate(bounds)
    }
    counts["count"] = Count("pk")
    counts["sum"] = Sum("waited")
    return counts


def _buckets(row: dict[str, Any], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    out = [(_le(b), float(row[f"le{i}"])) for i, b in enumerate(bounds)]
    return [*out, ("+Inf", float(row["count"]))]


def _le(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _queue(now: Any) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "portal_queue_depth", "Requests waiting for a person, by agent.", labels=["agent"]
    )
    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    for agent, n in pending.values_list("agent").annotate(n=Count("pk")).order_by("agent"):
        depth.add_metric([agent or ""], n)
    yield depth
    oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
    yield GaugeMetricFamily(
        "portal_queue_oldest_age_seconds",
        "How long the oldest waiting request has waited (0 when none waits).",
        value=max((now - oldest).total_seconds(), 0.0) if oldest else 0.0,
    )


def _decisions() -> Iterator[Metric]:
    by_outcome = CounterMetricFamily(
        "portal_decisions", "Decisions recorded, by outcome.", labels=["outcome"]
    )
    counts = dict(Decision.objects.values_list("outcome").annotate(n=Count("pk")).order_by())
    for outcome in Decision.Outcome.values:
        by_outcome.add_metric([outcome], counts.get(outcome, 0))
    yield by_outcome
    # A person's decisions only: an expiry's wait is the expiry period, and a requester
    # withdrawing their own request decided nothing.
    row = (
        Decision.objects.filter(reviewer__isnull=False)
        .alias(withdrawn=WITHDRAWN)
        .annotate(waited=_waited("created_at", "interrupt__created_at"))
        .filter(withdrawn=False)
        .aggregate(**_histogram_counts(DECISION_BUCKETS))
    )
    waited = HistogramMetricFamily(
        "portal_time_to_decision_seconds",
        "From a request being raised to a person deciding it.",
    )
    waited.add_metric([], _buckets(row, DECISION_BUCKETS), _seconds(row["sum"]))
    yield waited
    # What decision rules did instead of people: decided (approve, refuse) or routed.
    hits = CounterMetricFamily(
        "portal_rule_hits",
        "Requests decision rules acted on, by rule and action.",
        labels=["rule", "action"],
    )
    acted = RuleHit.objects.values_list("rule__name", "action").annotate(n=Count("pk"))
    for name, action, n in acted.order_by("rule__name", "action"):
        hits.add_metric([name, action], n)
    yield hits


def _runs() -> Iterator[Metric]:
    backlog = GaugeMetricFamily(
        "portal_runs", "Runs queued or being executed, by status.", labels=["status"]
    )
    active = (Run.Status.QUEUED, Run.Status.RUNNING)
    counts = dict(
        Run.objects.filter(status__in=active).values_list("status").annotate(n=Count("pk"))
    )
    for status in active:
        backlog.add_metric([status], counts.get(status, 0))
    yield backlog
    finished = CounterMetricFamily(
        "portal_runs_finished",
        "Runs finished, by outcome (status=failed: run failures).",
        labels=["status"],
    )
    latency = HistogramMetricFamily(
        "portal_run_duration_seconds",
        "From a worker starting a run to the run's end, by outcome.",
        labels=["status"],
    )
    done = (Run.Status.SUCCEEDED, Run.Status.INTERRUPTED, Run.Status.FAILED)
    finished_runs: Any = Run.objects.filter(status__in=done)  # annotations built from a dict
    rows: dict[str, dict[str, Any]] = {
        row["status"]: row
        for row in finished_runs.annotate(waited=_waited("finished_at", "started_at"))
        .values("status")
        .annotate(**_histogram_counts(RUN_BUCKETS))
        .order_by()
    }
    for status in done:
        row = rows.get(status)
        finished.add_metric([status], row["count"] if row else 0)
        if row is not None:
            latency.add_metric([status], _buckets(row, RUN_BUCKETS), _seconds(row["sum"]))
    yield finished
    yield latency


def _workers() -> Iterator[Metric]:
    by_kind = heartbeat_ages()
    per_loop = GaugeMetricFamily(
        "portal_worker_heartbeat_age_seconds",
        "Seconds since each run worker's or notifier's loop last reported in (one stopped "
        "in order takes its row away; a killed one's stays and ages).",
        labels=["worker", "kind"],
    )
    counts = GaugeMetricFamily(
        "portal_workers", "Run workers and notifiers with a heartbeat row.", labels=["kind"]
    )
    for kind, ages in sorted(by_kind.items()):
        for name, age in sorted(ages.items()):
            per_loop.add_metric([name, kind], age)
        counts.add_metric([kind], len(ages))
    yield per_loop
    yield counts


class _PortalCollector:
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from _queue(now)
        yield from _decisions()
        yield from _runs()
        yield from _workers()
        yield from _outbox(now)


def metrics_text() -> bytes:
    """The Prometheus text exposition of every metric, read from the database now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_PortalCollector())
    return generate_latest(registry)
