"""A chat model on any OpenAI-compatible chat completions endpoint.

Retries are ours, not the ``openai`` package's, for one reason: a streamed answer that
already reached the user must never be sent twice. So a failed attempt is retried only
when nothing from it was delivered through ``on_delta``; a stream that breaks after text
went out raises ``ModelError`` and the caller decides what to do with the half answer.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpx2  # the openai package's HTTP client
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from agents.models.base import DeltaCallback, ModelError
from agents.state import Message, new_id

# 408 and 429 say "try again later"; any 5xx is the server's fault. Everything else in
# 4xx (bad request, auth, not found) fails the same way on every attempt.
_RETRYABLE_STATUS = frozenset({408, 429})


def _is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE_STATUS or status >= 500


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The certificates the openai package's client trusts by default, loaded once per
    process: loading them costs tens of milliseconds of CPU, and a worker builds its
    agent's model, and so a client, for each run."""
    return httpx2.create_ssl_context()


class _StreamBroken(Exception):
    """The connection failed while chunks were being read."""


@dataclass
class _Assembly:
    """What one streamed attempt has produced so far."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    delivered: bool = False  # at least one delta reached on_delta
    usage: dict[str, Any] | None = None

    def add_call_fragment(self, fragment: Any) -> None:
        call = self.calls.setdefault(
            fragment.index,
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if fragment.id:
            call["id"] = fragment.id
        fn = fragment.function
        if fn is not None:
            if fn.name:
                call["function"]["name"] += fn.name
            if fn.arguments:
                call["function"]["arguments"] += fn.arguments

    def tool_calls(self) -> list[dict[str, Any]] | None:
        calls = [self.calls[index] for index in sorted(self.calls)]
        for call in calls:
            call["id"] = call["id"] or new_id("call")
            call["function"]["arguments"] = call["function"]["arguments"] or "{}"
        return calls or None


class OpenAIChatModel:
    """``ChatModel`` over the ``openai`` package's ``AsyncOpenAI`` with streaming.

    ``api_key`` and ``base_url`` default to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. A
    local OpenAI-compatible server (``base_url`` set) needs no key. Failures with status
    408, 429 or 5xx, timeouts and connection errors are retried ``max_retries`` times with
    exponential backoff (``backoff`` * 2**n, capped at ``backoff_max``, with jitter).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        timeout: float = 30.0,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            raise ModelError(
                f"model {model!r} needs OpenAI credentials: set OPENAI_API_KEY (or "
                "OPENAI_BASE_URL for an OpenAI-compatible server), or use a scripted "
                "model such as 'scripted' to run offline."
            )
        self.name = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._client = openai.AsyncOpenAI(
            # Local OpenAI-compatible servers ignore the key, but the client insists on one.
            api_key=api_key or "not-needed",
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=_tls_context()),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def agenerate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> Message:
        params: dict[str, Any] = {
            "model": self.name,
            "messages": [message.to_openai() for message in messages],
            "stream": True,
        }
        if tools:
            params["tools"] = tools
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            assembly = _Assembly()
            try:
                await self._stream_once(params, assembly, on_delta)
            except openai.APIStatusError as exc:
                cause = f"HTTP {exc.status_code}: {_error_text(exc)}"
                if not _is_retryable_status(exc.status_code):
                    raise ModelError(
                        f"model {self.name!r} refused the request ({cause}); not retried "
                        f"because the same request would fail again (attempt {attempt})"
                    ) from exc
                failure: Exception = exc
                retry_after = _retry_after(exc)
            except (openai.APIConnectionError, _StreamBroken) as exc:
                cause = _connection_cause(exc)
                failure, retry_after = exc, None
            else:
                return self._message(assembly, attempt)
            if assembly.delivered:
                raise ModelError(
                    f"model {self.name!r} stream broke after text was sent ({cause}) on "
                    f"attempt {attempt}; not retried so the text is not sent twice"
                ) from failure
            if attempt == attempts:
                raise ModelError(
                    f"model {self.name!r} failed after {attempts} attempt"
                    f"{'s' if attempts > 1 else ''}; last error: "
                    f"{cause} (from {self.base_url})"
                ) from failure
            await asyncio.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stream_once(
        self, params: dict[str, Any], assembly: _Assembly, on_delta: DeltaCallback | None
    ) -> None:
        # The body goes as it is: ``chat.completions.create`` would first walk every
        # message against the request's typed schema, at a cost in CPU that grows with the
        # history on every call, to change nothing in plain JSON such as ``to_openai()``'s.
        stream = await self._client.post(
            "/chat/completions",
            body=params,
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        try:
            chunks = stream.__aiter__()
            while True:
                # Only the transport is guarded here: an exception from on_delta is the
                # caller's and propagates unchanged.
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the HTTP library's read errors, SSE error events
                    raise _StreamBroken(_root_cause(exc)) from exc
                if chunk.usage is not None:
                    assembly.usage = chunk.usage.model_dump()
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    delta = choice.delta
                    for fragment in delta.tool_calls or []:
                        assembly.add_call_fragment(fragment)
                    if delta.content:
                        assembly.text.append(delta.content)
                        if on_delta is not None:
                            assembly.delivered = True
                            await on_delta(delta.content)
                    if choice.finish_reason:
                        assembly.finish_reason = choice.finish_reason
        finally:
            await stream.close()
        if assembly.finish_reason is None:
            # The real API always ends with a finish_reason; its absence means the
            # connection was cut between chunks.
            raise _StreamBroken("stream ended without a finish_reason")

    def _message(self, assembly: _Assembly, attempt: int) -> Message:
        meta: dict[str, Any] = {
            "model": self.name,
            "finish_reason": assembly.finish_reason,
            "attempts": attempt,
        }
        if assembly.usage:
            meta["usage"] = assembly.usage
        return Message(
            role="assistant",
            content="".join(assembly.text),
            tools_calls=assembly.tool_calls(),
            meta=meta,
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff * 2.0 ** (attempt - 1))
        # Jitter keeps many clients that failed together from retrying together.
        delay *= random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    async def aclose(self) -> None:
        await self._client.close()


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return exc.message


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _connection_cause(exc: Exception) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"connection error: {_root_cause(exc)}"
    return f"stream broke: {exc}"


def _root_cause(exc: BaseException) -> str:
    # The SDK wraps transport errors in a generic "Connection error."; the cause says more.
    chain = [exc]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    if any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in chain):
        return f"timed out waiting for the server ({type(chain[-1]).__name__})"
    root = chain[-1]
    return f"{type(root).__name__}: {root}" if str(root) else type(root).__name__
