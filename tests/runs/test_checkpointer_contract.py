"""The ORM checkpointer passes the runtime's checkpointer contract, on SQLite and on
PostgreSQL. The contract's thread ids are free strings ("t", "a"); the checkpointer maps
them to stable UUIDs and creates the Thread row on the first write."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agents.testing.checkpointer_contract import CheckpointerContract
from portal.models.db import aconnect
from portal.runs.checkpointer import DjangoCheckpointer


class TestDjangoCheckpointer(CheckpointerContract):
    @pytest.fixture
    async def checkpointer(self, transactional_db):
        # transactional_db: the ORM work runs in asgiref's sync thread, on its own
        # connection, so the data must really be committed (and flushed afterwards).
        store = DjangoCheckpointer()
        yield store
        await store.aclose()
        # Close that thread's connection, or PostgreSQL cannot drop the test database.
        await sync_to_async(connections.close_all, thread_sensitive=True)()


@pytest.mark.postgres
class TestDjangoCheckpointerOnItsOwnConnection(CheckpointerContract):
    """The worker's way: statements on an async psycopg connection, no thread hops."""

    @pytest.fixture
    async def checkpointer(self, transactional_db):
        conn = await aconnect()
        store = DjangoCheckpointer(connection=conn)
        yield store
        await store.aclose()
        await conn.close()
        await sync_to_async(connections.close_all, thread_sensitive=True)()
