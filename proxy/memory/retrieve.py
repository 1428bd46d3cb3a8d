"""Retrieval for one chat turn: two tiers of memories, within a time budget.

- always-on tier: the user's pinned and identity memories, read without any search (seed 003's
  pre-fetch): the assistant always knows who it talks to;
- query tier: the user's memories for this message, by hybrid search (store.memories.search_hits) and
  ranking (memory.rank). Skipped for contentless messages ("ok", "thanks": selective retrieval). When
  the user has five or fewer memories, all of them, newest first (no search can beat "all"; seed 004);
  when the embedder fails or is slow, the most recent memories instead (seed 004's fallback).

`retrieve_memories` raises only `MemoryUnavailable`, whose reason names the phase that failed and how
(`embedder_error`, `embedder_timeout`, `database_error`, `database_timeout`); `memories_for_turn`
falls back on embedder failures and raises for database ones (the caller then relays without memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

import psycopg
import psycopg_pool

from ..errors import MemoryUnavailable
from ..observability import FAIL_OPEN, RETRIEVAL_LATENCY, log
from ..schemas import Memory
from ..settings import RetrievalSettings
from ..store import memories
from .embed import Embedder, embed_one
from .heuristics import contentless
from .rank import rank

EMBED_SHARE = 0.7  # share of the time budget the embedder may use, so that the fallback still has time
RECORD_USE_TIMEOUT_S = 2.0
CANDIDATES_PER_RESULT = 3  # hits fetched per memory wanted, for MMR and the minimum score to choose from

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TurnMemories:
    always_on: list[Memory]
    query: list[Memory]

    @property
    def all(self) -> list[Memory]:
        """Both tiers, always-on first, each memory once."""
        return _unique([*self.always_on, *self.query])


@asynccontextmanager
async def _phase(name: str, budget_s: float) -> AsyncIterator[None]:
    """Translate failures of one phase (embedder, database) into MemoryUnavailable(`{name}_{how}`)."""
    try:
        async with asyncio.timeout(budget_s):
            yield
    except TimeoutError as exc:
        raise MemoryUnavailable(f"{name}_timeout", f"{name} exceeded {budget_s:.3f}s") from exc
    except MemoryUnavailable as exc:
        raise MemoryUnavailable(f"{name}_error", str(exc)) from exc
    except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
        raise MemoryUnavailable(f"{name}_error", f"memory {name} failed: {exc!r}") from exc


async def _in_database(pool: psycopg_pool.AsyncConnectionPool, budget_s: float,
                       work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
    async with _phase("database", budget_s), pool.connection() as conn:
        return await work(conn)


async def retrieve_memories(*, pool: psycopg_pool.AsyncConnectionPool, embedder: Embedder, user_id: str,
                            query: str, settings: RetrievalSettings,
                            vector: list[float] | None = None) -> list[Memory]:
    """The query tier: the user's best memories for `query`, ranked (benchmarks call this directly)."""
    if vector is None:
        async with _phase("embedder", settings.timeout_s):
            vector = await embed_one(embedder, query)
    hits = await _in_database(pool, settings.timeout_s, lambda conn: memories.search_hits(
        conn, user_id=user_id, model=embedder.model, embedding=vector, text=query,
        limit=settings.top_k * CANDIDATES_PER_RESULT, mode=settings.mode, rrf_k=settings.ranking.rrf_k,
        weights=(1.0, settings.ranking.text_weight)))
    return rank(hits, top_k=settings.top_k, min_score=settings.min_score, mode=settings.mode,
                now=datetime.now(UTC), settings=settings.ranking)


async def memories_for_turn(*, pool: psycopg_pool.AsyncConnectionPool, embedder: Embedder, user_id: str,
                            query: str, settings: RetrievalSettings) -> TurnMemories:
    """Both tiers for a chat turn (see the module docstring), within RETRIEVAL_TIMEOUT_MS. The query is
    embedded while the tiers are read."""
    started = time.perf_counter()
    vector_task = None if contentless(query) else asyncio.create_task(embed_one(embedder, query))
    try:
        tiers = await _in_database(pool, settings.timeout_s, lambda conn: memories.read_tiers(conn, user_id))
        if vector_task is None:
            return TurnMemories(tiers.always_on, [])
        try:
            async with _phase("embedder", _left(started, settings.timeout_s * EMBED_SHARE)):
                vector = await vector_task
        except MemoryUnavailable as exc:  # no search possible: the most recent memories instead
            FAIL_OPEN.labels(exc.reason).inc()
            log.warning("retrieval_fallback_recent", reason=exc.reason, error=str(exc))
            return TurnMemories(tiers.always_on, tiers.recent)
        ranked = await retrieve_memories(pool=pool, embedder=embedder, user_id=user_id, query=query,
                                         vector=vector,
                                         settings=replace(settings, timeout_s=_left(started, settings.timeout_s)))
        if len(tiers.recent) <= settings.inject_all_below:  # all of the user's own, then what search adds
            ranked = _unique([*tiers.recent, *ranked])
        return TurnMemories(tiers.always_on, ranked)
    finally:
        if vector_task and not vector_task.done():
            vector_task.cancel()
        RETRIEVAL_LATENCY.observe(time.perf_counter() - started)


def _left(started: float, budget_s: float) -> float:
    return max(started + budget_s - time.perf_counter(), 0.001)


def _unique(found: list[Memory]) -> list[Memory]:
    seen: set[str] = set()
    return [m for m in found if not (m.id in seen or seen.add(m.id))]  # type: ignore[func-returns-value]


async def record_use(pool: psycopg_pool.AsyncConnectionPool, user_id: str, memory_ids: list[str]) -> None:
    """Count an injection for ranking (frequency, recency); run off the request path, never raises."""
    try:
        await _in_database(pool, RECORD_USE_TIMEOUT_S,
                           lambda conn: memories.record_access(conn, user_id, memory_ids))
    except MemoryUnavailable as exc:  # a lost count only nudges ranking
        log.warning("record_use_failed", reason=exc.reason, error=str(exc)[:300])
