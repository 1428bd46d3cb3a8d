"""Thin HTTP handlers: authenticate, hand the request to the pipeline, return its response."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .auth import KeyChecker, bearer_token
from .errors import AuthenticationFailed
from .pipeline import chat_turn, relay_models
from .services import Services
from .store import database

READY_TIMEOUT_S = 2.0


async def require_api_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Async on purpose: Litestar runs a sync guard in a thread pool, on every request."""
    checker: KeyChecker = connection.app.state.key_checker
    token = bearer_token(connection.headers.get("authorization"))
    if not token:
        raise AuthenticationFailed("missing API key: send 'Authorization: Bearer <key>'")
    if not checker.verify(token):
        raise AuthenticationFailed("invalid API key")


def _services(request: Request[Any, Any, Any]) -> Services:
    return request.app.state.services


@post("/v1/chat/completions", guards=[require_api_key], status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await chat_turn(_services(request), request.headers, await request.body())


@get("/v1/models", guards=[require_api_key])
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await relay_models(_services(request), request.headers)


@get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> Response[dict[str, str]]:
    """Ready when the database answers and is migrated; chat works without it, memory does not."""
    if not _services(request).ready.is_set():
        return Response({"status": "unavailable", "database": "not reachable or not migrated yet"}, status_code=503)
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with _services(request).pool.connection() as conn:
                await database.ping(conn)
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready": reported, not raised
        return Response({"status": "unavailable", "database": type(exc).__name__}, status_code=503)
    return Response({"status": "ready", "database": "ok"})


@get("/metrics")
async def metrics() -> Response[bytes]:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [chat_completions, list_models, healthz, readyz, metrics]
