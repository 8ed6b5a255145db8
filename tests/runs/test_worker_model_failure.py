"""A model that keeps failing ends the run as failed with the model's error, the thread
keeps its checkpoint, and ``thread_continue`` retries it once the model answers again.
The model is the real OpenAI client talking to a fake server on loopback."""

from __future__ import annotations

import pytest

from agents.testing.fake_openai import FakeOpenAI
from portal.models import Checkpoint, Run, Thread
from portal.reviews import threads
from portal.runs.checkpointer import DjangoCheckpointer
from portal.runs.worker import Worker

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_agents")]


@pytest.fixture
def fake(settings, monkeypatch):
    with FakeOpenAI() as server:
        settings.PORTAL_MODEL = "gpt-test"  # anything but "scripted": the OpenAI client
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        yield server


def test_a_failing_model_fails_the_run_readably_and_continue_retries_it(fake, support_agent):
    fake.queue_error(500, times=2, message="upstream exploded")  # both attempts (see echo)
    thread, run = threads.thread_start(
        agent="echo", input={"messages": [{"role": "user", "content": "hello"}]}, user=support_agent
    )

    assert Worker(name="w").run_forever(once=True) == 1

    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "ModelError" in run.error
    assert "failed after 2 attempts" in run.error
    assert "HTTP 500: upstream exploded" in run.error
    assert thread.status == Thread.Status.FAILED
    # The user's message was checkpointed before the model was called, and is intact.
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    assert snapshot is not None
    assert (snapshot.status, snapshot.next_node) == ("running", "MAIN")
    assert [m["content"] for m in snapshot.messages] == ["hello"]

    fake.queue_text("Hello again, the model is back.")
    retry = threads.thread_continue(thread=thread, user=support_agent)
    Worker(name="w").run_forever(once=True)

    retry.refresh_from_db()
    thread.refresh_from_db()
    assert (retry.status, retry.error) == (Run.Status.SUCCEEDED, "")
    assert thread.status == Thread.Status.DONE
    snapshot = DjangoCheckpointer().get_sync(str(thread.pk))
    assert [(m["role"], m["content"]) for m in snapshot.messages] == [
        ("user", "hello"),
        ("assistant", "Hello again, the model is back."),
    ]
    assert Checkpoint.objects.filter(thread=thread, run=retry).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_model_and_its_connection_from_one_run_to_the_next(fake, support_agent):
    """On its own loop (PostgreSQL, no caller's transaction) a worker builds the model once:
    the second run's request comes on the connection the first run opened, and each run's
    graph, closed at its end, leaves the model open for the next."""
    fake.queue_text("First answer.")
    fake.queue_text("Second answer.")
    started = [
        threads.thread_start(
            agent="echo", input={"messages": [{"role": "user", "content": t}]}, user=support_agent
        )
        for t in ("one", "two")
    ]

    assert Worker(name="w").run_forever(once=True) == 2

    for thread, run in started:
        run.refresh_from_db()
        thread.refresh_from_db()
        assert (run.status, run.error, thread.status) == (
            Run.Status.SUCCEEDED,
            "",
            Thread.Status.DONE,
        )
    assert len(fake.connections) == 2
    assert fake.connections[0] == fake.connections[1], fake.connections
