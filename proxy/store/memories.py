"""Memories in SQL: insert + link (with the exact-duplicate guard), per-user search, supersede.

Each function that reads or writes a user's links runs in that user's row-level security scope
(scope.py): its own transaction on an idle connection, else the caller's transaction as scoped.
`vectors` and `global_vectors` have no owner column and no policy (see db/migrations/0004).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from ..memory.redact import redact
from ..schemas import Memory
from .scope import in_all_users, in_user_scope

# The user's SEARCH_CANDIDATES nearest links by Hamming distance of their binary codes (an index-only
# scan, see db/migrations/0003), plus the global memories while the user has fewer than 5 of their own
# (cold start, seed 001 §4.5), re-ranked by the exact cosine of the full vectors (`= ANY(ARRAY(...))`
# so `vectors` is only ever probed by primary key, never scanned). Exact for a user with
# up to SEARCH_CANDIDATES memories; above, recall@10 measured in benchmarks/retrieval.py. Vectors of
# another model or dimension are never compared: the CASE guards the distance operator, which raises on
# mismatched dimensions, whatever order the planner picks.
_SEARCH = """
SELECT id, content, created_at, 1 - distance AS score
FROM (
    SELECT v.id, v.content, v.created_at,
           CASE WHEN vector_dims(v.embedding) = %(dims)s THEN v.embedding <=> %(q)s END AS distance
    FROM vectors v
    WHERE v.id = ANY(ARRAY(
        SELECT memory_candidates(%(user_id)s, %(model)s, binary_quantize(%(q)s), %(candidates)s)
        UNION ALL
        SELECT vector_id FROM global_vectors
        WHERE %(with_global)s AND (SELECT count(*) FROM (
            SELECT 1 FROM users_vectors WHERE user_id = %(user_id)s LIMIT 5) own) < 5
    )) AND v.embedding_model = %(model)s
) candidates
WHERE distance <= 1 - %(min_score)s
ORDER BY distance
LIMIT %(k)s
"""

SEARCH_CANDIDATES = 200
COLD_START_THRESHOLD = 5  # users with fewer memories of their own also see the global ones


def as_vector(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


async def insert_vector(conn: AsyncConnection[Any], *, content: str, embedding: Sequence[float], model: str,
                        stated_at: datetime | None = None, metadata: dict[str, Any] | None = None) -> str:
    """Store one text and its vector. Every stored memory passes here: secrets are redacted as the last
    line of defence (callers redact before embedding, so this normally changes nothing)."""
    vector_id = str(uuid.uuid4())
    content = redact(content).text
    await conn.execute(
        "INSERT INTO vectors (id, embedding, embedding_model, content, metadata, stated_at)"
        " VALUES (%s, %s, %s, %s, %s, coalesce(%s, now()))",
        [vector_id, as_vector(embedding), model, content, Jsonb(metadata or {"type": "memory"}), stated_at],
    )
    return vector_id


async def link_vector(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> bool:
    """Link a vector to a user; False when the user already holds the same text (unique guard)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "INSERT INTO users_vectors (user_id, vector_id, content_key, embedding_model, embedding_bq)"
            " SELECT %s, id, content_key, embedding_model, binary_quantize(embedding) FROM vectors WHERE id = %s"
            " ON CONFLICT (user_id, content_key) DO NOTHING RETURNING vector_id",
            [user_id, vector_id],
        )
        return await cur.fetchone() is not None


async def add_memory(conn: AsyncConnection[Any], *, user_id: str, content: str, embedding: Sequence[float],
                     model: str, stated_at: datetime | None = None,
                     metadata: dict[str, Any] | None = None) -> str | None:
    """Store a new memory for `user_id` in the caller's transaction (or a scope of its own); None if the
    user already has it."""
    async with in_user_scope(conn, user_id):
        vector_id = await insert_vector(conn, content=content, embedding=embedding, model=model,
                                        stated_at=stated_at, metadata=metadata)
        if await link_vector(conn, user_id, vector_id):
            return vector_id
        await conn.execute("DELETE FROM vectors WHERE id = %s", [vector_id])
        return None


