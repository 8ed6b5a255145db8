"""A fake OpenAI-compatible chat completions server on loopback, for tests and demos.

It speaks enough of the real protocol for the ``openai`` package to parse it: streamed
``chat.completion.chunk`` events over SSE (text split into word deltas, tool calls split
into id/name/argument fragments, a ``finish_reason``, then ``data: [DONE]``) and plain JSON
completions. Responses are queued in order; each request takes the first queued response
whose ``match`` regex fits the latest message (no ``match`` fits anything).

In a test::

    with FakeOpenAI() as fake:
        fake.queue_error(500)
        fake.queue_tool_call("check_balance")
        fake.queue_text("Your balance is $50,000.")
        model = OpenAIChatModel("gpt-test", base_url=fake.base_url)

As a process (end-to-end tests)::

    python -m agents.testing.fake_openai --port 0 --script responses.json

prints its base URL on the first line of stdout (``--certfile`` and ``--keyfile``: HTTPS,
with a certificate the clients must trust). The script file holds a list of
responses, or ``{"responses": [...], "default": {...}}``; each response is a dict as
``queue()`` takes it: ``{"text": "..."}``, ``{"tool_calls": [{"name": ..., "arguments":
{...}}], "text": "..."}`` or ``{"error": 500, "message": "..."}``, plus optional ``times``,
``forever``, ``match``, ``break_after`` and ``retry_after``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import signal
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

_TOKEN = re.compile(r"\s*\S+|\s+")


@dataclass
class FakeResponse:
    """One scripted answer. ``times`` is how many requests it serves (``forever`` ignores
    it); ``break_after`` cuts the connection after that many content chunks."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: int | None = None
    message: str = ""
    retry_after: float | None = None
    times: int = 1
    forever: bool = False
    match: str | None = None
    break_after: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FakeResponse:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                f"unknown keys {sorted(unknown)} in fake response; use {sorted(known)}"
            )
        return cls(**data)

    def fits(self, body: dict[str, Any]) -> bool:
        if self.match is None:
            return True
        messages = body.get("messages") or [{}]
        content = messages[-1].get("content") or ""
        return re.search(self.match, str(content), re.IGNORECASE) is not None


