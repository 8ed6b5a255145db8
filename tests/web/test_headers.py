"""Every response carries the Content-Security-Policy: scripts and styles only from the
portal's own files, nothing inline, no eval. (The browser tests show the pages pass it.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {
        name: values
        for name, *values in (part.split() for part in header.split(";") if part.strip())
    }


@pytest.mark.parametrize("path", ["/login/", "/admin/login/", "/api/docs", "/api/openapi.json"])
def test_pages_carry_a_policy_without_inline_script_or_style(client, path):
    policy = _policy(client.get(path))

    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["connect-src"] == ["'self'"]  # websockets to this host only


def test_logged_in_pages_carry_the_policy_too(client, reviewer):
    client.force_login(reviewer)

    for path in ["/queue/", "/history/", "/metrics/"]:
        assert "'unsafe-inline'" not in client.get(path)["Content-Security-Policy"], path
