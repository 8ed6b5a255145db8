"""``collect_webhook``: the OpenAI Agents SDK adapter's signed-webhook path, without the
SDK (it imports nothing of it): answers filed by tool call, forgeries taken nowhere."""

from __future__ import annotations

import json

import pytest

from agents import signing
from agents.portal_client import PortalClient
from agents.portal_openai_agents import collect_webhook

SECRET = "whsec_test"
ASKED = {"call_a": "int_a", "call_b": "int_b"}


def webhook(request_id: str, outcome: str = "approved") -> bytes:
    answer = {
        "outcome": outcome,
        "value": {"type": "accept"},
        "note": "",
        "decided_by": "rita",
        "decided_at": "d",
        "decision_id": 1,
        "audit_hash": "h",
    }
    data = {"id": request_id, "status": "decided", "answer": answer}
    return json.dumps({"type": "request.decided", "data": data}).encode()


def test_each_answer_is_filed_under_its_tool_call_until_every_call_has_one():
    portal = PortalClient("http://portal.test", "prt_x", webhook_secret=SECRET)
    answers: dict = {}

    first = webhook("int_b", "responded")
    assert not collect_webhook(portal, first, signing.sign(SECRET, first), ASKED, answers)
    other = webhook("int_elsewhere")
    assert not collect_webhook(portal, other, signing.sign(SECRET, other), ASKED, answers)
    last = webhook("int_a")
    assert collect_webhook(portal, last, signing.sign(SECRET, last), ASKED, answers)

    assert answers["call_a"].answer.goes_ahead and not answers["call_b"].answer.goes_ahead
    assert set(answers) == {"call_a", "call_b"}


def test_a_forged_webhook_is_refused_and_files_nothing():
    portal = PortalClient("http://portal.test", "prt_x", webhook_secret=SECRET)
    answers: dict = {}
    body = webhook("int_a")

    with pytest.raises(signing.SignatureError):
        collect_webhook(portal, body, signing.sign("whsec_forged", body), ASKED, answers)
    assert answers == {}
