"""Memories in SQL: insert + link (with the exact-duplicate guard), hybrid search, tiers, history.

Each function that reads or writes a user's links runs in that user's row-level security scope
(scope.py): its own transaction on an idle connection, else the caller's transaction as scoped.
`vectors` and `global_vectors` have no owner column and no policy (see db/migrations/0004).

A user's *active* memories are their links with `superseded_at IS NULL` whose vector has not expired
(or is pinned). A superseded link stays for the history (db/migrations/0005).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from ..memory.redact import redact
from ..schemas import FactAttributes, Memory, SearchHit
from .scope import in_all_users, in_user_scope

SEARCH_CANDIDATES = 200
TEXT_CANDIDATES = 2000  # matches the full-text arm scores at most (the user's newest), see _HYBRID
COLD_START_THRESHOLD = 5  # users with fewer memories of their own also see the global ones
ALWAYS_ON_LIMIT = 20  # pinned and identity memories read for the always-on tier
RECENT_LIMIT = 10  # most recent memories: the fallback tier (seed 004); bounds RETRIEVAL_INJECT_ALL_BELOW

LIVE = "(v.expires_at IS NULL OR v.expires_at > now() OR uv.pinned)"  # not expired, or pinned
_MEMORY_COLUMNS = "v.id, v.content, v.created_at, v.stated_at, v.memory_type, coalesce(uv.pinned, false)"

# Hybrid search, one statement. Two arms, each ranking at most %(n)s candidates:
# - vector: the user's SEARCH_CANDIDATES nearest active links by Hamming distance of their binary codes
#   (an index-only scan, db/migrations/0003), plus the global memories while the user has fewer than 5
#   of their own (cold start, seed 001 §4.5), re-ranked by exact cosine (`= ANY(ARRAY(...))` so `vectors`
#   is only probed by primary key). Vectors of another model or dimension are never compared.
# - text: the user's active links whose words match any of the query's (the link's tsvector copy @@ an
#   OR-query, read newest first through the per-user index; at most TEXT_CANDIDATES of them, which bounds
#   the cost when a query word is in nearly every memory of a user with thousands: ~6 µs a match),
#   ranked by BM25 (k1 = 1.2, b = 0.75) with document frequencies counted over the user's own memories.
# The arms are fused by weighted reciprocal rank fusion, Σ weight/(k + rank); memory/rank.py ranks the result.
_HYBRID = """
WITH
few AS (SELECT count(*) < %(cold)s AS cold FROM (  -- cold start: fewer than 5 of their own?
    SELECT 1 FROM users_vectors WHERE user_id = %(user_id)s AND superseded_at IS NULL LIMIT %(cold)s) own),
own AS (  -- BM25's collection size, counted only when the text arm runs
    SELECT count(*) AS n FROM users_vectors WHERE %(use_text)s AND user_id = %(user_id)s AND superseded_at IS NULL),
vec AS (
    SELECT id, row_number() OVER (ORDER BY distance, id) AS rank FROM (
        SELECT v.id, CASE WHEN vector_dims(v.embedding) = %(dims)s THEN v.embedding <=> %(q)s END AS distance
        FROM vectors v
        WHERE %(use_vector)s AND v.id = ANY(ARRAY(
            SELECT memory_candidates(%(user_id)s, %(model)s, binary_quantize(%(q)s), %(candidates)s)
            UNION ALL
            SELECT vector_id FROM global_vectors WHERE %(with_global)s AND (SELECT cold FROM few)
        )) AND v.embedding_model = %(model)s
    ) scored WHERE distance IS NOT NULL ORDER BY distance, id LIMIT %(n)s
),
terms AS (SELECT unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme),
matches AS (
    SELECT uv.vector_id AS id, uv.search_text, length(uv.search_text) AS dl
    FROM users_vectors uv
    WHERE %(use_text)s AND uv.user_id = %(user_id)s AND uv.superseded_at IS NULL
      AND uv.embedding_model = %(model)s AND uv.search_text @@ memory_text_query(%(text)s)
    ORDER BY uv.created_at DESC LIMIT %(text_candidates)s
),
hits AS (
    SELECT m.id, w.lexeme, cardinality(w.positions) AS tf, m.dl
    FROM matches m, unnest(m.search_text) w WHERE w.lexeme IN (SELECT lexeme FROM terms)
),
df AS (SELECT lexeme, count(*) AS df FROM hits GROUP BY lexeme),
txt AS (
    SELECT id, matched, row_number() OVER (ORDER BY bm25 DESC, id) AS rank FROM (
        SELECT h.id, count(*) AS matched, sum(
            ln(1 + ((SELECT n FROM own) - df.df + 0.5) / (df.df + 0.5))
            * h.tf * 2.2 / (h.tf + 1.2 * (0.25 + 0.75 * h.dl / (SELECT avg(dl) FROM matches)))
        ) AS bm25
        FROM hits h JOIN df USING (lexeme) GROUP BY h.id
    ) scored ORDER BY bm25 DESC, id LIMIT %(n)s
),
fused AS (
    SELECT id, sum(weight / (%(rrf_k)s + rank)) AS fused
    FROM (SELECT id, rank, %(w_vector)s::float8 AS weight FROM vec
          UNION ALL SELECT id, rank, %(w_text)s::float8 FROM txt) ranks GROUP BY id
)
SELECT """ + _MEMORY_COLUMNS + """, f.fused,
       CASE WHEN vector_dims(v.embedding) = %(dims)s THEN 1 - (v.embedding <=> %(q)s) ELSE -1 END,
       coalesce(txt.matched, 0), (SELECT count(DISTINCT lexeme) FROM terms),
       coalesce(uv.access_count, 0), uv.last_accessed_at, v.embedding
