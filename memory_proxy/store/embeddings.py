"""Vectors of another embedding model than the configured one: count them, read a batch, replace them.

Cross-user by nature (row-level security: `in_all_users` for the writes). Replacing a batch updates the
vectors and every link's copies of their model and binary code (users_vectors.embedding_model,
embedding_bq, memory_proxy/store/migrations/0003) in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from .memories import as_vector
from .scope import in_all_users

_OTHER_MODEL = """
SELECT v.id, v.content, v.stated_at, EXISTS (SELECT FROM global_vectors g WHERE g.vector_id = v.id)
FROM vectors v WHERE v.embedding_model <> %s ORDER BY v.id LIMIT %s
"""
_UPDATE_VECTOR = "UPDATE vectors SET embedding = %s, embedding_model = %s WHERE id = %s AND embedding_model <> %s"
_UPDATE_LINKS = """
UPDATE users_vectors uv SET embedding_model = v.embedding_model, embedding_bq = binary_quantize(v.embedding)
FROM vectors v WHERE v.id = uv.vector_id AND uv.vector_id = ANY(%s)
"""


async def count_other_model(conn: AsyncConnection[Any], model: str) -> int:
    cur = await conn.execute("SELECT count(*) FROM vectors WHERE embedding_model <> %s", [model])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def other_model_batch(conn: AsyncConnection[Any], model: str,
                            limit: int) -> list[tuple[str, str, datetime, bool]]:
    """Up to `limit` vectors not of `model`: (id, content, stated_at, is_global), by id."""
    cur = await conn.execute(_OTHER_MODEL, [model, limit])
    return [tuple(row) for row in await cur.fetchall()]


async def replace_embeddings(conn: AsyncConnection[Any], model: str, ids: Sequence[str],
                             vectors: Sequence[Sequence[float]]) -> None:
    """Give each vector of `ids` its new embedding under `model`, and their links the matching copies."""
    async with in_all_users(conn):
        async with conn.cursor() as cursor:
            await cursor.executemany(_UPDATE_VECTOR, [[as_vector(vector), model, vector_id, model]
                                                      for vector_id, vector in zip(ids, vectors, strict=True)])
        await conn.execute(_UPDATE_LINKS, [list(ids)])
