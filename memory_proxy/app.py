"""create_app(settings, http_client=None): routes, error handlers, and a lifespan owning every resource.

Tests hand in an `httpx.AsyncClient` (mocked with respx) used for every outside call; otherwise the
lifespan builds the upstream's clients itself. With WORKER_IN_PROCESS the formation worker runs in
the same process and is stopped (running jobs finished or released) when the app shuts down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException
from psycopg_pool import PoolTimeout

from .api.limit_routes import LIMITS_API
from .api.memory_routes import MANAGE_ROUTES, OPENAPI_CONFIG
from .api.team_memory_routes import TEAM_MEMORIES
from .api.team_routes import TEAMS_API
from .errors import BadRequest, ProxyError, Unavailable, openai_error
from .formation.worker import Worker
from .http.auth import KeyChecker, load_api_keys
from .http.chat_load import ChatLoad, CountChatTurns
from .http.guards import DEPENDENCIES
from .http.head_as_get import HeadAsGet
from .http.request_id import RequestIdMiddleware
from .http.routes import ROUTES
from .observability import log
from .redact.betterleaks import ScanFailed
from .services import open_services
from .settings import Settings


def _proxy_error(_: Request[Any, Any, Any], exc: ProxyError) -> Response[dict[str, Any]]:
    return Response(exc.to_body(), status_code=exc.status_code)


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return Response(openai_error(str(exc.detail), error_type), status_code=exc.status_code)


def _database_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """Where a route meets the database unguarded: a value it cannot hold (NUL, a lone surrogate) is the
    request's fault (400); anything else means the database is unavailable (503). Never a 500."""
    if isinstance(exc, psycopg.DataError | UnicodeError):
        return _proxy_error(request, BadRequest("the request holds characters the database cannot store "
                                                "(NUL or a lone surrogate)", code="unstorable_text"))
    log.warning("database_unavailable", path=request.url.path, error=f"{type(exc).__name__}: {exc}"[:300])
    return _proxy_error(request, Unavailable("the database is unavailable; chat still works, memory does not",
                                             code="database_unavailable"))


def _scan_failed(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """A text the secret scanner could not check is not stored (fail closed): the client may try again."""
    log.warning("secret_scan_failed", path=request.url.path, error=type(exc).__name__)
    return _proxy_error(request, Unavailable("the text could not be checked for secrets, so it was not stored; "
                                             "try again", code="secret_scan_failed"))


def _unexpected_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.error("unhandled_error", path=request.url.path, exc_info=exc)
    return Response(openai_error("internal error in memory-proxy", "server_error"), status_code=500)


def create_app(settings: Settings, http_client: httpx.AsyncClient | None = None, *,
               clock: Callable[[], datetime] = lambda: datetime.now(UTC), warm_scanner: bool = False) -> Litestar:
    """`clock` says when a turn or an API-created memory is stated; the formation benchmark replays
    scripted days through it. `warm_scanner` (serve): the scanner's worker processes start in the
    background at once, not on the first long turn (tests leave them to start when needed)."""
    key_checker = KeyChecker(load_api_keys(settings.server))
    chat_load = ChatLoad()  # the chat turns this process is serving, which its in-process worker yields to

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_services(settings, http_client, wait_for_database=False, search_index=True,
                                 clock=clock) as services:
            app.state.services = services
            warming = asyncio.create_task(services.scanner.warm_up()) if warm_scanner else None
            stop = asyncio.Event()
            worker_task = None
            if settings.formation.enabled and settings.formation.in_process_worker:
                worker = Worker.from_services(services, yielding_to=chat_load.busy)
                worker_task = asyncio.create_task(worker.run(stop, settings.server.shutdown_timeout, services.ready))
            llm = settings.memory_llm  # with the upstream, formation asks each turn's own model
            log.info("started", upstream=settings.upstream.base_url,
                     embedding=f"{settings.embedding.provider}:{settings.embedding.model}",
                     memory_llm=f"{llm.provider}:{'the turn' if llm.provider == 'upstream' else llm.model}",
                     in_process_worker=worker_task is not None,
                     user_id_header=settings.server.user_id_header)
            try:
                yield
            finally:
                stop.set()
                if worker_task:
                    await worker_task
                if warming:
                    await warming
                log.info("stopped")

    app = Litestar(
        route_handlers=[*ROUTES, *MANAGE_ROUTES, TEAMS_API, TEAM_MEMORIES, LIMITS_API],
        dependencies=DEPENDENCIES,
        lifespan=[lifespan],
        exception_handlers={
            ProxyError: _proxy_error,
            HTTPException: _http_error,
            psycopg.Error: _database_error,
            PoolTimeout: _database_error,
            UnicodeError: _database_error,
            ScanFailed: _scan_failed,
            Exception: _unexpected_error,
        },
        request_max_body_size=settings.server.max_request_bytes,
        openapi_config=OPENAPI_CONFIG,
        logging_config=None,  # structlog is configured by observability.configure_logging
        debug=False,
    )
    app.state.key_checker = key_checker
    app.state.metrics_key_checker = KeyChecker(settings.server.metrics_key) if settings.server.metrics_key else None
    # outermost: 404s and errors carry the request id too; HEAD runs every GET route without its body
    handler = CountChatTurns(app.asgi_handler, chat_load)
    app.asgi_handler = RequestIdMiddleware(HeadAsGet(handler))  # type: ignore[assignment]
    return app
