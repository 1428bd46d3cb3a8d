"""Re-embed every stored vector of another model than the configured one (after EMBEDDING_MODEL changed).

Search only ever compares vectors of the configured model, so until this has run, memories stored under
the old model are invisible to retrieval (they stay in the database, untouched). Each batch is one
transaction across all users (row-level security: `in_all_users`): the vectors get their new embedding
and model, and every link to them its copies (users_vectors.embedding_model, embedding_bq, db/migrations/
0003). Idempotent and resumable: a finished batch no longer matches, an interrupted one is redone whole.
The text embedded is the one formation embeds: `embedding_text(content, stated_at)` for users' memories,
the bare text for global memories (as `memories load-global` stores them).
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from ..observability import log
from ..store.memories import as_vector
from ..store.scope import in_all_users
from .document import embedding_text
from .embed import Embedder

_PENDING = """
SELECT v.id, v.content, v.stated_at, EXISTS (SELECT FROM global_vectors g WHERE g.vector_id = v.id)
FROM vectors v WHERE v.embedding_model <> %s ORDER BY v.id LIMIT %s
"""
_UPDATE_VECTOR = "UPDATE vectors SET embedding = %s, embedding_model = %s WHERE id = %s AND embedding_model <> %s"
_UPDATE_LINKS = """
UPDATE users_vectors uv SET embedding_model = v.embedding_model, embedding_bq = binary_quantize(v.embedding)
FROM vectors v WHERE v.id = uv.vector_id AND uv.vector_id = ANY(%s)
"""


async def count_pending(pool: AsyncConnectionPool, model: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM vectors WHERE embedding_model <> %s", [model])
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def reembed(pool: AsyncConnectionPool, embedder: Embedder, *, batch: int, dry_run: bool) -> int:
    """Re-embed vectors whose model is not `embedder.model`, `batch` at a time; return how many were
    (with `dry_run`: how many would be, changing nothing)."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    model = embedder.model
    if dry_run:
        return await count_pending(pool, model)
    done = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(_PENDING, [model, batch])
            rows: list[Any] = await cur.fetchall()
            if not rows:
                return done
            texts = [content if is_global else embedding_text(content, stated_at)
                     for _, content, stated_at, is_global in rows]
            vectors = await embedder.embed(texts)  # outside the transaction: no lock held while waiting
            ids = [row[0] for row in rows]
            async with in_all_users(conn):
                async with conn.cursor() as cursor:
                    await cursor.executemany(_UPDATE_VECTOR, [[as_vector(vector), model, vector_id, model]
                                                              for vector_id, vector in zip(ids, vectors, strict=True)])
                await conn.execute(_UPDATE_LINKS, [ids])
        done += len(rows)
        log.info("reembed_batch", vectors=len(rows), total=done, model=model)