class FakeOpenAI:
    """The server. Use as a context manager, or ``start()`` / ``stop()``.

    ``requests`` holds every request body (parsed JSON) in arrival order; ``sent_at`` the
    wall time (``time.time()``) each streamed text chunk was flushed to the socket.
    ``chunk_delay`` spaces streamed chunks out, to make latency measurable. ``tls`` (a
    server context holding a certificate) serves HTTPS instead, as a model provider does.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        chunk_delay: float = 0.0,
        default: FakeResponse | dict[str, Any] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.chunk_delay = chunk_delay
        self.default = FakeResponse.from_dict(default) if isinstance(default, dict) else default
        self.requests: list[dict[str, Any]] = []
        # The client's address of each request, in order: one address for two requests is
        # one connection, kept alive between them.
        self.connections: list[tuple[str, int]] = []
        self.headers: list[dict[str, str]] = []  # each request's, names in lower case
        self.sent_at: list[float] = []
        self._queue: list[FakeResponse] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._scheme = "http"
        if tls is not None:
            # The handshake happens on a request's first read, in its handler's thread.
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
            self._scheme = "https"
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}/v1"

    # -- scripting -------------------------------------------------------------------

    def queue(self, response: FakeResponse | dict[str, Any] | None = None, **fields: Any) -> None:
        """Queue one response: a ``FakeResponse``, a dict of its fields, or the fields."""
        if response is None:
            response = FakeResponse(**fields)
        elif isinstance(response, dict):
            response = FakeResponse.from_dict({**response, **fields})
        with self._lock:
            self._queue.append(response)

    def queue_text(self, text: str, **options: Any) -> None:
        self.queue(text=text, **options)

    def queue_tool_call(self, name: str, /, text: str = "", **arguments: Any) -> None:
        """Queue one tool call with keyword arguments (and optional text before it)."""
        self.queue(text=text, tool_calls=[{"name": name, "arguments": arguments}])

    def queue_tool_calls(self, *calls: dict[str, Any], text: str = "", **options: Any) -> None:
        """Queue several calls: ``{"name": ..., "arguments": dict or raw JSON text}``."""
        self.queue(text=text, tool_calls=list(calls), **options)

    def queue_error(
        self, status: int, *, times: int = 1, message: str = "", **options: Any
    ) -> None:
        self.queue(error=status, times=times, message=message, **options)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _take(
        self, body: dict[str, Any], client: tuple[str, int], headers: dict[str, str]
    ) -> FakeResponse | None:
        with self._lock:
            self.requests.append(body)
            self.connections.append(client)
            self.headers.append(headers)
            for position, response in enumerate(self._queue):
                if not response.fits(body):
                    continue
                if not response.forever:
                    response.times -= 1
                    if response.times <= 0:
                        del self._queue[position]
                return response
            return self.default

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-stream (a timeout, a cancelled test) is expected.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so streams use chunked encoding: a cut connection then reads as a broken
    # body to the client, not as a normal end of the response.
    protocol_version = "HTTP/1.1"
    # Each header block and chunk is its own write: with Nagle's algorithm on, a kept-alive
    # connection's second write waits for the client's delayed ACK. Model servers built on
    # asyncio send at once (it sets TCP_NODELAY), and so does this one.
    disable_nagle_algorithm = True
    server: _Server

    @property
    def fake(self) -> FakeOpenAI:
        return self.server.fake

    def log_message(self, format: str, *args: Any) -> None:
        return None  # keep test output clean

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, _error_body(f"no route {self.path}", "not_found"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, _error_body("request body is not JSON", "invalid_request"))
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        response = self.fake._take(body, self.client_address[:2], headers)
        if response is None:
            number = len(self.fake.requests)
            self._send_json(
                400, _error_body(f"fake_openai: no response queued for request #{number}")
            )
        elif response.error is not None:
            headers = {}
            if response.retry_after is not None:
                headers["Retry-After"] = str(response.retry_after)
            message = response.message or f"fake_openai: scripted HTTP {response.error}"
            self._send_json(response.error, _error_body(message), headers)
        elif body.get("stream"):
            self._stream(body, response)
        else:
            self._send_json(200, self._completion(body, response))

    def do_GET(self) -> None:
        self._send_json(404, _error_body(f"no route {self.path}", "not_found"))

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _completion(self, body: dict[str, Any], response: FakeResponse) -> dict[str, Any]:
        calls = _calls(response, next(self.fake._ids))
        message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{next(self.fake._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _stream(self, body: dict[str, Any], response: FakeResponse) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {
            "id": f"chatcmpl-{next(self.fake._ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }

        def event(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            self._write_event(json.dumps({**base, "choices": [choice]}))

        event({"role": "assistant", "content": ""})
        sent = 0
        for token in _TOKEN.findall(response.text):
            if response.break_after is not None and sent >= response.break_after:
                self._cut()
                return
            if self.fake.chunk_delay:
                time.sleep(self.fake.chunk_delay)
            event({"content": token})
            self.fake.sent_at.append(time.time())
            sent += 1
        calls = _calls(response, next(self.fake._ids))
        for index, call in enumerate(calls):
            fn = call["function"]
            event(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
            # Real servers send arguments in several pieces; so do we.
            args = fn["arguments"]
            step = max(1, len(args) // 3)
            for start in range(0, len(args), step):
                piece = args[start : start + step]
                event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        if response.break_after is not None:
            self._cut()
            return
        event({}, "tool_calls" if calls else "stop")
        self._write_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _cut(self) -> None:
        # Drop the connection without the closing chunk, as a crashed server would.
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(2)


def _calls(response: FakeResponse, seed: int) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(response.tool_calls):
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(
            {
                "id": call.get("id") or f"call_fake{seed}_{index}",
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    return calls


def _error_body(message: str, code: str = "fake_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


def load_script(path: str | Path) -> tuple[list[FakeResponse], FakeResponse | None]:
    """Read a script file: a list of responses or ``{"responses": [...], "default": {}}``."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, list):
        data = {"responses": data}
    responses = [FakeResponse.from_dict(item) for item in data.get("responses", [])]
    default = data.get("default")
    return responses, FakeResponse.from_dict(default) if default else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", help="JSON file of queued responses")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds per chunk")
    parser.add_argument("--certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--keyfile", help="the certificate's private key (PEM)")
    options = parser.parse_args(argv)
    responses, default = load_script(options.script) if options.script else ([], None)
    tls = None
    if options.certfile:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(options.certfile, options.keyfile)
    fake = FakeOpenAI(
        options.host, options.port, chunk_delay=options.chunk_delay, default=default, tls=tls
    )
    for response in responses:
        fake.queue(response)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(fake.base_url, flush=True)
    try:
        fake._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        fake._server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
