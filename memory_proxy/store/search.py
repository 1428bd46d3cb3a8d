"""The search statement: a chat turn's memories in one round trip (tiers and hybrid search together).

One statement returns, for a user and a query:
- the always-on tier (pinned and identity memories) and the most recent memories (the fallback tier),
  read without any search — also when there is no query vector (a contentless turn, a failed embedder);
- with a query vector, the best `limit` candidates of the hybrid search, by fused rank:
  - vector arm: the user's SEARCH_CANDIDATES nearest active links by Hamming distance of their binary
    codes (an index-only scan, memory_proxy/store/migrations/0003), plus the global memories while the user has fewer
    than COLD_START_THRESHOLD of their own (cold start), re-ranked by exact cosine (`= ANY(ARRAY(...))`, so
    `vectors` is only probed by primary key). Vectors of another model or dimension are never compared.
  - text arm: BM25 over the user's own memories, from the per-user postings of memory_proxy/store/migrations/0007
    (`memory_terms`, an index-only read per query word), words most memories hold dropped; a word is
    scored in at most POSTINGS_PER_TERM memories.
  - the arms fused by weighted reciprocal rank fusion;
  - for each candidate, its similarity to every candidate (MMR's redundancy, retrieval/rank.py), from the
    binary codes: cos(π · hamming / bits), 30 × 30 small numbers instead of 30 vectors of 4 KB.
The formulas, the tiers' sizes and the cold-start threshold are store/scoring.py's, which the in-process
index (retrieval/indexes.py) ranks with too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from psycopg import AsyncConnection, AsyncCursor

from ..records import Memory, SearchHit
from . import scoring
from .scope import in_user_scope
from .scoring import (
    ALWAYS_ON_LIMIT,
    BM25_B,
    BM25_K1,
    COLD_START_THRESHOLD,
    COMMON_TERM_SHARE,
    RECENT_READ,
    Sql,
)
from .teams import MAX_TEAMS_READ, Holder, TeamRef

SEARCH_CANDIDATES = 200  # binary-code neighbours re-ranked by exact cosine (recall@10 1.000 at 10,000)
POSTINGS_PER_TERM = 500  # memories scored per query word at most (~6 µs each): an arbitrary 500 of a
#                          word more common than that (its BM25 weight is low; rarer words still rank)

LIVE = "(v.expires_at IS NULL OR v.expires_at > now() OR uv.pinned)"  # not expired, or pinned
MEMORY_COLUMNS = "v.id, v.content, v.created_at, v.stated_at, v.memory_type, coalesce(uv.pinned, false)"

# store/scoring.py's formulas written as SQL over the statement's columns and parameters
_USERS_MEMORIES = Sql("(SELECT n FROM stats)")
_BM25 = scoring.bm25(scoring.idf(_USERS_MEMORIES, Sql("t.df")), Sql("p.tf"), Sql("p.dl"),
                     Sql("(SELECT avgdl FROM stats)"), Sql("%(k1)s"), Sql("%(b)s"))
_MOST_HOLDERS = scoring.most_holders(_USERS_MEMORIES, Sql("%(common)s"))
_RRF = scoring.rrf(Sql("weight"), Sql("rank"), Sql("%(rrf_k)s"))

_STATEMENT = """
WITH
-- Functions of the parameters computed once: in the prepared (generic) plan a parameter is no constant,
-- so binary_quantize(q) in the ORDER BY ran once per memory (~1 ms at 1,000 memories).
query AS (SELECT binary_quantize(%(q)s) AS code, cardinality(tsvector_to_array(to_tsvector('english', %(text)s))) AS words),
stats AS (SELECT coalesce(max(memories), 0) AS n, coalesce(max(words)::float8 / nullif(max(memories), 0), 1) AS avgdl
          FROM memory_term_stats WHERE user_id = %(user_id)s),
