"""Thin HTTP handlers: hand the request to chat/turn.py, return its response (guards.py authenticates)."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..chat.turn import chat_turn, relay_models
from ..errors import MemoryUnavailable
from ..services import Services
from ..store import database
from .guards import require_metrics_key, require_proxy_key

READY_TIMEOUT_S = 2.0


@post("/v1/chat/completions", guards=[require_proxy_key], status_code=200)
async def chat_completions(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Response[Any]:
    return await chat_turn(services, request.headers, await request.body())


@get("/v1/models", guards=[require_proxy_key])
async def list_models(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Response[bytes]:
    return await relay_models(services, request.headers)


@get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz")
async def readyz(services: NamedDependency[Services]) -> Response[dict[str, str]]:
    """Ready when the database answers and is migrated; chat works without it, memory does not."""
    try:
        services.require_database()
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with services.pool.connection() as conn:
                await database.ping(conn)
    except MemoryUnavailable as exc:
        return Response({"status": "unavailable", "database": str(exc)}, status_code=503)
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready": reported, not raised
        return Response({"status": "unavailable", "database": type(exc).__name__}, status_code=503)
    return Response({"status": "ready", "database": "ok"})


@get("/metrics", guards=[require_metrics_key])
async def metrics() -> Response[bytes]:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [chat_completions, list_models, healthz, readyz, metrics]
