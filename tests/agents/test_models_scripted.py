"""The offline scripted model and its script helpers."""

from __future__ import annotations

import json
import re

from agents.models import (
    CallTool,
    ChatModel,
    Reply,
    RuleScript,
    ScriptedModel,
    resolve_model,
)
from agents.state import Message


def transfer(match: re.Match[str]) -> Reply:
    amount = float(match["amount"].replace(",", ""))
    return Reply("Setting that up.", CallTool("transfer_funds", amount=amount, recipient=match[2]))


SCRIPT = RuleScript(
    [
        (r"\$(?P<amount>[\d,.]+) to (\w+)", transfer),
        (r"balance", lambda match: CallTool("check_balance")),
    ]
)


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def __call__(self, text: str) -> None:
        self.deltas.append(text)


def tool_result(call_id: str, content: str) -> Message:
    return Message(role="tool", content=content, tool_call_id=call_id)


async def test_a_rule_turns_the_user_request_into_a_tool_call_with_parsed_arguments():
    model = ScriptedModel(SCRIPT)

    reply = await model.agenerate([Message.text_message("Transfer $5,000 to Alice")], [])

    assert reply.content == "Setting that up."
    assert reply.tool_call_arguments()[0][1:] == (
        "transfer_funds",
        {"amount": 5000.0, "recipient": "Alice"},
    )
    assert reply.tools_calls is not None
    assert reply.tools_calls[0]["type"] == "function"


async def test_the_same_conversation_gives_the_same_tool_call_ids():
    history = [Message.text_message("What is my balance?")]

    first = await ScriptedModel(SCRIPT).agenerate(history, [])
    second = await ScriptedModel(SCRIPT).agenerate(history, [])

    assert first.tools_calls == second.tools_calls
    assert first.tools_calls is not None
    assert first.tools_calls[0]["id"].startswith("call_")


async def test_tool_call_ids_differ_between_turns_of_one_thread():
    model = ScriptedModel(SCRIPT)
    history = [Message.text_message("What is my balance?")]
    first = await model.agenerate(history, [])
    answer = tool_result(first.tools_calls[0]["id"], "$50")
    history += [first, answer, Message.text_message("and my balance now?")]

    second = await model.agenerate(history, [])

    assert first.tools_calls[0]["id"] != second.tools_calls[0]["id"]


async def test_text_streams_word_by_word_and_joins_back_to_the_reply():
    model = ScriptedModel(lambda messages, tools: Reply("Your balance is  $50,000. "))
    recorder = Recorder()

    reply = await model.agenerate([Message.text_message("hi")], [], on_delta=recorder)

    assert recorder.deltas == ["Your", " balance", " is", "  $50,000.", " "]
    assert "".join(recorder.deltas) == reply.content


async def test_after_a_tool_result_the_script_answers_with_it():
    model = ScriptedModel(SCRIPT)
    history = [Message.text_message("balance please")]
    call = await model.agenerate(history, [])
    history += [call, tool_result(call.tools_calls[0]["id"], "Current balance: $50,000")]

    reply = await model.agenerate(history, [])

    assert reply.content == "Done. Current balance: $50,000"
    assert reply.tools_calls is None
    assert model.calls == 2


async def test_a_declined_tool_result_is_explained_with_the_reviewer_note():
    model = ScriptedModel(SCRIPT)
    declined = json.dumps({"status": "declined", "reason": "outside return window"})
    history = [Message.text_message("balance"), tool_result("call_1", declined)]

    reply = await model.agenerate(history, [])

    assert reply.content == (
        "I could not do that: the reviewer declined. Note: outside return window."
    )


async def test_an_error_tool_result_is_explained():
    model = ScriptedModel(SCRIPT)
    error = json.dumps({"status": "error", "error": "account locked"})

    reply = await model.agenerate([Message.text_message("x"), tool_result("c", error)], [])

    assert reply.content == "That did not work: the tool reported an error (account locked)."


async def test_no_matching_rule_gives_the_fallback_reply():
    reply = await ScriptedModel(SCRIPT).agenerate([Message.text_message("tell a joke")], [])

    assert reply.content == "I can't help with that request."
    assert reply.tools_calls is None


async def test_resolve_model_scripted_echoes_offline_without_credentials(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    model = resolve_model("scripted-demo")
    reply = await model.agenerate([Message.text_message("ping")], [])

    assert isinstance(model, ScriptedModel)
    assert isinstance(model, ChatModel)
    assert model.name == "scripted-demo"
    assert reply.content == "You said: ping"