vec AS (
    SELECT id, distance, row_number() OVER (ORDER BY distance, id) AS rank FROM (
        SELECT v.id, CASE WHEN vector_dims(v.embedding) = %(dims)s THEN v.embedding <=> %(q)s END AS distance
        FROM vectors v
        WHERE %(use_vector)s AND v.id = ANY(ARRAY(
            -- memory_candidates() inlined: a function with a SET clause is never inlined and cost 2 ms more
            -- at 10,000 memories; the statement runs with bitmap scans off instead (see search())
            (SELECT uv.vector_id FROM users_vectors uv
             WHERE uv.user_id = %(user_id)s AND uv.embedding_model = %(model)s AND uv.superseded_at IS NULL
             ORDER BY CASE WHEN length(uv.embedding_bq) = %(dims)s THEN uv.embedding_bq <~> (SELECT code FROM query) END
             LIMIT %(candidates)s)  -- codes of another dimension under the same model name sort last
            UNION ALL
            SELECT vector_id FROM global_vectors
            WHERE %(with_global)s AND (SELECT n FROM stats) < %(cold)s
        )) AND v.embedding_model = %(model)s
    ) scored WHERE distance IS NOT NULL ORDER BY distance, id LIMIT %(n)s
),
terms AS (  -- the query's words that some but at most COMMON_TERM_SHARE of the user's memories hold
    SELECT l.lexeme, l.df FROM memory_lexicon l
    WHERE %(use_text)s AND l.user_id = %(user_id)s
      AND l.lexeme = ANY(tsvector_to_array(to_tsvector('english', %(text)s)))
      AND l.df <= """ + str(_MOST_HOLDERS) + """
),
txt AS (
    SELECT id, matched, row_number() OVER (ORDER BY bm25 DESC, id) AS rank FROM (
        SELECT p.vector_id AS id, count(*) AS matched, sum(""" + str(_BM25) + """) AS bm25
        FROM terms t CROSS JOIN LATERAL (  -- at most POSTINGS_PER_TERM per word: a bounded cost
            SELECT vector_id, tf, dl FROM memory_terms WHERE user_id = %(user_id)s AND lexeme = t.lexeme
            LIMIT %(postings)s) p
        GROUP BY p.vector_id
    ) scored ORDER BY bm25 DESC, id LIMIT %(n)s
),
fused AS (
    SELECT id, sum""" + str(_RRF) + """ AS fused, min(distance) AS distance
    FROM (SELECT id, rank, %(w_vector)s::float8 AS weight, distance FROM vec
          UNION ALL SELECT id, rank, %(w_text)s::float8, NULL FROM txt) ranks GROUP BY id
),
top AS (
    SELECT """ + MEMORY_COLUMNS + """, f.fused,
           CASE WHEN vector_dims(v.embedding) = %(dims)s THEN 1 - coalesce(f.distance, v.embedding <=> %(q)s)
                ELSE -1 END AS cosine,
           coalesce(txt.matched, 0) AS matched, coalesce(uv.access_count, 0) AS access_count,
           uv.last_accessed_at, coalesce(uv.embedding_bq, binary_quantize(v.embedding)::varbit) AS bq
    FROM fused f JOIN vectors v ON v.id = f.id
    LEFT JOIN LATERAL (
        -- The user's link (none for a global memory; both arms return active links only), by primary key.
        -- LIMIT keeps the planner from flattening this into a join that read all the user's links per row.
        SELECT pinned, access_count, last_accessed_at, embedding_bq FROM users_vectors
        WHERE user_id = %(user_id)s AND vector_id = f.id LIMIT 1
    ) uv ON true
    LEFT JOIN txt ON txt.id = f.id
    WHERE v.embedding_model = %(model)s AND """ + LIVE + """
    ORDER BY f.fused DESC, v.id
    LIMIT %(limit)s
),
ranked AS (SELECT row_number() OVER (ORDER BY fused DESC, id) AS pos, * FROM top),
tiers AS (
    (SELECT 'always' AS kind, """ + MEMORY_COLUMNS + """,
            row_number() OVER (ORDER BY uv.pinned DESC, v.stated_at DESC, v.id) AS pos
     FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
     WHERE %(with_tiers)s AND uv.user_id = %(user_id)s AND uv.superseded_at IS NULL AND """ + LIVE + """
       AND (uv.pinned OR uv.identity)  -- users_vectors_always_on (0007)
     ORDER BY uv.pinned DESC, v.stated_at DESC, v.id LIMIT %(always)s)
    UNION ALL
    (SELECT 'recent', """ + MEMORY_COLUMNS + """, row_number() OVER (ORDER BY uv.created_at DESC)
     FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
     WHERE %(with_tiers)s AND uv.user_id = %(user_id)s AND uv.superseded_at IS NULL AND """ + LIVE + """
       AND NOT (%(recent_facts)s AND uv.episode)
     ORDER BY uv.created_at DESC LIMIT %(recent)s)  -- the window's order: the index scan stops at the limit
)
SELECT 'hit', r.id, r.content, r.created_at, r.stated_at, r.memory_type, r."coalesce", r.fused, r.cosine,
       r.matched, (SELECT words FROM query), r.access_count, r.last_accessed_at,
       ARRAY(SELECT CASE WHEN length(o.bq) = length(r.bq) THEN cos(pi() * (o.bq <~> r.bq) / length(r.bq))
                         ELSE 0 END::float4
             FROM ranked o ORDER BY o.pos), r.pos
