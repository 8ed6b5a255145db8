"""The MCP approval gateway end to end: a real MCP client session, the gateway as a
subprocess over stdio, a real upstream MCP server (written here) whose tool appends to a
file, and a live portal where a reviewer decides."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from django.db import connection
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from portal.accounts.tokens import api_token_create
from portal.errors import InvalidDecision
from portal.models import ExternalRequest, Interrupt
from portal.reviews.decisions import decision_submit
from portal.reviews.expiry import interrupt_expire
from tests.factories import make_user
from tests.liveserver import ROOT, live_portal
from tests.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_gateway")]

UPSTREAM = textwrap.dedent(
    '''
    """An upstream MCP server with one tool that writes and one that reads."""
    from pathlib import Path

    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("files")


    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def append_line(path: str, text: str) -> str:
        """Append a line of text to a file."""
        with open(path, "a") as out:
            out.write(text + "\\n")
        return f"appended {len(text)} characters"


    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def read_lines(path: str) -> str:
        """Read a file."""
        return Path(path).read_text() if Path(path).exists() else ""


    server.run()
    '''
)


# The same, serving streamable HTTP on loopback behind a bearer token (the gateway's
# ``headers``): a request without it gets 401 and never reaches the MCP server.
HTTP_UPSTREAM = textwrap.dedent(
    '''
    """An upstream MCP server over streamable HTTP with one tool that writes."""
    import os
    import sys

    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("tickets")


    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def file_ticket(path: str, title: str) -> str:
        """File a ticket (a line in a file)."""
        with open(path, "a") as out:
            out.write(title + "\\n")
        return f"filed {title!r}"


    app = server.streamable_http_app()
    expected = f"Bearer {os.environ['UPSTREAM_TOKEN']}".encode()


    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await app(scope, receive, send)


    uvicorn.run(guarded, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    '''
)
UPSTREAM_TOKEN = "upstream-secret"


@pytest.fixture(scope="module")
def http_upstream(tmp_path_factory) -> Iterator[str]:
    """The streamable-HTTP upstream in a process of its own; yields its MCP URL."""
    where = tmp_path_factory.mktemp("http-upstream")
    (where / "upstream.py").write_text(HTTP_UPSTREAM)
    port = free_port()
    env = {**os.environ, "UPSTREAM_TOKEN": UPSTREAM_TOKEN}
    log = (where / "upstream.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(where / "upstream.py"), str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the HTTP upstream exited: {(where / 'upstream.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP upstream did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    with django_db_blocker.unblock(), live_portal(tmp_path_factory.mktemp("mcp")) as base:
        yield base


@pytest.fixture
def token(server, transactional_db, roles) -> str:
    return api_token_create(user=make_user("mcp-gateway", role="agent"), scopes=["request"])[1]


DOCS = ROOT / "docs" / "mcp-gateway.md"


def _block(lang: str) -> str:
    found = re.findall(rf"```{lang}\n(.*?)```", DOCS.read_text(), re.S)
    assert len(found) == 1, f"docs/mcp-gateway.md should have one {lang} block"
    return found[0]


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, f"docs/mcp-gateway.md no longer says {old!r}"
    return text.replace(old, new)


def write_config(tmp_path: Path, portal_url: str, http_upstream: str = "") -> Path:
    """docs/mcp-gateway.md's configuration, with this test's portal and upstream (and,
    given ``http_upstream``, its streamable-HTTP upstream uncommented, at that URL)."""
    (tmp_path / "upstream.py").write_text(UPSTREAM)
    text = _swap(_block("toml"), 'url = "http://127.0.0.1:8000"', f'url = "{portal_url}"')
    text = _swap(text, 'command = "python"', f'command = "{sys.executable}"')
    text = _swap(text, 'args = ["files_server.py"]', f'args = ["{tmp_path / "upstream.py"}"]')
    if http_upstream:
        for line in ("[[upstream]]", 'name = "tickets"', "headers = {"):
            text = _swap(text, f"# {line}", line)
        text = _swap(text, '# url = "http://127.0.0.1:9000/mcp"', f'url = "{http_upstream}"')
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    return config


def gateway(config: Path, token: str) -> StdioServerParameters:
    """The gateway as docs/mcp-gateway.md tells a desktop client to start it (with the
    variable its streamable-HTTP upstream's header names, should the config use it)."""
    text = _swap(_block("json"), "/path/to/portal/.venv/bin/python", sys.executable)
    text = _swap(text, "/path/to/gateway.toml", str(config))
    text = _swap(_swap(text, "/path/to/portal", str(ROOT)), "<the token>", token)
    (entry,) = json.loads(text)["mcpServers"].values()
    env = {**entry["env"], "TICKETS_TOKEN": UPSTREAM_TOKEN}
    return StdioServerParameters(command=entry["command"], args=entry["args"], env=env)


def call_in_background(config: Path, token: str, tool: str, arguments: dict[str, Any]):
    """A desktop client's session through the gateway, in a thread; ``out`` gets the
    tools it listed and the call's result (or the error that ended the session)."""
    out: dict[str, Any] = {}

    async def session() -> None:
        info = types.Implementation(name="desk-client", version="1.0")
        async with Client(gateway(config, token), client_info=info) as client:
            out["tools"] = (await client.list_tools()).tools
            out["result"] = await client.call_tool(tool, arguments)

    def go() -> None:
        try:
            asyncio.run(session())
        except BaseException as exc:
            out["error"] = exc

    helper = threading.Thread(target=go, daemon=True)
    helper.start()
    return helper, out


def pending_request(timeout: float = 60) -> Interrupt:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = Interrupt.objects.filter(
            status=Interrupt.Status.PENDING, external__source="mcp"
        ).first()
        if found is not None:
            return found
        time.sleep(0.1)
    pytest.fail("the gateway raised no request in the portal")


def decide(request: Interrupt, reviewer, value) -> None:
    decision_submit(
        interrupt=request.pk, reviewer=reviewer, value=value, resume_interrupt_id=request.pk
    )
    connection.close()


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def finish(helper: threading.Thread, out: dict[str, Any]) -> types.CallToolResult:
    helper.join(timeout=60)
    assert "error" not in out, repr(out.get("error"))
    return out["result"]


def test_an_approved_call_is_forwarded_once_and_the_request_shows_tool_arguments_and_client(
    server, token, reviewer, tmp_path
):
    config = write_config(tmp_path, server)
    target = tmp_path / "notes.txt"
    helper, out = call_in_background(
        config, token, "append_line", {"path": str(target), "text": "hi"}
    )

    request = pending_request()
    assert not target.exists()
    assert request.value == {
        "tool": "append_line",
        "server": "files",
        "client": "desk-client 1.0",
        "arguments": {"path": str(target), "text": "hi"},
    }
    assert request.agent == "desk-files" and "desk-client" in request.message
    decide(request, reviewer, {"type": "accept"})
    result = finish(helper, out)

    assert not result.is_error and "appended 2 characters" in text(result)
    assert target.read_text() == "hi\n"
    assert [tool.name for tool in out["tools"]] == ["append_line", "read_lines"]
    assert out["tools"][0].annotations.destructive_hint is True


def test_an_edited_call_runs_with_the_edited_arguments_checked_against_the_tools_schema(
    server, token, reviewer, tmp_path
):
    config = write_config(tmp_path, server)
    target = tmp_path / "notes.txt"
    helper, out = call_in_background(
        config, token, "append_line", {"path": str(target), "text": "rm -rf"}
    )
    request = pending_request()

    with pytest.raises(InvalidDecision):
        decide(request, reviewer, {"type": "edit", "args": {"path": str(target)}})
    decide(request, reviewer, {"type": "edit", "args": {"path": str(target), "text": "ls"}})
    result = finish(helper, out)

    assert not result.is_error
    assert target.read_text() == "ls\n"


def test_a_refused_call_is_not_made_and_the_client_reads_the_reason(
    server, token, reviewer, tmp_path
):
    config = write_config(tmp_path, server)
    target = tmp_path / "notes.txt"
    helper, out = call_in_background(
        config, token, "append_line", {"path": str(target), "text": "x"}
    )

    decide(pending_request(), reviewer, {"type": "response", "args": "not on Fridays"})
    result = finish(helper, out)

    assert result.is_error and "not on Fridays" in text(result)
    assert reviewer.username in text(result)
    assert not target.exists()


def test_an_expired_request_is_a_refusal_saying_so_and_the_call_is_not_made(
    server, token, reviewer, tmp_path
):
    config = write_config(tmp_path, server)
    target = tmp_path / "notes.txt"
    helper, out = call_in_background(
        config, token, "append_line", {"path": str(target), "text": "late"}
    )

    interrupt_expire(interrupt=pending_request(), user=reviewer)  # as its deadline would
    connection.close()
    result = finish(helper, out)

    assert result.is_error and "expired before a reviewer answered" in text(result)
    assert not target.exists()


def test_a_read_only_tool_an_allow_rule_covers_goes_straight_through(server, token, tmp_path):
    config = write_config(tmp_path, server)
    (tmp_path / "notes.txt").write_text("kept\n")
    helper, out = call_in_background(
        config, token, "read_lines", {"path": str(tmp_path / "notes.txt")}
    )

    result = finish(helper, out)

    assert text(result) == "kept\n" and not ExternalRequest.objects.exists()


def _gateway_pid(config: Path) -> int:
    """The gateway this test process started for ``config`` (a child process)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == os.getpid() and str(config).encode() in command:
                return int(entry.name)
        time.sleep(0.1)
    pytest.fail("the gateway process was not found")


def test_a_gateway_killed_while_it_waits_asks_once_when_restarted_and_writes_once(
    server, token, reviewer, tmp_path
):
    config = write_config(tmp_path, server)
    target = tmp_path / "notes.txt"
    arguments = {"path": str(target), "text": "once"}
    first, first_out = call_in_background(config, token, "append_line", arguments)
    request = pending_request()

    os.kill(_gateway_pid(config), signal.SIGKILL)
    first.join(timeout=60)
    assert "result" not in first_out  # the client saw its gateway die
    second, second_out = call_in_background(config, token, "append_line", arguments)
    time.sleep(3)  # the restarted gateway asks again, with the key it kept
    decide(request, reviewer, {"type": "accept"})
    result = finish(second, second_out)

    assert not result.is_error, text(result)
    assert ExternalRequest.objects.count() == 1
    assert target.read_text() == "once\n"


def test_a_portal_that_cannot_be_reached_refuses_the_call(server, token, tmp_path):
    config = write_config(tmp_path, f"http://127.0.0.1:{free_port()}")
    target = tmp_path / "notes.txt"
    helper, out = call_in_background(
        config, token, "append_line", {"path": str(target), "text": "x"}
    )

    result = finish(helper, out)

    assert result.is_error and "cannot be reached" in text(result)
    assert not target.exists()


def test_a_streamable_http_upstream_is_listed_and_an_approved_call_reaches_it_once(
    server, token, reviewer, tmp_path, http_upstream
):
    config = write_config(tmp_path, server, http_upstream)
    target = tmp_path / "tickets.txt"
    helper, out = call_in_background(
        config, token, "file_ticket", {"path": str(target), "title": "printer on fire"}
    )

    request = pending_request()
    assert request.value["server"] == "tickets" and request.value["tool"] == "file_ticket"
    assert not target.exists()
    decide(request, reviewer, {"type": "accept"})
    result = finish(helper, out)

    assert not result.is_error, text(result)
    assert "filed 'printer on fire'" in text(result)
    assert target.read_text() == "printer on fire\n"
    assert [t.name for t in out["tools"]] == ["append_line", "read_lines", "file_ticket"]


def test_a_refused_call_never_reaches_the_streamable_http_upstream(
    server, token, reviewer, tmp_path, http_upstream
):
    config = write_config(tmp_path, server, http_upstream)
    target = tmp_path / "tickets.txt"
    helper, out = call_in_background(
        config, token, "file_ticket", {"path": str(target), "title": "reboot prod"}
    )

    decide(pending_request(), reviewer, {"type": "response", "args": "not during the sale"})
    result = finish(helper, out)

    assert result.is_error and "not during the sale" in text(result)
    assert not target.exists()
