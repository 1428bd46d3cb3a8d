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
from .store.database import embedded_postgres, make_pool, migrate
from .upstream import Upstream, make_clients


@dataclass(frozen=True)
class Services:
    settings: Settings
    pool: AsyncConnectionPool
    upstream: Upstream
    embedder: Embedder
    llm: MemoryLLM


@asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """DATABASE_URL, or the embedded PostgreSQL under the data dir for as long as the block runs."""
    if settings.database.url:
        yield settings.database.url
        return
    embedded = embedded_postgres(settings.server.data_dir)
    conninfo = await asyncio.to_thread(embedded.__enter__)
    try:
        yield conninfo
    finally:
        await asyncio.to_thread(embedded.__exit__, None, None, None)


@asynccontextmanager
async def open_services(settings: Settings, http_client: httpx.AsyncClient | None = None) -> AsyncIterator[Services]:
    """Database (migrated), pool, HTTP clients, embedder and memory LLM; all closed on exit.
    A given `http_client` (tests: mocked by respx) is used for every outside call and not closed here."""
    async with database(settings) as conninfo:
        applied = await migrate(conninfo)
        if applied:
            log.info("migrations_applied", names=applied)
        async with make_pool(conninfo, settings.database.pool_size) as pool:
            clients = [http_client] if http_client else make_clients(settings.upstream)
            upstream = Upstream(settings.upstream, clients)
            try:
                yield Services(settings=settings, pool=pool, upstream=upstream,
                               embedder=build_embedder(settings.embedding, clients[0]),
                               llm=MemoryLLM(settings.memory_llm, clients[0]))
            finally:
                if http_client is None:
                    await upstream.aclose()
