"""The seeded demo's rule: refunds under $10 on delivered orders are approved, written by
one demo reviewer, simulated and activated by the other, and matching what the refunds
agent really asks."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.core.management import call_command

from agents import InMemoryCheckpointer, Message, ResponseGranularity, pending_interrupt
from agents.examples import refunds
from portal.management.commands.seed_demo import DEMO_RULE
from portal.models import AuditEvent, Rule, RuleSimulation
from portal.reviews.rule_simulation import _Seen
from portal.reviews.rules import version_matches

pytestmark = pytest.mark.django_db


async def _asked(text: str) -> _Seen:
    """What the refunds agent asks for ``text``, as the portal stores it."""
    graph = refunds.build_agent().compile(checkpointer=InMemoryCheckpointer())
    async with graph:
        result = await graph.ainvoke(
            {"messages": [Message.text_message(text)]},
            {"thread_id": text},
            response_granularity=ResponseGranularity.FULL,
        )
    request = pending_interrupt(result["state"])
    assert request is not None
    return _Seen(
        "refunds", request.reason, request.tool or "", request.value, request.message or ""
    )


def test_the_demo_has_one_active_rule_activated_by_another_reviewer(settings):
    settings.DEBUG = True
    call_command("seed_demo")
    call_command("seed_demo")  # a second run leaves it as it is

    rule = Rule.objects.get()
    version = rule.active_version
    assert rule.name == DEMO_RULE and rule.enabled and version is not None
    assert version.written_by.username == "reviewer"
    assert version.activated_by.username == "reviewer2"
    simulation = RuleSimulation.objects.get()
    assert simulation.version == version and simulation.run_by.username == "reviewer2"
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"rule.write", "rule.simulate", "rule.activate"} <= actions


def test_the_demo_rule_matches_small_refunds_on_delivered_orders(settings):
    settings.DEBUG = True
    call_command("seed_demo")
    version = Rule.objects.get().active_version
    for text, matches in [
        ("Refund $4.99 for order A-1002, it arrived broken.", True),
        ("Refund $9.99 for order A-1003.", True),
        ("Refund $10.00 for order A-1004.", False),
        ("Refund $18.00 for order B-2207, the wrong size was sent.", False),
        ("Refund $4.99 for order C-3003, it never came.", False),  # still in transit
    ]:
        assert version_matches(version, asyncio.run(_asked(text))) is matches, text


def test_the_readmes_rule_story_is_decided_by_the_demo_rule(settings):
    """The README's second message is one the demo's rule approves, and its first is not:
    the newcomer's $42.50 refund still reaches a person."""
    from tests.test_demo_story import README, readme_story_message

    settings.DEBUG = True
    call_command("seed_demo")
    version = Rule.objects.get().active_version
    text = " ".join(README.read_text().split())
    said = re.search(r'Send "([^"]+)" and the refund is issued at once', text)
    assert said, "the README no longer tells the rule's story"
    assert DEMO_RULE in text
    assert version_matches(version, asyncio.run(_asked(said[1])))
    assert not version_matches(version, asyncio.run(_asked(readme_story_message())))
