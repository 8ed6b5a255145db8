"""Thread hand-offs (``sync_to_async`` calls) of one API approval through the ASGI app:
counted, so that one added on the API's path fails here (issue 32)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from asgiref import sync as asgiref_sync

from portal.accounts.tokens import api_token_create
from tests.factories import make_interrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# Today: one per MiddlewareMixin hook under ASGI, plus the view's own; see
# docs/benchmarks.md, "Where an approval's time goes".
APPROVAL_HOPS = 19


def test_an_api_approval_through_asgi_makes_at_most_the_counted_thread_hand_offs(
    reviewer, application, monkeypatch
):
    token = api_token_create(user=reviewer, name="t")[1]
    first, second = make_interrupt(), make_interrupt()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    hops = []
    original = asgiref_sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    async def approve(client, interrupt):
        body = {"resume": {"approved": True}, "resume_interrupt_id": interrupt.pk}
        url = f"/api/threads/{interrupt.thread.pk}/resume"
        return await client.post(url, headers=headers, content=json.dumps(body))

    async def run():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            assert (await approve(c, first)).status_code == 202
            monkeypatch.setattr(asgiref_sync.SyncToAsync, "__call__", counted)
            return await approve(c, second)

    response = asyncio.run(run())

    assert response.status_code == 202, response.text
    assert 0 < len(hops) <= APPROVAL_HOPS, hops
