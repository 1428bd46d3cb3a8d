"""The long-lived resources of a running proxy or worker, opened and closed in one place."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from psycopg_pool import AsyncConnectionPool

from .memory.embed import Embedder, build_embedder
from .memory.llm import MemoryLLM
from .observability import log
from .settings import Settings
from .store.database import make_pool, migrate, start_embedded
from .upstream import Upstream, make_clients


@dataclass(frozen=True)
class Services:
    settings: Settings
    pool: AsyncConnectionPool
    upstream: Upstream
    embedder: Embedder
    llm: MemoryLLM


async def database_url(settings: Settings) -> str:
    if settings.database.url:
        return settings.database.url
    return await asyncio.to_thread(start_embedded, settings.server.data_dir)


@asynccontextmanager
async def open_services(settings: Settings, http_client: httpx.AsyncClient | None = None) -> AsyncIterator[Services]:
    """Database (migrated), pool, HTTP clients, embedder and memory LLM; all closed on exit.
    A given `http_client` (tests: mocked by respx) is used for every outside call and not closed here."""
    conninfo = await database_url(settings)
    applied = await migrate(conninfo)
    if applied:
        log.info("migrations_applied", names=applied)
    clients = [http_client] if http_client else make_clients(settings.upstream)
    upstream = Upstream(settings.upstream, clients)
    async with make_pool(conninfo, settings.database.pool_size) as pool:
        try:
            yield Services(settings=settings, pool=pool, upstream=upstream,
                           embedder=build_embedder(settings.embedding, clients[0]),
                           llm=MemoryLLM(settings.memory_llm, clients[0]))
        finally:
            if http_client is None:
                await upstream.aclose()
