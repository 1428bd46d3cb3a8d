"""create_app(settings, http_client=None): routes, error handlers, and a lifespan owning every resource.

Tests hand in an `httpx.AsyncClient` (mocked with respx) used for the upstream and the embedder;
otherwise the lifespan builds the upstream's clients itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException

from .auth import KeyChecker, load_api_keys
from .errors import ProxyError, openai_error
from .memory.embed import build_embedder
from .observability import log
from .routes import ROUTES
from .services import Services
from .settings import Settings
from .store.database import make_pool, migrate, start_embedded
from .upstream import Upstream, make_clients


async def database_url(settings: Settings) -> str:
    if settings.database.url:
        return settings.database.url
    return await asyncio.to_thread(start_embedded, settings.server.data_dir)


def _proxy_error(_: Request[Any, Any, Any], exc: ProxyError) -> Response[dict[str, Any]]:
    return Response(exc.to_body(), status_code=exc.status_code)


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return Response(openai_error(str(exc.detail), error_type), status_code=exc.status_code)


def _unexpected_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.error("unhandled_error", path=request.url.path, exc_info=exc)
    return Response(openai_error("internal error in memory-proxy", "server_error"), status_code=500)


def create_app(settings: Settings, http_client: httpx.AsyncClient | None = None) -> Litestar:
    key_checker = KeyChecker(load_api_keys(settings.server))

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        conninfo = await database_url(settings)
        applied = await migrate(conninfo)
        if applied:
            log.info("migrations_applied", names=applied)
        pool = make_pool(conninfo, settings.database.pool_size)
        await pool.open(wait=True, timeout=30)
        clients = [http_client] if http_client else make_clients(settings.upstream)
        upstream = Upstream(settings.upstream, clients)
        app.state.services = Services(
            settings=settings, pool=pool, upstream=upstream,
            embedder=build_embedder(settings.embedding, clients[0]),
        )
        log.info("started", upstream=settings.upstream.base_url, embedding_provider=settings.embedding.provider,
                 embedding_model=settings.embedding.model, user_id_header=settings.server.user_id_header)
        try:
            yield
        finally:
            await pool.close()
            if http_client is None:
                await upstream.aclose()

    app = Litestar(
        route_handlers=ROUTES,
        lifespan=[lifespan],
        exception_handlers={
            ProxyError: _proxy_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        request_max_body_size=settings.server.max_request_bytes,
        openapi_config=None,
        debug=False,
    )
    app.state.key_checker = key_checker
    return app
