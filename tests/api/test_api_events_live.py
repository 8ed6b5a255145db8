"""Following a thread over the API against the real thing: daphne (``runserver``) in a
process of its own with a worker, a client reading the event stream over a socket while
the thread runs, pauses and is resumed through the API."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import pytest
from django.conf import settings

from portal.accounts.tokens import api_token_create
from tests.api.test_api_events import parse_event
from tests.processes import free_port, output, wait_for

# On the embedded parts the server's own worker runs the agents, as the demo's does.
pytestmark = [pytest.mark.slow, pytest.mark.embedded, pytest.mark.usefixtures("test_agents")]


@pytest.fixture
def server(spawn) -> tuple[str, int]:
    port = free_port()
    # The server's own worker runs the agents unless Redis carries events between
    # processes; then a worker process of its own does, as in production.
    proc = spawn("runserver", "--noreload", f"127.0.0.1:{port}", PORTAL_NO_WORKER="0")
    if not settings.PORTAL_EMBEDDED_WORKER:
        spawn("run_worker")

    def up() -> bool:
        assert proc.poll() is None, output(proc)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_for(up, timeout=120, what="the server to listen")
    return "127.0.0.1", port


def call(server, method: str, path: str, token: str, body: Any = None) -> Any:
    conn = http.client.HTTPConnection(*server, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request(method, path, json.dumps(body) if body is not None else None, headers)
    response = conn.getresponse()
    data = json.loads(response.read() or b"null")
    conn.close()
    assert response.status < 300, (response.status, data)
    return data


class EventReader:
    def __init__(self, server, path: str, token: str) -> None:
        self.conn = http.client.HTTPConnection(*server, timeout=30)
        self.conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Content-Type") == "text/event-stream"

    def event(self) -> tuple[str, Any]:
        lines: list[str] = []
        while True:
            line = self.response.fp.readline().decode()
            assert line, "the stream ended"
            if line != "\n":
                lines.append(line.rstrip("\n"))
                continue
            event = parse_event("\n".join(lines))
            lines = []
            if event is not None:
                return event

    def until(self, found: Any, seen: list[tuple[str, Any]], what: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            name, data = self.event()
            seen.append((name, data))
            if found(name, data):
                return
        pytest.fail(f"no {what}; saw {[n for n, _ in seen]}")

    def until_status(self, status: str, seen: list[tuple[str, Any]]) -> None:
        self.until(
            lambda name, data: name == "status" and data["status"] == status,
            seen,
            f"status {status!r}",
        )

    def close(self) -> None:
        self.conn.close()


def test_a_client_follows_a_run_pause_and_resume_over_daphne(server, support_agent, reviewer):
    mine = api_token_create(user=support_agent)[1]
    theirs = api_token_create(user=reviewer)[1]
    started = call(
        server,
        "POST",
        "/api/threads",
        mine,
        {"agent": "approve", "input": {"messages": [{"role": "user", "content": "pay 42"}]}},
    )
    thread_id = started["thread_id"]

    stream = EventReader(server, f"/api/threads/{thread_id}/events", mine)
    seen: list[tuple[str, Any]] = []
    stream.until_status("interrupted", seen)  # the snapshot, or the run's own event
    pending = call(server, "GET", f"/api/threads/{thread_id}", mine)["pending_interrupt"]

    call(
        server,
        "POST",
        f"/api/threads/{thread_id}/resume",
        theirs,
        {"resume": {"approved": True}, "resume_interrupt_id": pending["id"]},
    )
    after: list[tuple[str, Any]] = []
    stream.until_status("done", after)
    # The request's news is published by the web process once the decision commits, and
    # the worker, woken by the same commit, may finish the run first: the two come from
    # different processes, so only their arrival is promised, not their order.
    if not any(name == "html" and pending["id"] in data for name, data in after):
        stream.until(
            lambda name, data: name == "html" and pending["id"] in data,
            after,
            f"news of request {pending['id']}",
        )
    stream.close()

    names = [name for name, _ in after]
    # Live: the pages' swaps (the request's news), the resumed run's words as they
    # stream, and the run's end.
    assert "html" in names and "chunk" in names, names
    assert ("status", {"status": "done"}) in [
        (n, {"status": d["status"]}) for n, d in after if n == "status"
    ], names


def test_a_server_drops_a_stream_its_client_left(server, support_agent, transactional_db):
    token = api_token_create(user=support_agent)[1]
    thread_id = call(
        server,
        "POST",
        "/api/threads",
        token,
        {"agent": "approve", "input": {"messages": [{"role": "user", "content": "pay 1"}]}},
    )["thread_id"]
    for _ in range(3):
        stream = EventReader(server, f"/api/threads/{thread_id}/events", token)
        assert stream.event()[0] == "status"
        stream.close()
    # Still serving: the streams that were left did not hold it up.
    assert call(server, "GET", f"/api/threads/{thread_id}", token)["id"] == thread_id