async def insert_memory(conn: AsyncConnection[Any], *, user_id: str, content: str, embedding: Sequence[float],
                        model: str, metadata: dict[str, Any] | None = None) -> str:
    """Store a memory for `user_id` in its own transaction; return its id (the existing one if a duplicate)."""
    async with in_user_scope(conn, user_id):
        new_id = await add_memory(conn, user_id=user_id, content=content, embedding=embedding,
                                  model=model, metadata=metadata)
    return new_id or await find_same_text(conn, user_id, content) or ""


async def insert_global_memory(conn: AsyncConnection[Any], *, content: str, embedding: Sequence[float],
                               model: str) -> str:
    """A global (cold-start) memory; the same text is stored once."""
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT g.vector_id FROM global_vectors g JOIN vectors v ON v.id = g.vector_id"
            " WHERE v.content_key = memory_key(%s) AND v.embedding_model = %s", [content, model])
        if row := await cur.fetchone():
            return str(row[0])
        vector_id = await insert_vector(conn, content=content, embedding=embedding, model=model,
                                        metadata={"type": "global"})
        await conn.execute("INSERT INTO global_vectors (vector_id) VALUES (%s)", [vector_id])
    return vector_id


async def find_same_text(conn: AsyncConnection[Any], user_id: str, content: str) -> str | None:
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT vector_id FROM users_vectors WHERE user_id = %s AND content_key = memory_key(%s)",
            [user_id, content])
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def search_memories(
    conn: AsyncConnection[Any],
    *,
    user_id: str,
    model: str,
    embedding: Sequence[float],
    top_k: int,
    min_score: float,
    include_global: bool = True,
) -> list[Memory]:
    """The user's memories of `model` most similar to `embedding`, best first, score ≥ `min_score`.
    On an idle connection: one round trip (BEGIN, the user's scope, the search, COMMIT pipelined)."""
    query = as_vector(embedding)
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            _SEARCH,
            {"q": query, "user_id": user_id, "model": model, "dims": len(query), "with_global": include_global,
             "candidates": SEARCH_CANDIDATES, "min_score": min_score, "k": top_k},
        )
    return [Memory(id=r[0], content=r[1], created_at=r[2], score=float(r[3])) for r in await cur.fetchall()]


async def supersede_memory(conn: AsyncConnection[Any], *, user_id: str, old_id: str, new_id: str,
                           reason: str) -> None:
    """Unlink `old_id` for this user only (the vector stays: others may share it) and audit it."""
    async with in_user_scope(conn, user_id):
        await conn.execute("DELETE FROM users_vectors WHERE user_id = %s AND vector_id = %s", [user_id, old_id])
        await conn.execute(
            "INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason) VALUES (%s, %s, %s, %s)",
            [user_id, old_id, new_id, reason])


async def lock_linked_statement_time(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> datetime | None:
    """When the user's linked memory was stated, locking the link until the transaction ends; None if
    the user no longer holds it (already superseded by another job)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT v.stated_at FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            " WHERE uv.user_id = %s AND uv.vector_id = %s FOR UPDATE OF uv", [user_id, vector_id])
    row = await cur.fetchone()
    return row[0] if row else None


async def count_memories(conn: AsyncConnection[Any], user_id: str) -> int:
    async with in_user_scope(conn, user_id):
        cur = await conn.execute("SELECT count(*) FROM users_vectors WHERE user_id = %s", [user_id])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def memory_totals(conn: AsyncConnection[Any]) -> tuple[int, int]:
    """(active user-memory links, users holding at least one) — for the totals gauges (all users)."""
    async with in_all_users(conn):
        cur = await conn.execute("SELECT count(*), count(DISTINCT user_id) FROM users_vectors")
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