FROM fused f JOIN vectors v ON v.id = f.id
LEFT JOIN LATERAL (
    -- The user's link (none for a global memory; both arms return active links only), by primary key.
    -- LIMIT keeps the planner from flattening this into a join, and a superseded_at filter here would
    -- match the partial per-user indexes: either way it read all the user's links for every row.
    SELECT pinned, access_count, last_accessed_at FROM users_vectors
    WHERE user_id = %(user_id)s AND vector_id = f.id LIMIT 1
) uv ON true
LEFT JOIN txt ON txt.id = f.id
WHERE """ + LIVE + """
ORDER BY f.fused DESC, v.id
LIMIT %(limit)s
"""

# The always-on tier (pinned and identity memories) and the most recent memories, with the user's count.
_TIERS = f"""
(SELECT {_MEMORY_COLUMNS}, 'always' FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
 WHERE uv.user_id = %(user_id)s AND uv.superseded_at IS NULL AND {LIVE}
   AND (uv.pinned OR v.memory_type = 'identity')
 ORDER BY uv.pinned DESC, v.stated_at DESC LIMIT %(always)s)
UNION ALL
(SELECT {_MEMORY_COLUMNS}, 'recent' FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
 WHERE uv.user_id = %(user_id)s AND uv.superseded_at IS NULL AND {LIVE}
 ORDER BY uv.created_at DESC LIMIT %(recent)s)
"""


@dataclass(frozen=True, slots=True)
class Tiers:
    always_on: list[Memory]  # pinned and identity memories, pinned first, newest first
    recent: list[Memory]  # the most recent active memories, newest first (at most RECENT_LIMIT)


def as_vector(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _memory(row: Sequence[Any]) -> Memory:
    return Memory(id=row[0], content=row[1], created_at=row[2], stated_at=row[3], memory_type=row[4],
                  pinned=bool(row[5]))


async def insert_vector(conn: AsyncConnection[Any], *, content: str, embedding: Sequence[float], model: str,
                        stated_at: datetime | None = None, metadata: dict[str, Any] | None = None,
                        attributes: FactAttributes | None = None) -> str:
    """Store one text and its vector. Every stored memory passes here: secrets are redacted as the last
    line of defence (callers redact before embedding, so this normally changes nothing)."""
    vector_id = str(uuid.uuid4())
    content = redact(content).text
    facts = attributes or FactAttributes()
    await conn.execute(
        "INSERT INTO vectors (id, embedding, embedding_model, content, metadata, stated_at, memory_type,"
        " importance, confidence, expires_at) VALUES (%s, %s, %s, %s, %s, coalesce(%s, now()), %s, %s, %s, %s)",
        [vector_id, as_vector(embedding), model, content, Jsonb(metadata or {"type": "memory"}), stated_at,
         facts.memory_type, facts.importance, facts.confidence, facts.expires_at],
    )
    return vector_id


async def link_vector(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> bool:
    """Link a vector to a user; False when the user already holds the same text (unique guard)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "INSERT INTO users_vectors (user_id, vector_id, content_key, embedding_model, embedding_bq, search_text)"
            " SELECT %s, id, content_key, embedding_model, binary_quantize(embedding), search_text"
            " FROM vectors WHERE id = %s"
            " ON CONFLICT (user_id, content_key) WHERE superseded_at IS NULL DO NOTHING RETURNING vector_id",
            [user_id, vector_id],
        )
        return await cur.fetchone() is not None


