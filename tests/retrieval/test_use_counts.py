"""retrieval/use_counts.py: injections counted in memory, written for every user in one statement."""

from __future__ import annotations

from typing import Any

import pytest

from memory_proxy.retrieval import use_counts
from memory_proxy.retrieval.use_counts import UseCounts
from memory_proxy.store.database import make_pool
from tests.support.data import USER_A, USER_B
from tests.support.proxy import add_memory


async def counts(db: Any, user: str) -> dict[str, int]:
    cur = await db.execute("SELECT vector_id, access_count FROM users_vectors WHERE user_id = %s", [user])
    return dict(await cur.fetchall())


async def test_a_flush_writes_every_users_counts_and_then_nothing(db: Any, database_url: str) -> None:
    tea = await add_memory(db, USER_A, "User likes green tea.")
    bun = await add_memory(db, USER_B, "User codes with Bun.")
    async with make_pool(database_url, 1) as pool:  # the app's role: row-level security applies
        counter = UseCounts(pool)
        counter.add(USER_A, [tea])
        counter.add(USER_A, [tea])
        counter.add(USER_B, [bun])
        counter.add(USER_B, [tea])  # not B's memory: counts nothing for anyone
        assert await counter.flush() == 3
        assert await counter.flush() == 0  # nothing pending any more
    assert await counts(db, USER_A) == {tea: 2} and await counts(db, USER_B) == {bun: 1}


async def test_pending_uses_are_bounded(db: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(use_counts, "MAX_PENDING", 2)
    async with make_pool(database_url, 1) as pool:
        counter = UseCounts(pool)
        counter.add(USER_A, ["a", "b", "c"])
        counter.add(USER_A, ["a"])  # a link already pending still counts
        assert counter._pending.keys() == {(USER_A, "a"), (USER_A, "b")}
        assert counter._pending[(USER_A, "a")][0] == 2
