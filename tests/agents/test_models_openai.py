"""The real ``openai`` client against the fake server on loopback."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
import pytest

from agents.models import ModelError, OpenAIChatModel, openai_client, resolve_model
from agents.state import Message
from agents.testing.fake_openai import FakeOpenAI

TRANSFER_TOOL = {
    "type": "function",
    "function": {
        "name": "transfer_funds",
        "description": "Transfer funds to a recipient.",
        "parameters": {
            "type": "object",
            "properties": {"amount": {"type": "number"}, "recipient": {"type": "string"}},
            "required": ["amount", "recipient"],
        },
    },
}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def model(fake: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    client = OpenAIChatModel("gpt-test", base_url=fake.base_url, backoff=0.001, max_retries=3)
    yield client
    await client.aclose()


def user(text: str) -> list[Message]:
    return [Message.text_message(text)]


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def __call__(self, text: str) -> None:
        self.deltas.append(text)


async def test_streamed_text_arrives_as_ordered_deltas_and_one_message(fake, model):
    fake.queue_text("The transfer of $5,000 to Alice is complete.")
    recorder = Recorder()

    reply = await model.agenerate(user("hi"), [], on_delta=recorder)

    words = ["The", " transfer", " of", " $5,000", " to", " Alice", " is", " complete."]
    assert recorder.deltas == words
    assert reply.role == "assistant"
    assert reply.content == "The transfer of $5,000 to Alice is complete."
    assert reply.tools_calls is None
    assert reply.meta["finish_reason"] == "stop"


async def test_streamed_tool_calls_are_assembled_with_parseable_arguments(fake, model):
    fake.queue_tool_calls(
        {"name": "check_balance", "arguments": {}},
        {"name": "transfer_funds", "arguments": {"amount": 5000.0, "recipient": "Alice"}},
        text="One moment.",
    )

    reply = await model.agenerate(user("Transfer $5,000 to Alice"), [TRANSFER_TOOL])

    assert reply.content == "One moment."
    assert [call["function"]["name"] for call in reply.tools_calls or []] == [
        "check_balance",
        "transfer_funds",
    ]
    assert all(call["type"] == "function" and call["id"] for call in reply.tools_calls or [])
    assert reply.tool_call_arguments()[1][1:] == (
        "transfer_funds",
        {"amount": 5000.0, "recipient": "Alice"},
    )
    assert reply.meta["finish_reason"] == "tool_calls"


async def test_the_request_carries_tools_history_and_asks_for_a_stream(fake, model):
    fake.queue_text("ok")
    history = [
        Message(role="system", content="You move money."),
        Message.text_message("Transfer $5,000 to Alice"),
        Message(
            role="assistant",
            tools_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "transfer_funds", "arguments": "{}"},
                }
            ],
        ),
        Message(role="tool", content="Transferred", tool_call_id="call_1"),
    ]

    await model.agenerate(history, [TRANSFER_TOOL])

    (body,) = fake.requests
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["tools"] == [TRANSFER_TOOL]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert body["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert body["messages"][3]["tool_call_id"] == "call_1"


async def test_the_body_sent_is_what_the_openai_client_would_send_and_carries_the_key(fake):
    """The body goes without the ``openai`` package's walk of each message against the
    request's typed schema (its cost grows with the history on every call): for the
    messages the runtime sends, that walk changes nothing, and the key still goes."""
    from openai._utils import async_maybe_transform
    from openai.types.chat import completion_create_params

    fake.queue_text("ok")
    history = [
        Message(role="system", content="You move money."),
        Message.text_message("Transfer $5,000 to Ålice, ☃ included"),
        Message(
            role="assistant",
            content="Checking.",
            tools_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "transfer_funds", "arguments": '{"amount": 5000}'},
                }
            ],
        ),
        Message(role="tool", content='{"status": "done"}', tool_call_id="call_1"),
    ]
    model = OpenAIChatModel("gpt-test", api_key="sk-test-key", base_url=fake.base_url)
    try:
        await model.agenerate(history, [TRANSFER_TOOL])
    finally:
        await model.aclose()

    (body,) = fake.requests
    walked = await async_maybe_transform(
        dict(body), completion_create_params.CompletionCreateParamsStreaming
    )
    assert walked == body
    assert body["messages"] == [message.to_openai() for message in history]
    assert fake.headers[0]["authorization"] == "Bearer sk-test-key"


async def test_a_call_does_not_walk_its_messages_against_the_typed_schema(fake, model, monkeypatch):
    from openai.resources.chat.completions import completions

    async def walked(*args, **kwargs):
        raise AssertionError("the messages were walked against the typed schema")

    monkeypatch.setattr(completions, "async_maybe_transform", walked)
    fake.queue_text("ok")

    reply = await model.agenerate(user("hi"), [TRANSFER_TOOL])

    assert reply.content == "ok"


async def test_no_tools_key_is_sent_when_the_agent_has_no_tools(fake, model):
    fake.queue_text("ok")

    await model.agenerate(user("hi"), [])

    assert "tools" not in fake.requests[0]


async def test_a_500_is_retried_and_the_next_attempt_answers(fake, model):
    fake.queue_error(500, times=2)
    fake.queue_text("recovered")

    reply = await model.agenerate(user("hi"), [])

    assert reply.content == "recovered"
    assert reply.meta["attempts"] == 3
    assert len(fake.requests) == 3


async def test_a_persistent_500_raises_a_model_error_naming_status_and_attempts(fake, model):
    fake.queue_error(500, message="upstream exploded", forever=True)

    with pytest.raises(ModelError) as caught:
        await model.agenerate(user("hi"), [])

    message = str(caught.value)
    assert "failed after 4 attempts" in message
    assert "HTTP 500" in message
    assert "upstream exploded" in message
    assert len(fake.requests) == 4  # the first try plus max_retries=3
    assert isinstance(caught.value.__cause__, openai.InternalServerError)


async def test_a_429_rate_limit_is_retried(fake, model):
    fake.queue_error(429, message="slow down")
    fake.queue_text("fine")

    reply = await model.agenerate(user("hi"), [])

    assert reply.content == "fine"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(fake, model, status):
    fake.queue_error(status, message="you did it wrong", forever=True)

    with pytest.raises(ModelError, match=f"HTTP {status}: you did it wrong.*not retried"):
        await model.agenerate(user("hi"), [])

    assert len(fake.requests) == 1


async def test_a_stream_cut_before_any_text_is_retried(fake, model):
    fake.queue_text("never finished", break_after=0)
    fake.queue_text("second try")
    recorder = Recorder()

    reply = await model.agenerate(user("hi"), [], on_delta=recorder)

    assert reply.content == "second try"
    assert recorder.deltas == ["second", " try"]
    assert len(fake.requests) == 2


async def test_a_stream_cut_after_text_was_sent_is_not_retried_so_text_is_not_repeated(fake, model):
    fake.queue_text("half an answer that breaks", break_after=2)
    fake.queue_text("should never be requested")
    recorder = Recorder()

    with pytest.raises(ModelError, match="stream broke after text was sent"):
        await model.agenerate(user("hi"), [], on_delta=recorder)

    assert recorder.deltas == ["half", " an"]
    assert len(fake.requests) == 1


async def test_connection_refused_is_retried_then_reported(fake):
    port = fake._server.server_address[1]
    fake.stop()  # nothing listens on the port any more
    client = OpenAIChatModel(
        "gpt-test", base_url=f"http://127.0.0.1:{port}/v1", backoff=0.001, max_retries=2
    )
    try:
        with pytest.raises(ModelError, match=r"failed after 3 attempts.*connection error"):
            await client.agenerate(user("hi"), [])
    finally:
        await client.aclose()


async def test_a_slow_server_times_out_and_the_timeout_is_named(fake):
    fake.chunk_delay = 0.5
    fake.queue_text("slow words", forever=True)
    client = OpenAIChatModel(
        "gpt-test", base_url=fake.base_url, timeout=0.1, backoff=0.001, max_retries=1
    )
    try:
        with pytest.raises(ModelError, match=r"failed after 2 attempts.*timed out"):
            await client.agenerate(user("hi"), [])
    finally:
        await client.aclose()
    assert len(fake.requests) == 2


async def test_an_error_raised_by_on_delta_propagates_unchanged(fake, model):
    fake.queue_text("hello there")

    async def explode(text: str) -> None:
        raise KeyError("consumer went away")

    with pytest.raises(KeyError):
        await model.agenerate(user("hi"), [], on_delta=explode)
    assert len(fake.requests) == 1


async def test_the_fake_also_answers_without_streaming():
    with FakeOpenAI() as fake:
        fake.queue_tool_call("check_balance", text="Checking.")
        client = openai.AsyncOpenAI(api_key="x", base_url=fake.base_url, max_retries=0)
        try:
            completion = await client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "balance?"}]
            )
        finally:
            await client.close()
    message = completion.choices[0].message
    assert message.content == "Checking."
    assert message.tool_calls is not None
    assert message.tool_calls[0].function.name == "check_balance"
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_the_fake_stamps_the_time_each_text_chunk_left(fake, model):
    fake.queue_text("one two three")

    await model.agenerate(user("hi"), [])

    assert len(fake.sent_at) == 3
    assert fake.sent_at == sorted(fake.sent_at)


async def test_a_queued_response_with_match_only_answers_matching_messages(fake, model):
    fake.queue_text("about balances", match="balance", forever=True)
    fake.queue_text("anything else")

    other = await model.agenerate(user("hello"), [])
    balance = await model.agenerate(user("what is my balance"), [])

    assert (other.content, balance.content) == ("anything else", "about balances")


@pytest.mark.slow
def test_the_fake_runs_as_a_process_and_prints_its_base_url(tmp_path: Path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from a process"}]))
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.testing.fake_openai", "--port", "0", "--script", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        client = openai.OpenAI(api_key="x", base_url=base_url, max_retries=0, timeout=5)
        completion = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}]
        )
        client.close()
        assert completion.choices[0].message.content == "from a process"
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_resolve_model_without_credentials_says_how_to_fix_it(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(ModelError, match=r"set OPENAI_API_KEY.*'scripted'"):
        resolve_model("gpt-4o-mini")


def test_resolve_model_gives_an_openai_client_when_a_base_url_is_set(monkeypatch, fake):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)

    model = resolve_model("openai:gpt-4o-mini")

    assert isinstance(model, OpenAIChatModel)
    assert model.name == "gpt-4o-mini"
    assert model.base_url.rstrip("/") == fake.base_url


def test_models_built_one_after_another_load_the_trusted_certificates_once(monkeypatch):
    """A worker builds its agent's model, and so a client, for each run: the certificates,
    far the dearest part of a client, are loaded for the first one only."""
    loads = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args or kwargs)
        load(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    openai_client._tls_context.cache_clear()

    models = [OpenAIChatModel("gpt-test", api_key="k") for _ in range(3)]

    assert len(models) == 3
    assert len(loads) == 1
