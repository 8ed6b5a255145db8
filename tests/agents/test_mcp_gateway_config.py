"""The MCP gateway's configuration file: upstreams over stdio or streamable HTTP, and
refusals that name what is wrong in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.mcp_gateway import ConfigError, load_config

PORTAL = '[portal]\nurl = "http://127.0.0.1:8000"\ntoken = "prt_x"\n'


def config(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(PORTAL + "[[upstream]]\n" + upstream)
    return path


def test_an_http_upstreams_headers_are_filled_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TICKETS_TOKEN", "s3cret")
    path = config(
        tmp_path,
        'name = "tickets"\nurl = "https://tickets.internal/mcp"\n'
        'headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }\n',
    )

    (upstream,) = load_config(path).upstreams

    assert upstream.url == "https://tickets.internal/mcp"
    assert upstream.headers == {"Authorization": "Bearer s3cret"}


def test_a_header_naming_a_variable_that_is_not_set_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TICKETS_TOKEN", raising=False)
    path = config(
        tmp_path,
        'name = "tickets"\nurl = "http://127.0.0.1:9000/mcp"\n'
        'headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }\n',
    )

    with pytest.raises(ConfigError, match="header Authorization names 'TICKETS_TOKEN'"):
        load_config(path)


@pytest.mark.parametrize(
    ("upstream", "says"),
    [
        ('name = "x"\nurl = "ftp://host/mcp"\n', "not http:// or https://"),
        ('name = "x"\ncommand = "python"\nheaders = { A = "b" }\n', "headers are sent to a url"),
        ('name = "x"\ncommand = "python"\nurl = "http://h/mcp"\n', "a command or a url"),
        ('name = "x"\nurl = "http://h/mcp"\nheader = { A = "b" }\n', "unknown keys ['header']"),
    ],
)
def test_an_upstream_the_gateway_cannot_use_is_refused_naming_why(tmp_path, upstream, says):
    with pytest.raises(ConfigError, match="upstream 1") as refused:
        load_config(config(tmp_path, upstream))
    assert says in str(refused.value)
