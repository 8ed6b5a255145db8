"""The shipped example agents run offline and show the flows of their reference documents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents import InMemoryCheckpointer, Message, ResponseGranularity, pending_interrupt
from agents.examples import accounts, contact, load, refunds, transfers
from agents.models import OpenAIChatModel, ScriptedModel
from agents.testing.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


def lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


async def test_refunds_demo_pauses_refuses_a_bad_answer_then_approves_and_rejects(capsys):
    await refunds.main()

    out = lines(capsys)
    assert "[refund-approve] paused: Approve a $42.50 refund for order A-1001?" in out
    assert "[refund-reject] paused: Approve a $42.50 refund for order A-1001?" in out
    refused = "bad resume refused: ['$.approved: expected boolean, got str']"
    assert out.count(f"[refund-approve] {refused}") == 1
    assert "[refund-approve] assistant: Done. Refund of $42.50 issued for order A-1001." in out
    declined = "I could not do that: the reviewer declined."
    assert f"[refund-reject] assistant: {declined} Note: outside return window." in out
    # One refund paid although the approved tool ran twice (once to pause, once to finish).
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]


async def test_refund_script_reads_the_order_and_amount_from_the_request():
    reply = await ScriptedModel(refunds.SCRIPT).agenerate(
        [Message.text_message("Refund $1,042.50 for order B-77 please")], []
    )

    assert reply.tool_call_arguments()[0][1:] == (
        "issue_refund",
        {"order_id": "B-77", "amount": 1042.5},
    )


async def test_transfers_demo_streams_pauses_and_moves_money_only_when_approved(capsys):
    await transfers.main()

    out = lines(capsys)
    assert "Assistant: Done. Current balance: $50,000" in out
    assert out.count("Paused: Approve transfer of $5,000.00 to Alice?") == 2
    assert "Details: {'amount': 5000.0, 'recipient': 'Alice'}" in out
    assert "Assistant: Done. Transferred $5,000.00 to Alice." in out
    declined = "I could not do that: the reviewer declined."
    assert f"Assistant: {declined} Note: over the daily limit." in out
    assert transfers.TRANSFERS == [{"amount": 5000.0, "recipient": "Alice"}]


async def test_transfer_stream_delivers_the_reply_word_by_word_before_the_pause():
    graph = transfers.build_agent().compile(checkpointer=InMemoryCheckpointer())
    deltas: list[str] = []
    statuses: list[str] = []
    async with graph:
        async for chunk in graph.astream(
            {"messages": [Message.text_message("Transfer $5,000 to Alice")]}, {"thread_id": "t"}
        ):
            if "delta" in chunk.data:
                deltas.append(chunk.data["delta"])
            if "status" in chunk.data:
                statuses.append(chunk.data["status"])

    assert deltas == ["I'll", " set", " up", " that", " transfer", " for", " you."]
    assert statuses[-1] == "interrupted"


async def test_accounts_demo_pauses_before_the_tool_node_and_continues(capsys):
    await accounts.main()

    out = lines(capsys)
    assert out[:3] == [
        "paused before node: TOOL",
        "  wants to call: delete_account {'user_id': 'u-381'}",
        "deleted so far: []",
    ]
    assert "assistant: Done. Account u-381 deleted." in out
    assert accounts.DELETED == ["u-381"]


async def test_contact_demo_runs_the_risky_tool_once_when_approved_and_never_otherwise(capsys):
    await contact.main()

    out = lines(capsys)
    availability = "Done. Available for new projects from March, two days a week."
    assert f"[contact-questions] assistant: {availability}" in out
    call = "passing Dana Lee's message on to the owner"  # the tool's own title
    assert out.count(f"[contact-approve] paused (tool_approval): Approve {call}?") == 1
    assert "[contact-approve] tool ran: 1 time(s)" in out
    assert "[contact-reject] tool ran: 0 time(s)" in out
    assert "[contact-cancel] tool ran: 0 time(s)" in out
    note = "Not taking projects right now."
    result = json.dumps({"status": "declined", "reason": note})
    assert f"[contact-reject] tool result: {result}" in out
    declined = "I could not do that: the reviewer declined."
    assert f"[contact-reject] assistant: {declined} Note: {note}" in out
    assert contact.DRAFTS == [
        {
            "name": "Dana Lee",
            "email": "dana@example.com",
            "message": "Are you open to a three-month data project?",
        }
    ]


async def test_a_declined_contact_message_reaches_the_model_verbatim():
    seen: list[list[Message]] = []

    def recording(messages: list[Message], tools: list[dict[str, Any]]) -> Any:
        seen.append(messages)
        return contact.SCRIPT(messages, tools)

    contact.DRAFTS.clear()
    graph = contact.build_agent(ScriptedModel(recording)).compile(
        checkpointer=InMemoryCheckpointer()
    )
    config = {"thread_id": "declined"}
    async with graph:
        paused = await graph.ainvoke(
            {"messages": [Message.text_message(contact.VISITOR_MESSAGE)]},
            config,
            response_granularity=ResponseGranularity.FULL,
        )
        request = pending_interrupt(paused["state"])
        assert request is not None
        await graph.ainvoke(
            {
                "resume": {"approved": False, "note": "Not now, thanks."},
                "resume_interrupt_id": request.id,
            },
            config,
        )

    last_input = seen[-1][-1]
    assert last_input.role == "tool"
    assert json.loads(last_input.content) == {"status": "declined", "reason": "Not now, thanks."}
    assert contact.DRAFTS == []


async def test_the_refund_agent_runs_on_the_real_openai_client_against_the_fake_server():
    with FakeOpenAI() as fake:
        fake.queue_tool_call("issue_refund", order_id="A-1001", amount=42.5)
        fake.queue_text("The refund of $42.50 for order A-1001 has been issued.")
        model = OpenAIChatModel("gpt-test", base_url=fake.base_url, backoff=0.001)
        refunds.ISSUED.clear()
        graph = refunds.build_agent(model).compile(checkpointer=InMemoryCheckpointer())
        config = {"thread_id": "openai-refund"}
        async with graph:
            paused = await graph.ainvoke(
                {"messages": [Message.text_message("Refund $42.50 for order A-1001.")]},
                config,
                response_granularity=ResponseGranularity.FULL,
            )
            request = pending_interrupt(paused["state"])
            assert request is not None
            assert request.value == {
                "order_id": "A-1001",
                "amount": 42.5,
                "order_status": "delivered",
            }
            assert len(fake.requests) == 1  # paused before a second model call
            final = await graph.ainvoke(
                {"resume": {"approved": True}, "resume_interrupt_id": request.id}, config
            )

    assert final["messages"][-1].text() == "The refund of $42.50 for order A-1001 has been issued."
    assert refunds.ISSUED == [{"order_id": "A-1001", "amount": 42.5}]
    first, second = fake.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["issue_refund"]
    assert first["messages"][0] == {
        "role": "system",
        "content": refunds.SYSTEM_PROMPT[0]["content"],
    }
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"] == "Refund of $42.50 issued for order A-1001."


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "refunds",
            "[refund-reject] bad resume refused: ['$.approved: expected boolean, got str']",
        ),
        ("transfers", "Paused: Approve transfer of $5,000.00 to Alice?"),
        ("accounts", "paused before node: TOOL"),
        ("contact", "drafts recorded: 1"),
    ],
)
def test_each_example_runs_as_a_module_offline(name, expected):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no OPENAI_* variables
    done = subprocess.run(
        [sys.executable, "-m", f"agents.examples.{name}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )

    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.splitlines()
    assert done.stderr == ""


def test_load_names_every_example_and_refuses_unknown_ones():
    assert load("contact") is contact
    with pytest.raises(ValueError, match="choose one of refunds, transfers, accounts, contact"):
        load("payroll")


@pytest.mark.parametrize(
    ("module", "text"),
    [
        (transfers, "Transfer $5,000 to Alice."),
        (refunds, "Refund $42.50 for order A-1001, it arrived broken."),
    ],
)
async def test_a_withdrawn_request_is_said_as_withdrawn_not_as_a_reviewers_no(module, text):
    # Withdrawing resumes the thread with no answer (None): nobody declined it.
    graph = module.build_agent().compile(checkpointer=InMemoryCheckpointer())
    config = {"thread_id": f"withdrawn-{module.__name__}"}
    async with graph:
        paused = await graph.ainvoke(
            {"messages": [Message.text_message(text)]},
            config,
            response_granularity=ResponseGranularity.FULL,
        )
        request = pending_interrupt(paused["state"])
        assert request is not None
        out = await graph.ainvoke({"resume": None, "resume_interrupt_id": request.id}, config)

    result = next(m for m in out["messages"] if m.role == "tool")
    assert json.loads(result.content)["status"] == "withdrawn"
    reply = out["messages"][-1].content
    assert "withdrawn" in reply and "declined" not in reply, reply
