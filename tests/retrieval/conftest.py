"""The retrieval tests' fixture: indexes that listen to the test's database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from memory_proxy.retrieval.indexes import Indexes
from memory_proxy.store.database import make_pool
from tests.support.data import MODEL
from tests.support.servers import until


@pytest.fixture
async def indexes(database_url: str) -> AsyncIterator[Indexes]:
    """Indexes listening to the test's database, on a pool bound by row-level security as the app's."""
    async with make_pool(database_url, 2) as pool:
        held = Indexes(pool, model=MODEL, budget_bytes=64 << 20)
        stop = asyncio.Event()
        task = asyncio.create_task(held.run(database_url, stop))
        await until(lambda: held.listening)
        yield held
        stop.set()
        await task
