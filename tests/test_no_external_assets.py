"""The portal fetches nothing from other hosts: no CDN script, stylesheet or font, in any
template or in the API docs page (the machines it runs on may have no internet)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", re.I)


def test_no_template_loads_an_asset_from_another_host():
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in (ROOT / "templates").rglob("*.html")
        for match in EXTERNAL.finditer(path.read_text())
    ]
    assert offenders == []


def test_the_api_docs_page_serves_its_assets_itself(client):
    response = client.get("/api/docs")
    assert response.status_code == 200
    body = response.content.decode()
    assert not EXTERNAL.search(body), "the API docs reference another host"
    assert "/static/ninja/swagger-ui-bundle.js" in body
