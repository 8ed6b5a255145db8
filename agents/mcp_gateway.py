"""An MCP approval gateway: an MCP server (stdio) in front of other MCP servers.

It lists the upstream servers' tools unchanged. A call that a rule marks ``ask`` becomes
a request in the reviewer portal (``source: mcp``) showing the tool, its arguments and
the calling client; a reviewer approves it, edits the arguments (checked against the
tool's ``inputSchema``) or refuses it with a reason. Only then is the call forwarded, and
the upstream's result returned. A refusal, an expiry, an unreachable portal or anything
else returns an MCP error result saying why: it fails closed. Each call's idempotency key
is kept in a state file before it is asked, so a gateway restarted mid-wait asks once.

``python -m agents.mcp_gateway --config gateway.toml`` (docs/mcp-gateway.md).
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import hashlib
import json
import os
import string
import sys
import tomllib
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

# The SDK's own HTTP client with its transports' timeouts (what its session groups use),
# so headers need no HTTP package of ours.
from mcp.shared._httpx_utils import create_mcp_http_client

from .portal_client import PortalClient, PortalError, Request

__all__ = ["Config", "Gateway", "Rule", "StateFile", "load_config", "main"]

ACTIONS = ("ask", "allow", "deny")
# What the reviewer may answer: go ahead, go ahead with other arguments, or refuse
# saying why (the text goes back to the calling client).
ANSWERS = ["accept", "edit", "response"]


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says what is wrong in it."""


@dataclass(frozen=True)
class Rule:
    """Which tools it covers (a name or ``fnmatch`` pattern, and/or destructive ones) and
    what the gateway does with their calls: ask the portal, allow or deny."""

    action: str
    tool: str | None = None
    destructive: bool | None = None

    def matches(self, tool: types.Tool) -> bool:
        if self.tool is not None and not fnmatch.fnmatchcase(tool.name, self.tool):
            return False
        return self.destructive is None or destructive(tool) == self.destructive


def destructive(tool: types.Tool) -> bool:
    """MCP's defaults: a tool is destructive unless it says it is read-only or not
    destructive (hints from the upstream server, which the operator chose to trust)."""
    hints = tool.annotations
    if hints is None:
        return True
    return hints.read_only_hint is not True and hints.destructive_hint is not False


@dataclass(frozen=True)
class Upstream:
    """One server behind the gateway: a ``command`` it starts (stdio), or the ``url`` of
    one that serves streamable HTTP, with ``headers`` sent on each of its requests."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)


UPSTREAM_KEYS = {"name", "command", "args", "env", "cwd", "url", "headers"}


def _upstream(raw: dict[str, Any], where: str) -> Upstream:
    """An ``[[upstream]]`` table: a name, and a command or an http(s) url (``headers``
    only with a url; ``${VAR}`` in a header's value is read from the environment)."""
    if not raw.get("name") or bool(raw.get("command")) == bool(raw.get("url")):
        raise ConfigError(f"{where} needs a name, and a command or a url (one of them)")
    unknown = sorted(set(raw) - UPSTREAM_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; it takes {sorted(UPSTREAM_KEYS)}")
    url = str(raw.get("url") or "")
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: url {url!r} is not http:// or https:// (streamable HTTP)")
    headers = raw.get("headers") or {}
    if headers and not url:
        raise ConfigError(f"{where}: headers are sent to a url; a command takes env instead")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ConfigError(f"{where}: headers is a table of names to text values")
    filled = {}
    for name, value in headers.items():
        try:
            filled[str(name)] = string.Template(value).substitute(os.environ)
        except KeyError as missing:  # fail closed: never send a header with a hole in it
            raise ConfigError(f"{where}: header {name} names {missing}, which is not set") from None
        except ValueError as exc:
            raise ConfigError(f"{where}: header {name}: {exc}") from None
    return Upstream(**{**raw, "headers": filled})


@dataclass(frozen=True)
class Config:
    portal_url: str
    token: str
    agent: str
    upstreams: list[Upstream]
    rules: list[Rule]
    default: str = "ask"
    state_file: Path = Path("mcp-gateway-state.json")
    expires_in: int | None = None
    wait_seconds: float | None = None  # None: wait until the request leaves the queue
    timeout: float = 30.0

    def action_for(self, tool: types.Tool) -> str:
        """The first matching rule's action, else the default."""
        return next((rule.action for rule in self.rules if rule.matches(tool)), self.default)


def _action(value: Any, where: str) -> str:
    if value not in ACTIONS:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(ACTIONS)}")
    return str(value)


def load_config(path: Path) -> Config:
    """Read the gateway's one configuration file (TOML, or JSON when it ends in .json)."""
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'TOML'}: {exc}") from None
    portal = data.get("portal") or {}
    token = portal.get("token") or os.environ.get(portal.get("token_env", "PORTAL_TOKEN"), "")
    if not portal.get("url") or not token:
        raise ConfigError(
            f"{path}: [portal] needs url, and token or token_env naming a variable that is set"
        )
    upstreams = [
        _upstream(raw, f"{path}: upstream {i + 1}")
        for i, raw in enumerate(data.get("upstream") or [])
    ]
    if not upstreams:
        raise ConfigError(f"{path}: no [[upstream]] server to put the gateway in front of")
    rules = []
    for i, raw in enumerate(data.get("rules") or []):
        unknown = set(raw) - {"tool", "destructive", "action"}
        if unknown or ("tool" not in raw and "destructive" not in raw):
            raise ConfigError(
                f"{path}: rule {i + 1} takes tool (a name or pattern) and/or destructive "
                f"(true or false), and action; not {sorted(unknown) or 'nothing to match'}"
            )
        action = _action(raw.get("action"), f"{path}: rule {i + 1}'s action")
        rules.append(Rule(action, raw.get("tool"), raw.get("destructive")))
    base = path.parent
    state = Path(os.path.expanduser(data.get("state_file", f"{path.stem}.state.json")))
    return Config(
        portal_url=portal["url"],
        token=token,
        agent=portal.get("agent", "mcp-gateway"),
        upstreams=upstreams,
        rules=rules,
        default=_action(data.get("default", "ask"), f"{path}: default"),
        state_file=state if state.is_absolute() else base / state,
        expires_in=portal.get("expires_in"),
        wait_seconds=portal.get("wait_seconds"),
        timeout=float(portal.get("timeout", 30.0)),
    )


