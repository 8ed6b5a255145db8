"""What monitoring reads: /healthz, the workers' heartbeats and the Prometheus metrics,
all computed from the database at the moment they are asked for."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.audit import observability
from portal.loops import beat
from portal.models import (
    Decision,
    Interrupt,
    Notification,
    Run,
    Subscription,
    Thread,
    WorkerHeartbeat,
)
from portal.notify import outbox
from portal.notify.notifier import outbox_dispatch
from tests.factories import make_decision, make_interrupt, make_thread
from tests.loopback import WebhookReceiver
from tests.processes import ROOT, wait_for

pytestmark = pytest.mark.django_db

TOKEN = "t" * 40
STAGES = ("undispatched", "pending")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- /healthz ---------------------------------------------------------------------------


def test_healthz_is_200_naming_each_check_when_all_is_well(client, settings):
    settings.REDIS_URL = ""
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["problems"] == []
    assert body["database"] == "ok"
    assert body["redis"] == "not configured"
    for loops in ("workers", "notifiers"):
        assert body[loops] == {
            "count": 0,
            "freshest_heartbeat_age_seconds": None,
            "max_age_seconds": None,
        }
    assert response["Cache-Control"].startswith("max-age=0")


def test_healthz_is_503_naming_redis_when_it_cannot_be_reached(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    assert body["problems"] == ["redis: unreachable (ConnectionError)"]
    assert body["database"] == "ok"


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL (a Redis server)")
def test_healthz_pings_the_configured_redis(client, settings):
    settings.REDIS_URL = os.environ["REDIS_URL"]
    response = client.get("/healthz")
    assert (response.status_code, response.json()["redis"]) == (200, "ok")


@pytest.mark.slow
def test_healthz_is_503_naming_the_database_when_it_cannot_be_reached(tmp_path):
    """A real process whose database is a port nobody listens on."""
    script = (
        "import django, json; django.setup();"
        "from django.test.utils import setup_test_environment; setup_test_environment();"
        "from django.test import Client; r = Client().get('/healthz');"
        "print(r.status_code, json.dumps(r.json()['problems']))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SQLITE_PATH", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgres://nobody@127.0.0.1:{_closed_port()}/portal",
        PORTAL_NO_WORKER="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == '503 ["database: unreachable (OperationalError)"]'


def test_with_a_heartbeat_limit_healthz_is_503_until_a_worker_beats(client, settings):
    settings.REDIS_URL = ""
    settings.PORTAL_HEALTH_WORKER_MAX_AGE = 60
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["workers: no worker has sent a heartbeat"]
    beat("w-1")
    response = client.get("/healthz")
    assert response.status_code == 200
    workers = response.json()["workers"]
    assert workers["count"] == 1 and workers["max_age_seconds"] == 60
    assert 0 <= workers["freshest_heartbeat_age_seconds"] < 5


def test_with_a_heartbeat_limit_a_stale_heartbeat_is_503_naming_its_age(client, settings):
    settings.REDIS_URL = ""
    settings.PORTAL_HEALTH_WORKER_MAX_AGE = 60
    WorkerHeartbeat.objects.create(
        name="dead", started_at=timezone.now(), beat_at=timezone.now() - timedelta(seconds=600)
    )
    response = client.get("/healthz")
    assert response.status_code == 503
    (problem,) = response.json()["problems"]
    assert problem.startswith("workers: the freshest heartbeat is 60")
    assert problem.endswith("over the limit of 60 s (PORTAL_HEALTH_WORKER_MAX_AGE)")
    beat("alive")
    assert client.get("/healthz").status_code == 200  # the freshest one counts


def test_without_a_limit_a_stale_heartbeat_is_reported_but_not_judged(client, settings):
    settings.REDIS_URL = ""
    WorkerHeartbeat.objects.create(
        name="dead", started_at=timezone.now(), beat_at=timezone.now() - timedelta(seconds=600)
    )
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["workers"]["freshest_heartbeat_age_seconds"] >= 600


def test_healthz_answers_only_get(client):
    assert client.post("/healthz").status_code == 405


# --- heartbeats from real workers -------------------------------------------------------


@pytest.mark.slow
def test_a_running_worker_beats_and_a_stopped_one_takes_its_row_away(spawn):
    worker = spawn("run_worker", "--id", "hb-worker", "--poll", "0.1")
    row = wait_for(
        lambda: WorkerHeartbeat.objects.filter(name="hb-worker").first(), what="a heartbeat"
    )
    first = row.beat_at
    wait_for(
        lambda: WorkerHeartbeat.objects.get(name="hb-worker").beat_at > first,
        timeout=20,
        what="a second heartbeat",
    )
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)
    assert not WorkerHeartbeat.objects.filter(name="hb-worker").exists()


@pytest.mark.slow
def test_a_killed_workers_heartbeat_stays_behind_and_ages(spawn, settings):
    settings.PORTAL_HEALTH_WORKER_MAX_AGE = 1
    worker = spawn("run_worker", "--id", "hb-killed", "--poll", "0.1")
    wait_for(lambda: WorkerHeartbeat.objects.filter(name="hb-killed").exists(), what="a beat")
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    wait_for(lambda: not observability.health().ok, timeout=10, what="the heartbeat to go stale")
    assert WorkerHeartbeat.objects.filter(name="hb-killed").exists()


@pytest.mark.slow
def test_a_running_notifier_beats_shows_in_healthz_and_metrics_and_a_stopped_one_goes(
    spawn, client, settings
):
    settings.REDIS_URL = ""
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_HEALTH_NOTIFIER_MAX_AGE = 60
    assert client.get("/healthz").json()["problems"] == [
        "notifiers: no notifier has sent a heartbeat"
    ]
    notifier = spawn("run_notifier", "--id", "hb-notifier", "--poll", "0.1")
    row = wait_for(
        lambda: WorkerHeartbeat.objects.filter(name="hb-notifier").first(), what="a heartbeat"
    )
    assert row.kind == WorkerHeartbeat.Kind.NOTIFIER
    wait_for(
        lambda: WorkerHeartbeat.objects.get(name="hb-notifier").beat_at > row.beat_at,
        timeout=20,
        what="a second heartbeat",
    )
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["notifiers"]["count"] == 1 and body["workers"]["count"] == 0
    metrics = _scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    ages = metrics["portal_worker_heartbeat_age_seconds"]
    age = _value(ages, "portal_worker_heartbeat_age_seconds", worker="hb-notifier", kind="notifier")
    assert age < 10
    assert _value(metrics["portal_workers"], "portal_workers", kind="notifier") == 1
    assert _value(metrics["portal_workers"], "portal_workers", kind="worker") == 0
    notifier.send_signal(signal.SIGTERM)
    notifier.wait(timeout=20)
    assert not WorkerHeartbeat.objects.filter(name="hb-notifier").exists()


@pytest.mark.slow
def test_a_killed_notifiers_heartbeat_stays_behind_and_fails_the_health_check(spawn, settings):
    settings.REDIS_URL = ""
    settings.PORTAL_HEALTH_NOTIFIER_MAX_AGE = 1
    notifier = spawn("run_notifier", "--id", "hb-notifier-killed", "--poll", "0.1")
    wait_for(
        lambda: WorkerHeartbeat.objects.filter(name="hb-notifier-killed").exists(), what="a beat"
    )
    notifier.send_signal(signal.SIGKILL)
    notifier.wait(timeout=10)
    wait_for(lambda: not observability.health().ok, timeout=10, what="the heartbeat to go stale")
    (problem,) = observability.health().problems
    assert problem.startswith("notifiers: the freshest heartbeat is")
    assert problem.endswith("(PORTAL_HEALTH_NOTIFIER_MAX_AGE)")


def test_a_starting_worker_clears_heartbeats_of_workers_killed_a_day_ago():
    now = timezone.now()
    for name, age in (("long-dead", timedelta(days=2)), ("recently-dead", timedelta(hours=2))):
        WorkerHeartbeat.objects.create(name=name, started_at=now - age, beat_at=now - age)
    beat("w-new")
    assert set(WorkerHeartbeat.objects.values_list("name", flat=True)) == {
        "recently-dead",
        "w-new",
    }


# --- Prometheus -------------------------------------------------------------------------


def _scrape(client, **headers) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    response = client.get("/metrics/prometheus", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(response.content.decode())
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples] for family in families
    }


def _value(samples, name, **labels) -> float:
    found = [v for n, lab, v in samples if n == name and lab == labels]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


@pytest.fixture
def scraper(client, settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    return lambda: _scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def test_queue_depth_is_counted_per_agent_from_the_database(scraper):
    make_interrupt(agent="refunds")
    make_interrupt(agent="refunds")
    make_interrupt(agent="transfers")
    decided = make_interrupt(agent="transfers")
    Interrupt.objects.filter(pk=decided.pk).update(status=Interrupt.Status.RESOLVED)
    Interrupt.objects.filter(agent="refunds").update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    metrics = scraper()
    depth = metrics["portal_queue_depth"]
    assert _value(depth, "portal_queue_depth", agent="refunds") == 2
    assert _value(depth, "portal_queue_depth", agent="transfers") == 1
    oldest = _value(metrics["portal_queue_oldest_age_seconds"], "portal_queue_oldest_age_seconds")
    assert 590 < oldest < 700


def test_decisions_are_counted_by_outcome_and_timed_when_a_person_decided(scraper, reviewer):
    for minutes, value in ((2, {"approved": True}), (30, {"approved": False})):
        interrupt = make_interrupt()
        Interrupt.objects.filter(pk=interrupt.pk).update(
            created_at=timezone.now() - timedelta(minutes=minutes)
        )
        interrupt.refresh_from_db()
        make_decision(interrupt=interrupt, reviewer=reviewer, value=value)
    metrics = scraper()
    counts = metrics["portal_decisions"]
    assert _value(counts, "portal_decisions_total", outcome="approved") == 1
    assert _value(counts, "portal_decisions_total", outcome="rejected") == 1
    assert _value(counts, "portal_decisions_total", outcome="expired") == 0
    waits = metrics["portal_time_to_decision_seconds"]
    assert _value(waits, "portal_time_to_decision_seconds_bucket", le="60") == 0
    assert _value(waits, "portal_time_to_decision_seconds_bucket", le="300") == 1
    assert _value(waits, "portal_time_to_decision_seconds_bucket", le="3600") == 2
    assert _value(waits, "portal_time_to_decision_seconds_count") == 2
    total = _value(waits, "portal_time_to_decision_seconds_sum")
    assert 32 * 60 - 5 < total < 32 * 60 + 60


def test_run_backlog_failures_and_durations_come_from_the_run_table(scraper):
    thread = make_thread()
    now = timezone.now()
    Run.objects.create(thread=thread, kind=Run.Kind.START)  # queued
    for seconds, status in ((1.5, Run.Status.SUCCEEDED), (45, Run.Status.FAILED)):
        Run.objects.create(
            thread=thread,
            kind=Run.Kind.CONTINUE,
            status=status,
            started_at=now - timedelta(seconds=seconds),
            finished_at=now,
        )
    metrics = scraper()
    assert _value(metrics["portal_runs"], "portal_runs", status="queued") >= 1
    finished = metrics["portal_runs_finished"]
    assert _value(finished, "portal_runs_finished_total", status="failed") == 1
    assert _value(finished, "portal_runs_finished_total", status="succeeded") >= 1
    durations = metrics["portal_run_duration_seconds"]
    le = "portal_run_duration_seconds_bucket"
    assert _value(durations, le, status="failed", le="30") == 0
    assert _value(durations, le, status="failed", le="60") == 1
    assert _value(durations, "portal_run_duration_seconds_sum", status="failed") == pytest.approx(
        45, abs=1
    )


def test_worker_heartbeats_are_exposed_per_worker(scraper):
    beat("w-a")
    WorkerHeartbeat.objects.create(
        name="w-dead", started_at=timezone.now(), beat_at=timezone.now() - timedelta(minutes=5)
    )
    metrics = scraper()
    ages = metrics["portal_worker_heartbeat_age_seconds"]
    assert _value(ages, "portal_worker_heartbeat_age_seconds", worker="w-a", kind="worker") < 5
    age = _value(ages, "portal_worker_heartbeat_age_seconds", worker="w-dead", kind="worker")
    assert age >= 300
    assert _value(metrics["portal_workers"], "portal_workers", kind="worker") == 2
    assert _value(metrics["portal_workers"], "portal_workers", kind="notifier") == 0


def test_the_outbox_backlog_follows_notifications_until_they_are_delivered(scraper, settings):
    """Real fan-out and delivery to a receiver on loopback; only the counts are read."""
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the receiver listens on loopback
    with WebhookReceiver("whsec-metrics-0123456789") as receiver:
        outbox.subscription_save(
            subscription=Subscription(
                name="ops", channel="webhook", target=receiver.url, secret=receiver.secret
            ),
            user=None,
        )
        outbox.outbox_enqueue(kind=outbox.RUN_FAILED, payload={"run": {"error": "boom"}})
        Notification.objects.update(created_at=timezone.now() - timedelta(minutes=3))

        def backlog():
            metrics = scraper()
            samples = metrics["portal_outbox_backlog"]
            oldest = metrics["portal_outbox_oldest_age_seconds"][0][2]
            stages = {s: _value(samples, "portal_outbox_backlog", stage=s) for s in STAGES}
            return stages, oldest

        stages, oldest = backlog()
        assert stages == {"undispatched": 1, "pending": 0}
        assert 170 < oldest < 300
        assert outbox_dispatch() == 1
        stages, oldest = backlog()
        assert stages == {"undispatched": 0, "pending": 1}
        assert oldest < 60  # the delivery was written just now
        assert outbox.outbox_deliver() == 1
        assert backlog() == ({"undispatched": 0, "pending": 0}, 0.0)
        assert len(receiver.requests) == 1
    given_up = scraper()["portal_outbox_given_up"]
    assert _value(given_up, "portal_outbox_given_up") == 0


def test_two_scrapes_agree_whichever_process_answers(scraper, reviewer):
    """Nothing is counted in memory: a fresh registry reads the same rows each time."""
    make_decision(interrupt=make_interrupt(), reviewer=reviewer)
    first = scraper()
    second = scraper()
    assert first["portal_decisions"] == second["portal_decisions"]
    assert Decision.objects.count() == 1


def test_a_person_with_the_metrics_permission_may_scrape_with_their_session(client, auditor):
    client.force_login(auditor)
    assert "portal_queue_depth" in _scrape(client)


def test_metrics_refuse_a_stranger_a_wrong_token_and_a_user_without_the_permission(
    client, settings, support_agent
):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    anonymous = client.get("/metrics/prometheus")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Bearer realm="metrics"'
    wrong = client.get("/metrics/prometheus", HTTP_AUTHORIZATION="Bearer " + "x" * 40)
    assert wrong.status_code == 401
    assert "not this portal's PORTAL_METRICS_TOKEN" in wrong.content.decode()
    client.force_login(support_agent)
    assert client.get("/metrics/prometheus").status_code == 403
    # A token that is set never lets a wrong one through, even with a session.
    assert client.get("/metrics/prometheus", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_without_a_configured_token_no_bearer_token_is_accepted(client, settings):
    settings.PORTAL_METRICS_TOKEN = ""
    response = client.get("/metrics/prometheus", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


@pytest.mark.slow
def test_a_short_metrics_token_stops_start_up():
    env = {**os.environ, "PORTAL_METRICS_TOKEN": "short", "PORTAL_NO_WORKER": "1"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "PORTAL_METRICS_TOKEN must be at least 32 characters" in done.stderr


def test_thread_rows_are_untouched_by_a_scrape(scraper):
    thread = make_thread()
    before = Thread.objects.filter(pk=thread.pk).values().get()
    scraper()
    assert Thread.objects.filter(pk=thread.pk).values().get() == before
