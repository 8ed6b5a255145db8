"""The README's demo story and CONTRIBUTING's "add an agent" recipe, followed as written."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from agents import InMemoryCheckpointer, ResponseGranularity, pending_interrupt
from portal.models import Thread
from portal.runs.registry import UnknownAgentError, agent_info, compile_agent, get_agent_builder
from tests import factories, recipe_agent

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_story_message() -> str:
    """The message the README tells a newcomer to send in the support chat."""
    match = re.search(r'\*\*refunds\*\* and send\s+"([^"]+)"', README.read_text())
    assert match, "the README's demo story no longer names the message to send"
    return match[1]


def test_the_readmes_message_is_the_chats_refunds_example():
    assert agent_info("refunds").example == readme_story_message()


def test_seeded_conversations_never_repeat_the_readmes_story(settings, capsys):
    settings.DEBUG = True
    story = readme_story_message()

    call_command("seed_demo")

    seeded = list(Thread.objects.select_related("owner"))
    assert {t.agent for t in seeded} == set(settings.PORTAL_AGENTS)
    for thread in seeded:
        # The newcomer plays `support`: none of the seeded requests may pass for theirs.
        assert thread.owner.username != "support"
        assert thread.title != Thread.title_from(story)
        assert thread.title != Thread.title_from(agent_info(thread.agent).example)


def test_every_queue_row_shows_who_asked_and_links_to_their_conversation(
    client, reviewer, support_agent, other_support_agent
):
    mine = factories.make_interrupt(owner=support_agent)
    theirs = factories.make_interrupt(owner=other_support_agent)
    client.force_login(reviewer)

    page = client.get(reverse("queue")).content.decode()

    for item, name in ((mine, "sam-support"), (theirs, "olga-support")):
        row = re.search(rf'<tr id="q-{item.pk}".*?</tr>', page, re.S)
        assert row, f"no queue row for {item.pk}"
        assert f'asked by <strong class="queue-asker">{name}</strong>' in row[0]
        assert f'href="{reverse("thread_detail", args=[item.thread_id])}"' in row[0]


def test_an_agent_added_by_the_contributing_recipe_appears_everywhere(
    settings, client, support_agent, reviewer, capsys
):
    # Step 2 of the recipe: one line in PORTAL_AGENTS; nothing else is edited.
    settings.PORTAL_AGENTS = {
        **settings.PORTAL_AGENTS,
        "weather": "tests.recipe_agent.build_agent",
    }
    settings.PORTAL_MODEL = "scripted"
    settings.DEBUG = True

    with pytest.raises(UnknownAgentError, match="weather"):
        get_agent_builder("nonesuch")

    client.force_login(support_agent)
    chat = client.get(reverse("chat")).content.decode()
    assert recipe_agent.HINT in chat
    assert recipe_agent.EXAMPLE in chat
    prefilled = client.get(reverse("chat") + "?agent=weather&example=1").content.decode()
    assert f"{recipe_agent.EXAMPLE}</textarea>" in prefilled

    client.force_login(reviewer)
    queue = client.get(reverse("queue")).content.decode()
    assert '<option value="weather">Weather</option>' in queue

    call_command("seed_demo")
    seeded = Thread.objects.get(agent="weather")
    assert seeded.title == Thread.title_from(recipe_agent.DEMO)

    # Step 3: it runs offline to its pause and through a resume.
    async def run() -> str:
        graph = compile_agent("weather", InMemoryCheckpointer())
        config = {"thread_id": "recipe"}
        first = await graph.ainvoke(
            {"messages": [{"role": "user", "content": recipe_agent.EXAMPLE}]},
            config,
            response_granularity=ResponseGranularity.FULL,
        )
        request = pending_interrupt(first["state"])
        assert request is not None and request.message == "Send a weather warning to Oslo?"
        final = await graph.ainvoke({"resume": {"approved": True}}, config)
        return final["messages"][-1].text()

    assert "Warning sent to Oslo" in asyncio.run(run())


@pytest.mark.parametrize("agent", ["refunds", "transfers", "accounts", "contact"])
def test_each_seeded_conversation_pauses_for_a_reviewer_offline(settings, agent):
    settings.PORTAL_MODEL = "scripted"
    settings.PORTAL_SCRIPTED_DELAY_MS = 0

    async def run() -> object:
        graph = compile_agent(agent, InMemoryCheckpointer())
        out = await graph.ainvoke(
            {"messages": [{"role": "user", "content": agent_info(agent).demo}]},
            {"thread_id": f"seeded-{agent}"},
            response_granularity=ResponseGranularity.FULL,
        )
        return pending_interrupt(out["state"])

    assert asyncio.run(run()) is not None