FROM ranked r
UNION ALL
SELECT kind, id, content, created_at, stated_at, memory_type, "coalesce", NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, pos  -- each tier in its own order (pinned first; newest first)
FROM tiers
ORDER BY 1, 15
"""


@dataclass(frozen=True, slots=True)
class Found:
    """What the search statement returns for a turn."""

    always_on: list[Memory] = field(default_factory=list)  # pinned and identity, pinned first, newest first
    recent: list[Memory] = field(default_factory=list)  # the newest active memories (at most RECENT_READ)
    hits: list[SearchHit] = field(default_factory=list)  # search candidates, best fused rank first
    late_weight: float = 0.0  # the late-interaction arm's weight in `fused`, when it ran (retrieval/late_interaction.py)

    def shown(self, inject_all_below: int) -> Found:
        """What of a team's found a turn may show: its pinned memories, its hits, and its newest memories only
        for a team holding at most `inject_all_below` (then all of them, as for a small user). The rest is not
        confirmed, marked nor ranked: a team of 10,000 memories is searched, never read whole."""
        small = len(self.recent) <= inject_all_below
        return Found([m for m in self.always_on if m.pinned], self.recent if small else [], self.hits,
                     self.late_weight)


@dataclass(frozen=True, slots=True)
class Scoped:
    """A turn's search in every scope the user reads: their own, and each team's they belong to."""

    personal: Found
    teams: dict[str, Found]  # by team id: only teams the user belongs to now (memories not marked as theirs)
    memberships: tuple[TeamRef, ...]  # the user's teams when the search ran


_MEMBERSHIPS = ("SELECT t.id, t.name FROM team_members m JOIN teams t ON t.id = m.team_id"  # the teams a turn reads
                f" WHERE m.user_id = %s ORDER BY m.added_at DESC, t.id LIMIT {MAX_TEAMS_READ}")


def as_vector(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def memory(row: Sequence[Any]) -> Memory:
    """A Memory from MEMORY_COLUMNS."""
    return Memory(id=row[0], content=row[1], created_at=row[2], stated_at=row[3], memory_type=row[4],
                  pinned=bool(row[5]))


async def search(
    conn: AsyncConnection[Any],
    *,
    user_id: str,
    model: str,
    embedding: Sequence[float] | None,
    text: str = "",
    limit: int = 30,
    mode: str = "hybrid",
    rrf_k: int = 60,
    weights: tuple[float, float] = (1.0, 1.0),
    include_global: bool = True,
    tiers: bool = False,
    recent: int = RECENT_READ,
    recent_facts: bool = False,
) -> Found:
    """The user's best `limit` candidates for a query (none without `embedding`), and with `tiers` the
    always-on and recent tiers (the `recent` newest memories; with `recent_facts`, facts only). `mode`: hybrid,
    vector or text (one arm only); `weights`: (vector, text) in the fusion. On an idle connection: one round trip."""
    params = _params(user_id=user_id, model=model, embedding=embedding, text=text, limit=limit, mode=mode,
                     rrf_k=rrf_k, weights=weights, include_global=include_global, tiers=tiers, recent=recent,
                     recent_facts=recent_facts)
    async with in_user_scope(conn, user_id):
        cur = await _send(conn, params)
    return _found(await cur.fetchall())


async def search_scopes(conn: AsyncConnection[Any], *, user_id: str, teams: Collection[str], model: str,
                        embedding: Sequence[float] | None, text: str = "", limit: int = 30, mode: str = "hybrid",
                        rrf_k: int = 60, weights: tuple[float, float] = (1.0, 1.0), tiers: bool = False,
                        team_limit: int = 9, recent: int = RECENT_READ, recent_facts: bool = False) -> Scoped:
    """`search` for the user, and for each of `teams` (those the caller believes the user belongs to) the
    team's own best `team_limit` candidates, ranked within the team (its BM25 statistics are its own); with the
    user's memberships now (the MAX_TEAMS_READ added last: only those are searched). One round trip on an idle
    connection: every statement runs in the user's scope, so a team the user has left returns no row
    (memory_proxy/store/migrations/0013), whatever the caller believed."""
    params = _params(user_id=user_id, model=model, embedding=embedding, text=text, limit=limit, mode=mode,
                     rrf_k=rrf_k, weights=weights, include_global=True, tiers=tiers, recent=recent,
                     recent_facts=recent_facts)
    async with in_user_scope(conn, user_id):
        held = await conn.execute(_MEMBERSHIPS, [user_id])
        mine = await _send(conn, params)
        theirs = {team: await conn.execute(_STATEMENT, {**params, "user_id": Holder.team(team).principal, "with_global": False,
                                                        "limit": team_limit if embedding is not None else 0},
                                           binary=True) for team in list(teams)[:MAX_TEAMS_READ]}
    memberships = tuple(TeamRef(*row) for row in await held.fetchall())
    found = {team.id: _found(await theirs[team.id].fetchall()) for team in memberships if team.id in theirs}
    return Scoped(_found(await mine.fetchall()), found, memberships)


def _params(*, user_id: str, model: str, embedding: Sequence[float] | None, text: str, limit: int, mode: str,
            rrf_k: int, weights: tuple[float, float], include_global: bool, tiers: bool, recent: int = RECENT_READ,
            recent_facts: bool = False) -> dict[str, Any]:
    searching = embedding is not None
    query = as_vector(embedding if embedding is not None else [0.0])
    return {"q": query, "user_id": user_id, "model": model,
            "dims": len(query) if searching else -1, "text": text, "with_global": include_global,
            "cold": COLD_START_THRESHOLD, "candidates": SEARCH_CANDIDATES,
            "use_vector": searching and mode != "text", "use_text": searching and mode != "vector" and bool(text),
            "common": COMMON_TERM_SHARE, "postings": POSTINGS_PER_TERM, "k1": BM25_K1, "b": BM25_B, "rrf_k": rrf_k,
            "w_vector": weights[0], "w_text": weights[1], "n": max(limit, 50), "limit": limit if searching else 0,
            "with_tiers": tiers, "always": ALWAYS_ON_LIMIT, "recent": recent, "recent_facts": recent_facts}


async def _send(conn: AsyncConnection[Any], params: dict[str, Any]) -> AsyncCursor[Any]:
    """Queue the search statement in the open scope (its result is read once the scope's pipeline ends)."""
    # The planner estimates a user's links from the average user and then prefers a bitmap heap scan
    # (one heap page per memory) to the index-only scan of users_vectors_search (memory_proxy/store/migrations/0003).
    await conn.execute("SELECT set_config('enable_bitmapscan', 'off', true)")  # this transaction only
    # Prepared by psycopg after 5 runs (its default): planning this statement costs more than the generic
    # plan loses at 100 and 1,000 memories, though not at 10,000 (`python -m benchmarks.retrieval`; the
    # figures: docs/BENCHMARKS.md#retrieval-latency).
    return await conn.execute(_STATEMENT, params, binary=True)


def _found(rows: Sequence[Sequence[Any]]) -> Found:
    found = Found()
    for row in rows:
        kind, rest = row[0], row[1:]
        if kind == "hit":
            found.hits.append(SearchHit(memory=memory(rest), fused=float(rest[6]), cosine=float(rest[7]),
                                        matched_terms=int(rest[8]), query_terms=int(rest[9]),
                                        access_count=int(rest[10]), last_accessed_at=rest[11],
                                        similar=tuple(rest[12])))
        else:
            (found.always_on if kind == "always" else found.recent).append(memory(rest))
    return found


# By primary key, (holder, id) pair by pair, whether retired read as a column: with `superseded_at IS NULL` in
# WHERE, a plan prepared on statistics that predate a team's many new rows walked the partial index
# users_vectors_recent through every row of every holder (benchmarks/team_relay; docs/BENCHMARKS.md#team-memory).
_ACTIVE_TEXTS = ("SELECT uv.user_id, v.id, v.content, uv.superseded_at IS NULL"
                 " FROM unnest(%s::text[], %s::text[]) AS wanted(user_id, vector_id)"
                 " JOIN users_vectors uv ON uv.user_id = wanted.user_id AND uv.vector_id = wanted.vector_id"
                 " JOIN vectors v ON v.id = uv.vector_id")


async def active_texts(conn: AsyncConnection[Any], user_id: str, ids: Collection[str]) -> dict[str, str]:
    """Which of `ids` are still active memories of the user, with their text now (one round trip)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_ACTIVE_TEXTS, [[user_id] * len(ids), list(ids)])
    return {vector_id: content for _, vector_id, content, active in await cur.fetchall() if active}


async def confirm(conn: AsyncConnection[Any], user_id: str,
                  wanted: Collection[tuple[str, str]]) -> tuple[dict[tuple[str, str], str], tuple[TeamRef, ...]]:
    """Which of the `wanted` (holder, id) pairs are still active memories of their holder (the user, or a team
    principal) that the user may read now, with their text now; and the user's memberships now. One round
    trip: a team the user has left holds no row of theirs any more (memory_proxy/store/migrations/0013)."""
    holders, ids = zip(*wanted, strict=True) if wanted else ((), ())
    async with in_user_scope(conn, user_id):
        held = await conn.execute(_MEMBERSHIPS, [user_id])
        cur = await conn.execute(_ACTIVE_TEXTS, [list(holders), list(ids)])
    current = {(holder, vector_id): content for holder, vector_id, content, active in await cur.fetchall() if active}
    return current, tuple(TeamRef(*row) for row in await held.fetchall())


async def neighbours(conn: AsyncConnection[Any], *, user_id: str, model: str, embedding: Sequence[float],
                     top_k: int, min_score: float, include_global: bool = True) -> list[Memory]:
    """The user's memories most similar to `embedding` by cosine alone, best first, score ≥ `min_score`
    (formation: the neighbours a new fact is compared with)."""
    found = await search(conn, user_id=user_id, model=model, embedding=embedding, limit=top_k, mode="vector",
                         include_global=include_global)
    return [Memory(id=h.memory.id, content=h.memory.content, created_at=h.memory.created_at, score=h.cosine,
                   stated_at=h.memory.stated_at, memory_type=h.memory.memory_type, pinned=h.memory.pinned)
            for h in found.hits if h.cosine >= min_score]


_NEIGHBOUR_FACTS = ("SELECT " + MEMORY_COLUMNS + ", 1 - (v.embedding <=> %(q)s) AS cosine"
                    " FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                    " WHERE uv.user_id = %(user_id)s AND uv.embedding_model = %(model)s AND uv.superseded_at IS NULL"
                    "   AND NOT uv.episode AND vector_dims(v.embedding) = %(dims)s AND " + LIVE +
                    " ORDER BY v.embedding <=> %(q)s, v.id LIMIT %(k)s")


async def neighbour_facts(conn: AsyncConnection[Any], *, user_id: str, model: str, embedding: Sequence[float],
                          top_k: int) -> list[Memory]:
    """The holder's own facts (no episode, no global memory) most similar to `embedding`, best first, by exact
    cosine over all of them: formation's comparison of a new fact, off the chat path, where a user's words said
    near it must not crowd out the facts it may replace (formation/episodes.py)."""
    query = as_vector(embedding)
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_NEIGHBOUR_FACTS, {"q": query, "user_id": user_id, "model": model,
                                                    "dims": len(query), "k": top_k})
    return [replace(memory(row), score=float(row[6])) for row in await cur.fetchall()]