async def add_memory(conn: AsyncConnection[Any], *, user_id: str, content: str, embedding: Sequence[float],
                     model: str, stated_at: datetime | None = None, metadata: dict[str, Any] | None = None,
                     attributes: FactAttributes | None = None) -> str | None:
    """Store a new memory for `user_id` in the caller's transaction (or a scope of its own); None if the
    user already has it."""
    async with in_user_scope(conn, user_id):
        vector_id = await insert_vector(conn, content=content, embedding=embedding, model=model,
                                        stated_at=stated_at, metadata=metadata, attributes=attributes)
        if await link_vector(conn, user_id, vector_id):
            return vector_id
        await conn.execute("DELETE FROM vectors WHERE id = %s", [vector_id])
        return None


async def insert_memory(conn: AsyncConnection[Any], *, user_id: str, content: str, embedding: Sequence[float],
                        model: str, stated_at: datetime | None = None, metadata: dict[str, Any] | None = None,
                        attributes: FactAttributes | None = None) -> str:
    """Store a memory for `user_id` in its own transaction; return its id (the existing one if a duplicate)."""
    async with in_user_scope(conn, user_id):
        new_id = await add_memory(conn, user_id=user_id, content=content, embedding=embedding, model=model,
                                  stated_at=stated_at, metadata=metadata, attributes=attributes)
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
            "SELECT vector_id FROM users_vectors WHERE user_id = %s AND content_key = memory_key(%s)"
            " AND superseded_at IS NULL", [user_id, content])
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def replaced_memories(conn: AsyncConnection[Any], user_id: str, limit: int = 20) -> list[tuple[Memory, str]]:
    """The user's memories that another, still active memory replaced (newest first), each with the id
    of that replacement: what "I'm back to …" can bring back."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            f"SELECT {_MEMORY_COLUMNS}, uv.superseded_by FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            " JOIN users_vectors now ON now.user_id = uv.user_id AND now.vector_id = uv.superseded_by"
            " WHERE uv.user_id = %s AND uv.superseded_at IS NOT NULL AND now.superseded_at IS NULL"
            " ORDER BY uv.superseded_at DESC LIMIT %s", [user_id, limit])
        rows = await cur.fetchall()
    return [(_memory(row[:-1]), str(row[-1])) for row in rows]


async def search_hits(
    conn: AsyncConnection[Any],
    *,
    user_id: str,
    model: str,
    embedding: Sequence[float],
    text: str,
    limit: int,
    mode: str = "hybrid",
    rrf_k: int = 60,
    weights: tuple[float, float] = (1.0, 1.0),
    include_global: bool = True,
) -> list[SearchHit]:
    """The user's best `limit` candidates for a query by fused rank (see _HYBRID), with what ranking
    needs. `mode`: hybrid, vector or text (one arm only); `weights`: (vector, text) in the fusion.
    On an idle connection: one round trip."""
    query = as_vector(embedding)
    params = {"q": query, "user_id": user_id, "model": model, "dims": len(query), "text": text,
              "with_global": include_global, "cold": COLD_START_THRESHOLD, "candidates": SEARCH_CANDIDATES,
              "use_vector": mode != "text", "use_text": mode != "vector", "rrf_k": rrf_k,
              "w_vector": weights[0], "w_text": weights[1], "text_candidates": TEXT_CANDIDATES,
              "n": max(limit, 50), "limit": limit}
    async with in_user_scope(conn, user_id):
        # prepare=False: a generic plan (psycopg prepares after 5 runs) took twice as long as one planned
        # for the actual user and words (benchmarks/retrieval.py).
        cur = await conn.execute(_HYBRID, params, binary=True, prepare=False)
    return [SearchHit(memory=_memory(r), fused=float(r[6]), cosine=float(r[7]), matched_terms=int(r[8]),
                      query_terms=int(r[9]), access_count=int(r[10]), last_accessed_at=r[11],
                      embedding=r[12].to_numpy())
            for r in await cur.fetchall()]


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
    """The user's memories most similar to `embedding` by cosine alone, best first, score ≥ `min_score`
    (formation: the neighbours a new fact is compared with)."""
    hits = await search_hits(conn, user_id=user_id, model=model, embedding=embedding, text="", limit=top_k,
                             mode="vector", include_global=include_global)
    return [Memory(id=h.memory.id, content=h.memory.content, created_at=h.memory.created_at, score=h.cosine,
                   stated_at=h.memory.stated_at, memory_type=h.memory.memory_type, pinned=h.memory.pinned)
            for h in hits if h.cosine >= min_score]


async def read_tiers(conn: AsyncConnection[Any], user_id: str) -> Tiers:
    """The always-on tier and the most recent memories (no embedding needed: also when the embedder is down)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_TIERS, {"user_id": user_id, "always": ALWAYS_ON_LIMIT, "recent": RECENT_LIMIT})
    rows = await cur.fetchall()
    return Tiers(always_on=[_memory(r) for r in rows if r[6] == "always"],
                 recent=[_memory(r) for r in rows if r[6] == "recent"])


