"""Retrieval for one chat turn: embed the query, search the user's memories, within a time budget.

Never raises anything but `MemoryUnavailable`: the caller relays the turn without memories.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import psycopg_pool

from ..errors import MemoryUnavailable
from ..observability import RETRIEVAL_LATENCY
from ..schemas import Memory
from ..settings import RetrievalSettings
from ..store import memories
from .embed import Embedder, embed_one


async def retrieve_memories(
    *,
    pool: psycopg_pool.AsyncConnectionPool,
    embedder: Embedder,
    user_id: str,
    query: str,
    settings: RetrievalSettings,
) -> list[Memory]:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(settings.timeout_s):
            vector = await embed_one(embedder, query)
            async with pool.connection() as conn:
                return await memories.search_memories(
                    conn, user_id=user_id, model=embedder.model, embedding=vector,
                    top_k=settings.top_k, min_score=settings.min_score,
                )
    except TimeoutError as exc:
        raise MemoryUnavailable("timeout", f"retrieval exceeded {settings.timeout_s:.3f}s") from exc
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise MemoryUnavailable("database", f"memory search failed: {exc!r}") from exc
    finally:
        RETRIEVAL_LATENCY.observe(time.perf_counter() - started)
