"""Retrieval for one chat turn: embed the query, search the user's memories, within a time budget.

Never raises anything but `MemoryUnavailable`, whose reason names the phase that failed and how
(`embedder_error`, `embedder_timeout`, `database_error`, `database_timeout`): the caller relays the
turn without memories and counts it.
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
    phase = "embedder"
    try:
        async with asyncio.timeout(settings.timeout_s):
            vector = await embed_one(embedder, query)
            phase = "database"
            async with pool.connection() as conn:
                return await memories.search_memories(
                    conn, user_id=user_id, model=embedder.model, embedding=vector,
                    top_k=settings.top_k, min_score=settings.min_score,
                )
    except TimeoutError as exc:
        raise MemoryUnavailable(f"{phase}_timeout", f"retrieval exceeded {settings.timeout_s:.3f}s") from exc
    except MemoryUnavailable as exc:
        raise MemoryUnavailable(f"{phase}_error", str(exc)) from exc
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise MemoryUnavailable("database_error", f"memory search failed: {exc!r}") from exc
    finally:
        RETRIEVAL_LATENCY.observe(time.perf_counter() - started)
