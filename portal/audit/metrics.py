"""Numbers behind the metrics page, aggregated in SQL, and the geometry of its SVG charts.

Every chart is a handful of GROUP BY queries whose result size is bounded by the chart, not
by the data: time is cut into at most ``MAX_BUCKETS`` buckets (hour, day or week, whichever
fits the range), time to decision into fixed ranges, and agents and reviewers into the top
``TOP_N`` plus "others". So a chart reads the same, and costs about the same number of
rows sent to Python, with ten decisions or a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q
from django.db.models.functions import Trunc
from django.utils import timezone

from portal.inputs import DayField
from portal.models import WITHDRAWN, Decision, Interrupt, RuleVersion

MAX_BUCKETS = 90
TOP_N = 8
DEFAULT_DAYS = 30
OUTCOMES = [value for value, _ in Decision.Outcome.choices]
# Time-to-decision ranges: (upper bound, label); the last range is open-ended.
WAIT_BUCKETS = [
    (timedelta(minutes=1), "< 1 min"),
    (timedelta(minutes=5), "1–5 min"),
    (timedelta(minutes=15), "5–15 min"),
    (timedelta(hours=1), "15–60 min"),
    (timedelta(hours=4), "1–4 h"),
    (timedelta(days=1), "4–24 h"),
    (timedelta(days=7), "1–7 days"),
    (None, "> 7 days"),
]

# Chart geometry (SVG user units).
WIDTH, HEIGHT = 720, 220
PAD_LEFT, PAD_BOTTOM, PAD_TOP, PAD_RIGHT = 48, 28, 12, 12


class MetricsRange(forms.Form):
    date_from = DayField(required=False, label="From")
    date_to = DayField(required=False, label="To")

    def bounds(self) -> tuple[datetime, datetime]:
        """[start, end) of the chosen days; the last ``DEFAULT_DAYS`` days by default."""
        today = timezone.localdate()
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        last: date = data.get("date_to") or today
        first: date = data.get("date_from") or last - timedelta(days=DEFAULT_DAYS - 1)
        if first > last:
            first, last = last, first
        tz = timezone.get_current_timezone()
        start = timezone.make_aware(datetime.combine(first, time.min), tz)
        end = timezone.make_aware(datetime.combine(last + timedelta(days=1), time.min), tz)
        return start, end


_FIXED_STEPS = (
    ("hour", timedelta(hours=1)),
    ("day", timedelta(days=1)),
    ("week", timedelta(weeks=1)),
)


def bucket_kind(start: datetime, end: datetime) -> str:
    """The finest of hour, day, week, month, year that cuts the range into at most
    ``MAX_BUCKETS`` buckets."""
    span = end - start
    for kind, step in _FIXED_STEPS:
        if span / step <= MAX_BUCKETS:
            return kind
    months = (end.year - start.year) * 12 + end.month - start.month + 1
    return "month" if months <= MAX_BUCKETS else "year"


def _bucket_starts(start: datetime, end: datetime, kind: str) -> list[datetime]:
    """The start of every bucket that overlaps [start, end), as ``Trunc`` labels them."""
    local = timezone.localtime(start)
    first = local.replace(minute=0, second=0, microsecond=0)
    if kind != "hour":
        first = first.replace(hour=0)
    if kind == "week":
        first -= timedelta(days=first.weekday())
    elif kind == "month":
        first = first.replace(day=1)
    elif kind == "year":
        first = first.replace(month=1, day=1)
    out = []
    moment = first
    while moment < end:
        out.append(moment)
        if kind == "month":
            year, month = divmod(moment.month, 12)
            moment = moment.replace(year=moment.year + year, month=month + 1)
        elif kind == "year":
            moment = moment.replace(year=moment.year + 1)
        else:
            moment += dict(_FIXED_STEPS)[kind]
    return out


def _counts_by_bucket(qs: Any, column: str, kind: str) -> dict[datetime, int]:
    rows = (
        qs.annotate(bucket=Trunc(column, kind))
        .values("bucket")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("bucket", "n")
    )
    return {bucket: n for bucket, n in rows}


def queue_depth(start: datetime, end: datetime) -> dict[str, Any]:
    """Pending requests per bucket, reconstructed from when requests arrived and when
    they left the queue: walking back from the number pending now.

    ``points`` holds the number pending at the end of each bucket; ``waiting`` the number
    that waited at some time during it (pending at its start, plus those that arrived in
    it). A request that arrived and was decided within one day is 0 at the day's end but
    waited that day, so the chart draws ``waiting``."""
    kind = bucket_kind(start, end)
    buckets = _bucket_starts(start, end, kind)
    now = timezone.now()
    window_end = min(end, now)
    arrived = _counts_by_bucket(
        Interrupt.objects.filter(created_at__gte=buckets[0], created_at__lt=window_end),
        "created_at",
        kind,
    )
    left = _counts_by_bucket(
        Interrupt.objects.filter(resolved_at__gte=buckets[0], resolved_at__lt=window_end),
        "resolved_at",
        kind,
    )
    depth = Interrupt.objects.filter(status=Interrupt.Status.PENDING).count()
    if window_end < now:
        depth -= Interrupt.objects.filter(created_at__gte=window_end).count()
        depth += Interrupt.objects.filter(resolved_at__gte=window_end).count()
    points: list[tuple[datetime, int]] = []
    waiting: list[tuple[datetime, int]] = []
    for moment in reversed(buckets):
        if moment >= window_end:
            continue
        points.append((moment, max(depth, 0)))  # depth at the end of this bucket
        depth -= arrived.get(moment, 0)
        depth += left.get(moment, 0)
        waiting.append((moment, max(depth, 0) + arrived.get(moment, 0)))
    points.reverse()
    waiting.reverse()
    return {"kind": kind, "points": points, "waiting": waiting}


def _wait_counts() -> dict[str, Any]:
    # Time to decision is counted for decisions made by a person only (an expiry's "wait"
    # is the expiry period, a cancellation's is not a decision).
    waited = ExpressionWrapper(F("created_at") - F("interrupt__created_at"), DurationField())
    counts: dict[str, Any] = {}
    lower: timedelta | None = None
    for i, (upper, _) in enumerate(WAIT_BUCKETS):
        cond = Q(reviewer__isnull=False)
        if lower is not None:
            cond &= Q(waited__gte=lower)
        if upper is not None:
            cond &= Q(waited__lt=upper)
        counts[f"wait{i}"] = Count("pk", filter=cond)
        lower = upper
    return {"waited": waited, **counts}


def _outcome_counts() -> dict[str, Any]:
    counts: dict[str, Any] = {o: Count("pk", filter=Q(outcome=o)) for o in OUTCOMES}
    counts["total"] = Count("pk")
    return counts


@dataclass
class RateRow:
    label: str
    total: int
    counts: dict[str, int]
    segments: list[dict[str, Any]] = field(default_factory=list)
    others: bool = False


def _with_others(rows: list[RateRow], totals: dict[str, int]) -> list[RateRow]:
    rest = {o: totals[o] - sum(r.counts[o] for r in rows) for o in OUTCOMES}
    rest_total = totals["total"] - sum(r.total for r in rows)
    if rest_total > 0:
        rows.append(RateRow("others", rest_total, rest, others=True))
    for row in rows:
        x = 0.0
        for outcome in OUTCOMES:
            share = row.counts[outcome] / row.total if row.total else 0
            if share:
                row.segments.append(
                    {
                        "outcome": outcome,
                        "x": round(x * 100, 2),
                        "width": round(share * 100, 2),
                        "count": row.counts[outcome],
                        "percent": round(share * 100, 1),
                    }
                )
            x += share
    return rows


def summary(start: datetime, end: datetime) -> dict[str, Any]:
    """Time to decision and outcome rates per agent and per reviewer in two grouped
    queries. Agents are the few configured ones, so every agent group comes back and
    the totals are their sum; reviewers can be many, so only the ``TOP_N`` busiest come
    back and "others" is the difference from those totals."""
    # Any: the annotations are built from lists, which the type plugin cannot follow.
    # A requester withdrawing their own request is not a decision: it is left out.
    qs: Any = (
        Decision.objects.filter(created_at__gte=start, created_at__lt=end)
        .alias(withdrawn=WITHDRAWN)
        .filter(withdrawn=False)
    )
    wait_counts = _wait_counts()
    waited = wait_counts.pop("waited")
    # (Every decision's request is marked decided; saying so lets PostgreSQL read each
    # one's agent and time from the covering index of such requests, migration 0011.)
    groups = list(
        qs.filter(interrupt__decided=True)
        .alias(waited=waited)
        .values("interrupt__agent")
        .annotate(**_outcome_counts(), **wait_counts)
        .order_by("-total", "interrupt__agent")
    )
    totals = {key: sum(g[key] for g in groups) for key in [*OUTCOMES, "total"]}
    waits = [
        (label, sum(g[f"wait{i}"] for g in groups)) for i, (_, label) in enumerate(WAIT_BUCKETS)
    ]
    by_agent = [
        RateRow(g["interrupt__agent"] or "(none)", g["total"], {o: g[o] for o in OUTCOMES})
        for g in groups[:TOP_N]
    ]
    # Grouped by the ids, not the names: no join, and the few names are looked up after.
    # A decision rule's version is a decider of its own ("rule R v3"), never a person.
    top = list(
        qs.values("reviewer_id", "rule_version_id")
        .annotate(**_outcome_counts())
        .order_by("-total", "reviewer_id", "rule_version_id")[:TOP_N]
    )
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[r["reviewer_id"] for r in top if r["reviewer_id"]])
        .values_list("pk", "username")
    )
    versions = RuleVersion.objects.filter(pk__in=[r["rule_version_id"] for r in top])
    rules = {v.pk: str(v) for v in versions.select_related("rule")}
    by_reviewer = [
        RateRow(
            rules.get(r["rule_version_id"])
            or (names.get(r["reviewer_id"], "system") if r["reviewer_id"] else "system"),
            r["total"],
            {o: r[o] for o in OUTCOMES},
        )
        for r in top
    ]
    return {
        "waits": waits,
        "by_agent": _with_others(by_agent, totals),
        "by_reviewer": _with_others(by_reviewer, totals),
    }


def wait_histogram(start: datetime, end: datetime) -> list[tuple[str, int]]:
    """How long people took to decide (decisions made by a person in the range)."""
    result: list[tuple[str, int]] = summary(start, end)["waits"]
    return result


def outcome_rates(start: datetime, end: datetime, by: str) -> list[RateRow]:
    """Outcome counts per agent or reviewer: the ``TOP_N`` busiest, then "others"."""
    rows: list[RateRow] = summary(start, end)[{"agent": "by_agent", "reviewer": "by_reviewer"}[by]]
    return rows


# --- geometry -------------------------------------------------------------------------


MAX_TICK_STEPS = 4


def nice_ticks(peak: int) -> list[int]:
    """Whole-number gridlines from 0 to at least ``peak``: a step of 1, 2 or 5 times a
    power of ten, the smallest that needs at most ``MAX_TICK_STEPS`` steps (so each
    label names a count that can occur, and no label is rounded away from its line)."""
    peak = max(peak, 1)
    magnitude = 1
    while True:
        for base in (1, 2, 5):
            step = base * magnitude
            steps = -(-peak // step)  # ceiling division
            if steps <= MAX_TICK_STEPS:
                return [step * i for i in range(steps + 1)]
        magnitude *= 10


def _fmt_bucket(moment: datetime, kind: str) -> str:
    local = timezone.localtime(moment)
    formats = {"hour": "%d %b %H:%M", "day": "%d %b", "week": "%d %b %Y", "month": "%b %Y"}
    return local.strftime(formats.get(kind, "%Y"))


def _y_ticks(ticks: list[int], inner_h: int) -> list[dict[str, Any]]:
    top = ticks[-1]
    return [{"value": t, "y": round(PAD_TOP + inner_h * (1 - t / top), 1)} for t in ticks]


def line_chart(points: list[tuple[datetime, int]], kind: str) -> dict[str, Any]:
    ticks = nice_ticks(max((v for _, v in points), default=0))
    top = ticks[-1]
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    n = max(len(points) - 1, 1)
    coords = []
    for i, (_, value) in enumerate(points):
        x = PAD_LEFT + inner_w * i / n
        y = PAD_TOP + inner_h * (1 - value / top)
        coords.append((round(x, 1), round(y, 1)))
    baseline = PAD_TOP + inner_h
    area = ""
    if coords:
        area = (
            f"M{coords[0][0]},{baseline} "
            + " ".join(f"L{x},{y}" for x, y in coords)
            + f" L{coords[-1][0]},{baseline} Z"
        )
    label_at = sorted({0, len(points) // 2, len(points) - 1}) if points else []
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "polyline": " ".join(f"{x},{y}" for x, y in coords),
        "area": area,
        "y_ticks": _y_ticks(ticks, inner_h),
        "x_labels": [
            {"x": coords[i][0], "text": _fmt_bucket(points[i][0], kind)} for i in label_at
        ],
        "left": PAD_LEFT,
        "right": WIDTH - PAD_RIGHT,
        "baseline": baseline,
        "label_y": HEIGHT - 8,
        "max": max((v for _, v in points), default=0),
        "rows": [(_fmt_bucket(m, kind), v) for m, v in points],
    }


def bar_chart(bars: list[tuple[str, int]]) -> dict[str, Any]:
    ticks = nice_ticks(max((v for _, v in bars), default=0))
    top = ticks[-1]
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    slot = inner_w / max(len(bars), 1)
    out = []
    for i, (label, value) in enumerate(bars):
        h = inner_h * value / top
        out.append(
            {
                "label": label,
                "value": value,
                "x": round(PAD_LEFT + slot * i + slot * 0.12, 1),
                "width": round(slot * 0.76, 1),
                "y": round(PAD_TOP + inner_h - h, 1),
                "height": round(h, 1),
                "cx": round(PAD_LEFT + slot * (i + 0.5), 1),
            }
        )
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "bars": out,
        "y_ticks": _y_ticks(ticks, inner_h),
        "left": PAD_LEFT,
        "right": WIDTH - PAD_RIGHT,
        "baseline": PAD_TOP + inner_h,
        "label_y": HEIGHT - 8,
        "total": sum(v for _, v in bars),
    }


def charts(start: datetime, end: datetime) -> dict[str, Any]:
    depth = queue_depth(start, end)
    rates = summary(start, end)
    return {
        "depth": line_chart(depth["waiting"], depth["kind"]),
        "depth_kind": depth["kind"],
        "waits": bar_chart(rates["waits"]),
        "by_agent": rates["by_agent"],
        "by_reviewer": rates["by_reviewer"],
        "outcomes": OUTCOMES,
    }
