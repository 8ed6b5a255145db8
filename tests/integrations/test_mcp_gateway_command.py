"""``manage.py mcp_gateway`` is the gateway of ``python -m agents.mcp_gateway``: a
configuration it cannot use stops it with the reason, before it serves anything."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


def test_a_missing_configuration_stops_the_command_with_its_reason(tmp_path, capsys):
    missing = tmp_path / "nowhere.toml"

    with pytest.raises(CommandError, match="exit status 2"):
        call_command("mcp_gateway", "--config", str(missing))

    assert str(missing) in capsys.readouterr().err


def test_an_upstream_without_a_command_or_url_is_named(tmp_path, capsys):
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[portal]\nurl = "http://127.0.0.1:9"\ntoken = "t"\n\n[[upstream]]\nname = "files"\n'
    )

    with pytest.raises(CommandError):
        call_command("mcp_gateway", "--config", str(config))

    assert "needs a name, and a command or a url" in capsys.readouterr().err
