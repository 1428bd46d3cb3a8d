"""Memories in SQL: insert + link, per-user similarity search, counts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from ..schemas import Memory

# Exact per-user scan: the (user_id, vector_id) primary key finds the user's links, then cosine
# distance on those rows only. Vectors of another model or dimension are never compared (the CASE
# guards the distance operator, which raises on mismatched dimensions, whatever order the planner picks).
_SEARCH = """
SELECT id, content, created_at, 1 - distance AS score
FROM (
    SELECT v.id, v.content, v.created_at,
           CASE WHEN vector_dims(v.embedding) = %(dims)s THEN v.embedding <=> %(q)s END AS distance
    FROM users_vectors uv
    JOIN vectors v ON v.id = uv.vector_id
    WHERE uv.user_id = %(user_id)s AND v.embedding_model = %(model)s
) candidates
WHERE distance <= 1 - %(min_score)s
ORDER BY distance
LIMIT %(k)s
"""


def as_vector(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


async def insert_memory(
    conn: AsyncConnection[Any],
    *,
    user_id: str,
    content: str,
    embedding: Sequence[float],
    model: str,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Store a new vector and link it to `user_id`, in one transaction; return the vector id."""
    vector_id = str(uuid.uuid4())
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO vectors (id, embedding, embedding_model, content, metadata)"
            " VALUES (%s, %s, %s, %s, %s)",
            [vector_id, as_vector(embedding), model, content, Jsonb(metadata or {"type": "memory"})],
        )
        await conn.execute(
            "INSERT INTO users_vectors (user_id, vector_id) VALUES (%s, %s)", [user_id, vector_id]
        )
    return vector_id


async def search_memories(
    conn: AsyncConnection[Any],
    *,
    user_id: str,
    model: str,
    embedding: Sequence[float],
    top_k: int,
    min_score: float,
) -> list[Memory]:
    """The user's memories of `model` most similar to `embedding`, best first, score ≥ `min_score`."""
    query = as_vector(embedding)
    cur = await conn.execute(
        _SEARCH,
        {"q": query, "user_id": user_id, "model": model, "dims": len(query),
         "min_score": min_score, "k": top_k},
    )
    return [Memory(id=r[0], content=r[1], created_at=r[2], score=float(r[3])) for r in await cur.fetchall()]


async def count_memories(conn: AsyncConnection[Any], user_id: str) -> int:
    cur = await conn.execute("SELECT count(*) FROM users_vectors WHERE user_id = %s", [user_id])
    row = await cur.fetchone()
    return int(row[0]) if row else 0