class StateFile:
    """The idempotency keys of calls asked and not yet settled, per call (client, tool,
    arguments), written to disk before the portal is asked. A call that comes again after
    a restart takes the key it had, so the portal returns the first request. A call that
    was being forwarded when the gateway stopped is never forwarded again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = asyncio.Lock()
        self.live: set[str] = set()  # keys a call in this process is using now
        self.entries: dict[str, list[dict[str, str]]] = {}
        if path.exists():
            try:
                self.entries = json.loads(path.read_text() or "{}")
            except ValueError as exc:
                raise ConfigError(f"{path}: the state file is not JSON ({exc})") from None

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as out:
            json.dump(self.entries, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    async def take(self, call: str) -> dict[str, str]:
        """The entry for this call: one left by an earlier gateway, else a new one."""
        async with self.lock:
            for entry in self.entries.get(call, []):
                if entry["key"] not in self.live:
                    self.live.add(entry["key"])
                    return entry
            entry = {"key": f"mcp-{uuid.uuid4().hex}", "stage": "asking"}
            self.entries.setdefault(call, []).append(entry)
            self.live.add(entry["key"])
            await asyncio.to_thread(self._write)
            return entry

    async def mark(self, call: str, entry: dict[str, str], stage: str) -> None:
        async with self.lock:
            entry["stage"] = stage
            await asyncio.to_thread(self._write)

    async def settle(self, call: str, entry: dict[str, str]) -> None:
        async with self.lock:
            left = [e for e in self.entries.get(call, []) if e["key"] != entry["key"]]
            if left:
                self.entries[call] = left
            else:
                self.entries.pop(call, None)
            self.live.discard(entry["key"])
            await asyncio.to_thread(self._write)

    async def release(self, entry: dict[str, str]) -> None:
        async with self.lock:
            self.live.discard(entry["key"])


def refusal(text: str) -> types.CallToolResult:
    """An MCP error result: the calling model reads why the call did not run."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _call_id(client: str, upstream: str, tool: str, arguments: dict[str, Any]) -> str:
    what = json.dumps([client, upstream, tool, arguments], sort_keys=True, default=str)
    return hashlib.sha256(what.encode()).hexdigest()


def _reason(request: Request) -> str:
    answer = request.answer
    if answer is None:
        return f"the request {request.status} without an answer"
    who = answer.decided_by or "the portal"
    said = ""
    if isinstance(answer.value, dict) and isinstance(answer.value.get("args"), str):
        said = answer.value["args"]
    said = said or answer.note
    if answer.outcome == "expired":
        return "the request expired before a reviewer answered"
    return f"{answer.outcome} by {who}" + (f": {said}" if said else "")


