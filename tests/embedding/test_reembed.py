"""`reembed`: vectors of an old embedding model become the configured model's, in resumable batches."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from memory_proxy.embedding.memory_document import embedding_text
from memory_proxy.embedding.reembed import reembed
from memory_proxy.errors import MemoryUnavailable
from memory_proxy.services import open_services
from memory_proxy.settings import Settings
from memory_proxy.store.memories import add_global_memory
from memory_proxy.store.search import neighbours
from tests.support.data import USER_A, USER_B
from tests.support.fakes import vector_for
from tests.support.proxy import add_memory

FACTS = {USER_A: ["User lives in Berlin.", "User is a software engineer who uses Bun."],
         USER_B: ["User has a dog named Rex."]}


async def _old_memories(db: Any) -> None:
    for user, facts in FACTS.items():
        for fact in facts:
            await add_memory(db, user, fact, model="old-model")
    await add_global_memory(db, content="Everyone here works at Acme.", embedding=vector_for("x"),
                               model="old-model")
    await add_memory(db, USER_B, "User likes tea.")  # already of the configured model: left alone


async def _expected(db: Any, vector_id: str) -> tuple[str, list[float]]:
    cur = await db.execute("SELECT content, stated_at FROM vectors WHERE id = %s", [vector_id])
    content, stated_at = await cur.fetchone()
    return content, vector_for(embedding_text(content, stated_at))


@pytest.mark.slow
async def test_reembed_moves_old_vectors_to_the_configured_model(settings: Settings, outside: Any, db: Any) -> None:
    await _old_memories(db)
    async with open_services(settings, httpx.AsyncClient(timeout=5)) as services:
        assert await reembed(services.pool, services.embedder, batch=2, dry_run=True) == 4
        assert not outside.routes["embeddings"].called  # a dry run embeds nothing
        assert await reembed(services.pool, services.embedder, batch=2, dry_run=False) == 4
        assert outside.routes["embeddings"].call_count == 2  # two batches of 2
        assert await reembed(services.pool, services.embedder, batch=2, dry_run=False) == 0  # idempotent

    cur = await db.execute("SELECT DISTINCT embedding_model FROM vectors")
    assert await cur.fetchall() == [("mistral-embed",)]
    cur = await db.execute("SELECT count(*) FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                           " WHERE uv.embedding_model <> 'mistral-embed'"
                           " OR uv.embedding_bq <> binary_quantize(v.embedding)")
    assert (await cur.fetchone())[0] == 0  # the links' copies follow
    cur = await db.execute("SELECT v.embedding FROM global_vectors g JOIN vectors v ON v.id = g.vector_id")
    assert np.allclose((await cur.fetchone())[0].to_numpy(), vector_for("Everyone here works at Acme."), atol=1e-6)

    # and search finds them again under the configured model, for their own user only
    cur = await db.execute("SELECT vector_id FROM users_vectors WHERE user_id = %s", [USER_A])
    for (vector_id,) in await cur.fetchall():
        content, vector = await _expected(db, vector_id)
        found = await neighbours(db, user_id=USER_A, model="mistral-embed", embedding=vector, top_k=1,
                                 min_score=0.99)
        assert [m.content for m in found] == [content]
        assert not await neighbours(db, user_id=USER_B, model="mistral-embed", embedding=vector, top_k=5,
                                    min_score=0.99, include_global=False)


@pytest.mark.slow
async def test_reembed_resumes_after_an_interruption(settings: Settings, outside: Any, db: Any) -> None:
    await _old_memories(db)
    calls = 0
    real = outside.routes["embeddings"].side_effect

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(503) if calls == 2 else real(request)

    outside.routes["embeddings"].mock(side_effect=flaky)
    async with open_services(settings, httpx.AsyncClient(timeout=5)) as services:
        with pytest.raises(MemoryUnavailable):
            await reembed(services.pool, services.embedder, batch=1, dry_run=False)
        assert await reembed(services.pool, services.embedder, batch=1, dry_run=True) == 3  # first batch kept
        assert await reembed(services.pool, services.embedder, batch=1, dry_run=False) == 3
    cur = await db.execute("SELECT count(*) FROM vectors WHERE embedding_model = 'old-model'")
    assert (await cur.fetchone())[0] == 0