async def record_access(conn: AsyncConnection[Any], user_id: str, vector_ids: Sequence[str]) -> None:
    """Count one more use of each injected memory (ranking's frequency and recency)."""
    async with in_user_scope(conn, user_id):
        await conn.execute(
            "UPDATE users_vectors SET access_count = access_count + 1, last_accessed_at = now()"
            " WHERE user_id = %s AND vector_id = ANY(%s)", [user_id, list(vector_ids)])


async def supersede_memory(conn: AsyncConnection[Any], *, user_id: str, old_id: str, new_id: str,
                           reason: str, action: str = "replace") -> None:
    """Retire `old_id` for this user only (the vector stays: others may share it, and the link stays for
    the history, pointing at its replacement) and audit it."""
    async with in_user_scope(conn, user_id):
        await conn.execute(
            "UPDATE users_vectors SET superseded_by = %s, superseded_at = now()"
            " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL", [new_id, user_id, old_id])
        await audit(conn, user_id=user_id, old_id=old_id, new_id=new_id, reason=reason, action=action)


async def retire_memory(conn: AsyncConnection[Any], *, user_id: str, vector_id: str, reason: str,
                        action: str) -> bool:
    """Retire the user's active memory without a replacement (the vector stays for other users and the
    history) and audit it as `action` (delete, forget). False when the user has no such active memory."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "UPDATE users_vectors SET superseded_at = now(), superseded_by = NULL"
            " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL RETURNING vector_id",
            [user_id, vector_id])
        found = await cur.fetchone() is not None
        if found:
            await audit(conn, user_id=user_id, old_id=vector_id, new_id=None, reason=reason, action=action)
    return found


async def audit(conn: AsyncConnection[Any], *, user_id: str, old_id: str | None, new_id: str | None,
                reason: str, action: str) -> None:
    """Record a change. `reason` may be a user's free text (management API): redacted like a memory."""
    async with in_user_scope(conn, user_id):
        await conn.execute(
            "INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason, action)"
            " VALUES (%s, %s, %s, %s, %s)", [user_id, old_id, new_id, redact(reason).text, action])


class RestoreConflict(Exception):
    """The memory cannot be restored: it is not a superseded memory of this user, or the same text is active."""


async def restore_memory(conn: AsyncConnection[Any], *, user_id: str, vector_id: str, reason: str = "") -> str | None:
    """Undo a replacement: `vector_id` (superseded) is active again and what replaced it, if still active,
    is superseded by it; both audited as `restore`. Returns the id it took the place of."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT superseded_by FROM users_vectors WHERE user_id = %s AND vector_id = %s"
            " AND superseded_at IS NOT NULL FOR UPDATE", [user_id, vector_id])
        row = await cur.fetchone()
        if row is None:
            raise RestoreConflict(f"{vector_id} is not a superseded memory of this user")
        replacement = row[0]
        if replacement:
            await conn.execute(
                "UPDATE users_vectors SET superseded_by = %s, superseded_at = now()"
                " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL", [vector_id, user_id, replacement])
        cur = await conn.execute(
            "UPDATE users_vectors uv SET superseded_by = NULL, superseded_at = NULL"
            " WHERE user_id = %s AND vector_id = %s AND NOT EXISTS (SELECT 1 FROM users_vectors o"
            "  WHERE o.user_id = uv.user_id AND o.content_key = uv.content_key AND o.superseded_at IS NULL)"
            " RETURNING vector_id", [user_id, vector_id])
        if await cur.fetchone() is None:  # (rowcount is unknown until a pipelined result is fetched)
            raise RestoreConflict("the same text is already an active memory of this user")
        await audit(conn, user_id=user_id, old_id=replacement, new_id=vector_id,
                    reason=reason or "restored by the user", action="restore")
    return str(replacement) if replacement else None


async def lock_linked_statement_time(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> datetime | None:
    """When the user's active memory was stated, locking the link until the transaction ends; None if
    the user no longer holds it (already superseded by another job)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT v.stated_at FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            " WHERE uv.user_id = %s AND uv.vector_id = %s AND uv.superseded_at IS NULL FOR UPDATE OF uv",
            [user_id, vector_id])
    row = await cur.fetchone()
    return row[0] if row else None


async def count_memories(conn: AsyncConnection[Any], user_id: str) -> int:
    """The user's active memories (superseded ones are history, not memories)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT count(*) FROM users_vectors WHERE user_id = %s AND superseded_at IS NULL", [user_id])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def memory_totals(conn: AsyncConnection[Any]) -> tuple[int, int]:
    """(active user-memory links, users holding any) — for the totals gauges (all users)."""
    async with in_all_users(conn):
        cur = await conn.execute(
            "SELECT count(*), count(DISTINCT user_id) FROM users_vectors WHERE superseded_at IS NULL")
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
