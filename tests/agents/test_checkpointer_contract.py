from collections.abc import AsyncIterator

import pytest

from agents.checkpoint import InMemoryCheckpointer
from agents.testing.checkpointer_contract import CheckpointerContract


class TestInMemoryCheckpointer(CheckpointerContract):
    @pytest.fixture
    async def checkpointer(self) -> AsyncIterator[InMemoryCheckpointer]:
        store = InMemoryCheckpointer()
        yield store
        await store.aclose()
