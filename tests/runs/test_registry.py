"""Agents by name: lazy import, model choice, compile options, clear refusals."""

from __future__ import annotations

import pytest

from agents.models import OpenAIChatModel, ScriptedModel
from portal.runs import registry
from portal.runs.registry import UnknownAgentError, compile_agent, get_agent_builder


def test_a_registered_agent_is_imported_from_its_dotted_path():
    from agents.examples.refunds import build_agent

    assert get_agent_builder("refunds") is build_agent


def test_an_unknown_agent_is_refused_listing_the_registered_ones(settings):
    with pytest.raises(UnknownAgentError) as refused:
        get_agent_builder("nonesuch")
    message = str(refused.value)
    assert "unknown agent 'nonesuch'" in message
    assert ", ".join(sorted(settings.PORTAL_AGENTS)) in message


def test_an_agent_whose_path_does_not_import_is_refused_saying_so(settings):
    settings.PORTAL_AGENTS = {"broken": "agents.examples.nope.build_agent"}
    with pytest.raises(UnknownAgentError, match="cannot be imported"):
        get_agent_builder("broken")


def test_the_scripted_setting_keeps_each_agents_own_offline_model(settings):
    settings.PORTAL_MODEL = "scripted"
    graph = compile_agent("refunds", None)
    assert isinstance(graph.nodes["MAIN"].model, ScriptedModel)
    assert graph.nodes["MAIN"].model.name == "scripted-refunds"


def test_the_demo_delay_slows_the_scripted_model_and_keeps_its_script(settings):
    from agents.examples import refunds

    settings.PORTAL_MODEL = "scripted"
    settings.PORTAL_SCRIPTED_DELAY_MS = 40
    model = compile_agent("refunds", None).nodes["MAIN"].model
    assert isinstance(model, ScriptedModel)
    assert model.delay == pytest.approx(0.04)
    assert model.script is refunds.SCRIPT
    assert model.name == "scripted-refunds"


def test_another_model_name_gives_the_openai_client(settings, monkeypatch):
    settings.PORTAL_MODEL = "gpt-test"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    graph = compile_agent("refunds", None)
    assert isinstance(graph.nodes["MAIN"].model, OpenAIChatModel)
    assert graph.nodes["MAIN"].model.name == "gpt-test"


def test_an_agents_compile_options_are_applied(settings):
    from agents import InMemoryCheckpointer

    settings.PORTAL_MODEL = "scripted"
    graph = compile_agent("accounts", InMemoryCheckpointer())
    assert graph.interrupt_before == frozenset({"TOOL"})


@pytest.mark.slow
def test_extra_agents_come_from_the_environment(monkeypatch):
    import subprocess
    import sys

    code = "from django.conf import settings; print(settings.PORTAL_AGENTS['extra'])"
    env = {"PORTAL_AGENTS_EXTRA": '{"extra": "tests.testagents.build_echo"}'}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "tests.testagents.build_echo"
    assert registry.agent_names()  # the in-process registry is untouched
