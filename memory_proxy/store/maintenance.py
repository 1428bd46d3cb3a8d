"""Maintenance SQL for one user: expire, merge near-duplicates, prune stale memories.

Nothing is destroyed: a retired memory's link is marked superseded (by its twin for a merge, by nothing
for an expiry or a prune) and audited in memory_updates with the action, so it stays in the user's
history and can be restored. Pinned memories are never retired. Each function runs in the user's
row-level security scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from .scope import in_all_users, in_user_scope

_RETIRE = """
WITH retired AS (
    UPDATE users_vectors uv SET superseded_at = now(), superseded_by = %(by)s
    FROM vectors v
    WHERE uv.user_id = %(user_id)s AND uv.vector_id = ANY(%(ids)s) AND v.id = uv.vector_id
      AND uv.superseded_at IS NULL AND NOT uv.pinned
    RETURNING uv.vector_id
)
INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason, action)
SELECT %(user_id)s, vector_id, %(by)s, %(reason)s, %(action)s FROM retired
RETURNING old_vector_id
"""

# Each active memory with a newer active memory of the same user and kind (a fact, or an episode) at cosine >
# threshold: among the user's 5 nearest by binary code (memory_candidates), exact cosine checked.
_NEAR_DUPLICATES = """
SELECT a.vector_id, twin.id
FROM users_vectors a JOIN vectors va ON va.id = a.vector_id
CROSS JOIN LATERAL (
    SELECT v.id FROM vectors v
    WHERE v.id = ANY(ARRAY(SELECT memory_candidates(a.user_id, a.embedding_model, a.embedding_bq, 5)))
      AND v.id <> a.vector_id AND vector_dims(v.embedding) = vector_dims(va.embedding)
      AND 1 - (v.embedding <=> va.embedding) > %(similarity)s
      AND (v.stated_at, v.id) > (va.stated_at, va.id)
      AND (v.memory_type = 'episode') = (va.memory_type = 'episode')  -- a fact never retires words, nor words a fact
    ORDER BY v.stated_at DESC LIMIT 1
) twin
WHERE a.user_id = %(user_id)s AND a.superseded_at IS NULL AND NOT a.pinned
"""

# Types that decay only (retrieval/rank.py's decayed_after_days says after how many days of no use).
_STALE = """
SELECT uv.vector_id FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
WHERE uv.user_id = %(user_id)s AND uv.superseded_at IS NULL AND NOT uv.pinned
  AND (%(decayed)s::jsonb ->> v.memory_type) IS NOT NULL
  AND greatest(uv.last_accessed_at, v.stated_at) < now() - %(after_days)s * interval '1 day'
  AND greatest(uv.last_accessed_at, v.stated_at)
      < now() - (%(decayed)s::jsonb ->> v.memory_type)::float8 * interval '1 day'
"""


async def retire(conn: AsyncConnection[Any], *, user_id: str, ids: list[str], action: str, reason: str,
                 by: str | None = None) -> int:
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_RETIRE, {"user_id": user_id, "ids": ids, "by": by, "reason": reason,
                                           "action": action})
        return len(await cur.fetchall())  # fetched, not rowcount: a pipelined result is known only then


async def expired(conn: AsyncConnection[Any], user_id: str) -> list[str]:
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT uv.vector_id FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            " WHERE uv.user_id = %s AND uv.superseded_at IS NULL AND NOT uv.pinned AND v.expires_at <= now()",
            [user_id])
    return [row[0] for row in await cur.fetchall()]


async def near_duplicates(conn: AsyncConnection[Any], user_id: str, similarity: float) -> list[tuple[str, str]]:
    """(older, newer twin) pairs."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_NEAR_DUPLICATES, {"user_id": user_id, "similarity": similarity})
    return [(row[0], row[1]) for row in await cur.fetchall()]


async def stale(conn: AsyncConnection[Any], user_id: str, *, after_days: float,
                decayed_after: Mapping[str, float]) -> list[str]:
    """Active, unpinned memories unused for `after_days` and, per type, for `decayed_after[type]` days
    (a type missing from it never goes stale)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_STALE, {"user_id": user_id, "after_days": after_days,
                                          "decayed": Jsonb(dict(decayed_after))})
    return [row[0] for row in await cur.fetchall()]


async def users_with_memories(conn: AsyncConnection[Any]) -> list[str]:
    async with in_all_users(conn):
        cur = await conn.execute("SELECT DISTINCT user_id FROM users_vectors")  # history too: it expires
    return [row[0] for row in await cur.fetchall()]


LOCK_KEY = 7_224_802  # pg_try_advisory_lock: one maintenance run at a time across workers


@asynccontextmanager
async def run_alone(conn: AsyncConnection[Any]) -> AsyncIterator[bool]:
    """Whether this connection holds the maintenance lock (held until the block ends); False when another
    worker's maintenance runs."""
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
    row = await cur.fetchone()
    if not (row and row[0]):
        yield False
        return
    try:
        yield True
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
