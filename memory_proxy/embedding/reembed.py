"""Re-embed every stored vector of another model than the configured one (after EMBEDDING_MODEL changed).

Search only ever compares vectors of the configured model, so until this has run, memories stored under
the old model are invisible to retrieval (they stay in the database, untouched). Each batch is one
transaction across all users (row-level security: `in_all_users`): the vectors get their new embedding
and model, and every link to them its copies (users_vectors.embedding_model, embedding_bq, memory_proxy/store/migrations/
0003). Idempotent and resumable: a finished batch no longer matches, an interrupted one is redone whole.
The text embedded is the one formation embeds: `embedding_text(content, stated_at)` for users' memories,
the bare text for global memories (as `memories load-global` stores them).
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from ..observability import log
from ..store import embeddings
from .embedders import Embedder
from .memory_document import embedding_text


async def count_pending(pool: AsyncConnectionPool, model: str) -> int:
    async with pool.connection() as conn:
        return await embeddings.count_other_model(conn, model)


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
            rows = await embeddings.other_model_batch(conn, model, batch)
            if not rows:
                return done
            texts = [content if is_global else embedding_text(content, stated_at)
                     for _, content, stated_at, is_global in rows]
            vectors = await embedder.embed(texts)  # outside the transaction: no lock held while waiting
            await embeddings.replace_embeddings(conn, model, [row[0] for row in rows], vectors)
        done += len(rows)
        log.info("reembed_batch", vectors=len(rows), total=done, model=model)