class Gateway:
    """The gateway's MCP server and its connections to the upstream servers."""

    def __init__(self, config: Config, *, portal: PortalClient | None = None) -> None:
        self.config = config
        self.portal = portal or PortalClient(
            config.portal_url, config.token, timeout=config.timeout
        )
        self.state = StateFile(config.state_file)
        self.tools: dict[str, tuple[str, Client, types.Tool]] = {}
        self.server: Server[Any] = Server(
            "portal-mcp-gateway", on_list_tools=self.list_tools, on_call_tool=self.call_tool
        )

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[Gateway]:
        """Connect to every upstream and learn its tools (two with one name: refused)."""
        async with AsyncExitStack() as stack:
            for upstream in self.config.upstreams:
                target: Any
                if upstream.url:
                    http = await stack.enter_async_context(
                        create_mcp_http_client(headers=upstream.headers or None)
                    )
                    target = streamable_http_client(upstream.url, http_client=http)
                else:
                    target = StdioServerParameters(
                        command=upstream.command,
                        args=upstream.args,
                        env=upstream.env,
                        cwd=upstream.cwd,
                    )
                client = await stack.enter_async_context(Client(target))
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    for tool in page.tools:
                        if tool.name in self.tools:
                            raise ConfigError(
                                f"the tool {tool.name!r} is offered by both "
                                f"{self.tools[tool.name][0]!r} and {upstream.name!r}"
                            )
                        self.tools[tool.name] = (upstream.name, client, tool)
                    cursor = page.next_cursor
                    if not cursor:
                        break
            yield self

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool for _, _, tool in self.tools.values()])

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        found = self.tools.get(params.name)
        if found is None:
            return refusal(f"there is no tool {params.name!r} behind this gateway")
        upstream, client, tool = found
        arguments = dict(params.arguments or {})
        action = self.config.action_for(tool)
        if action == "deny":
            return refusal(f"the gateway's rules do not allow {tool.name!r}")
        if action == "allow":
            return await client.call_tool(tool.name, arguments)
        try:
            return await self._ask_then_call(ctx, upstream, client, tool, arguments)
        except Exception as exc:  # fail closed, saying why
            return refusal(f"the call was not made: {exc}")

    async def _ask_then_call(
        self, ctx: Any, upstream: str, client: Client, tool: types.Tool, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        caller = _client_name(ctx)
        call = _call_id(caller, upstream, tool.name, arguments)
        entry = await self.state.take(call)
        try:
            if entry["stage"] == "forwarding":
                # An earlier gateway stopped while forwarding it: it may have run.
                await self.state.settle(call, entry)
                return refusal(
                    f"the gateway stopped while forwarding this approved call to "
                    f"{tool.name!r}; it may have run, so it is not made again"
                )
            try:
                request = await self._ask(entry["key"], caller, upstream, tool, arguments)
            except PortalError as exc:
                return refusal(f"the reviewer portal did not take the request: {exc}")
            answer = request.answer
            if request.pending or answer is None:
                if request.pending:
                    return refusal(
                        f"no answer yet to portal request {request.id}; call again with the "
                        "same arguments to keep waiting for it"
                    )
                await self.state.settle(call, entry)
                return refusal(f"refused in the reviewer portal: {_reason(request)}")
            if not answer.goes_ahead:
                await self.state.settle(call, entry)
                return refusal(f"refused in the reviewer portal: {_reason(request)}")
            approved: Any = arguments
            if answer.outcome == "edited" and isinstance(answer.value, dict):
                approved = answer.value.get("args")
                if not isinstance(approved, dict):
                    await self.state.settle(call, entry)
                    return refusal("the edited arguments are not an object; not forwarded")
            await self.state.mark(call, entry, "forwarding")
            result = await client.call_tool(tool.name, approved)
            await self.state.settle(call, entry)
            return result
        finally:
            await self.state.release(entry)

    async def _ask(
        self, key: str, caller: str, upstream: str, tool: types.Tool, arguments: dict[str, Any]
    ) -> Request:
        shown = json.dumps(arguments, indent=2, sort_keys=True)
        request = await self.portal.araise_request(
            agent=self.config.agent,
            title=f"{tool.name} for {caller}"[:200],
            message=(
                f"**{caller}** wants to call the tool **{tool.name}** of the MCP server "
                f"**{upstream}**.\n\n{tool.description or ''}\n\n```json\n{shown}\n```"
            ),
            summary=f"Call {tool.name} ({upstream}) for {caller}"[:200],
            payload={
                "tool": tool.name,
                "server": upstream,
                "client": caller,
                "arguments": arguments,
            },
            reason="mcp_tool_call",
            actions=ANSWERS,
            args=arguments,
            args_schema=tool.input_schema,
            expires_in=self.config.expires_in,
            external_ref=f"{upstream}/{tool.name}"[:200],
            idempotency_key=key,
            source="mcp",
        )
        if not request.pending:
            return request
        return await self.portal.await_answer(request.id, timeout=self.config.wait_seconds)

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())


def _client_name(ctx: Any) -> str:
    params = getattr(getattr(ctx, "session", None), "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", "") or "an unnamed MCP client"
    version = getattr(info, "version", "")
    return f"{name} {version}".strip()[:100]


async def run(config: Config) -> None:
    gateway = Gateway(config)
    async with gateway.connected():
        await gateway.serve_stdio()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.mcp_gateway", description=__doc__)
    parser.add_argument("--config", required=True, type=Path, help="the TOML or JSON file")
    options = parser.parse_args(argv)
    try:
        asyncio.run(run(load_config(options.config)))
    except (ConfigError, OSError) as exc:
        print(f"mcp_gateway: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
