"""Who may call the HTTP routes, and what every route is given: declared once for both routers.

- `DEPENDENCIES` (the app's) injects `services`, the running app's `Services`.
- `require_proxy_key` guards the chat routes (routes.py): a proxy key (PROXY_API_KEYS).
- `require_metrics_key` guards `/metrics`: METRICS_KEY or a proxy key.
- `require_any_key` guards the management API (api/): a proxy key, or a key of the `api_keys` table once
  the database is ready; it leaves the `Caller` on the request for the API's `acting_user`.

Guards run before a route reads anything: a request without a key is a 401 whatever else is wrong with it.
Async on purpose: Litestar runs a sync guard in a thread pool, on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import Provide
from litestar.handlers import BaseRouteHandler

from ..errors import AuthenticationFailed, MemoryUnavailable, Unavailable
from ..services import Services
from ..store import keys
from .auth import KeyChecker, bearer_token

Connection = ASGIConnection[Any, Any, Any, Any]


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose key a request presented: the proxy's own (the user is then OpenWebUI's identity header), or a
    stored key, an admin's (`user_id` None: any user, named by `?user=`) or one user's."""

    proxy_key: bool
    user_id: str | None = None


def provide_services(state: State) -> Services:
    """The running app's services (`state`: the app's, set by its lifespan)."""
    services: Services = state.services
    return services


DEPENDENCIES = {"services": Provide(provide_services, sync_to_thread=False)}


def _presented_key(connection: Connection) -> str:
    token = bearer_token(connection.headers.get("authorization"))
    if not token:
        raise AuthenticationFailed("missing API key: send 'Authorization: Bearer <key>'")
    return token


def _proxy_key(connection: Connection, token: str) -> bool:
    checker: KeyChecker = connection.app.state.key_checker
    return checker.verify(token)


async def require_metrics_key(connection: Connection, _: BaseRouteHandler) -> None:
    """`/metrics`: METRICS_KEY or a proxy key (its counts are not for anyone who can reach the port)."""
    token = _presented_key(connection)
    metrics: KeyChecker | None = connection.app.state.metrics_key_checker
    if not (_proxy_key(connection, token) or (metrics is not None and metrics.verify(token))):
        raise AuthenticationFailed("invalid API key")


async def require_proxy_key(connection: Connection, _: BaseRouteHandler) -> None:
    if not _proxy_key(connection, _presented_key(connection)):
        raise AuthenticationFailed("invalid API key")


async def require_any_key(connection: Connection, _: BaseRouteHandler) -> None:
    """A proxy key or a stored one; the API needs the database either way, so it must be ready (503)."""
    token = _presented_key(connection)
    services = provide_services(connection.app.state)
    try:
        services.require_database()
    except MemoryUnavailable as exc:
        raise Unavailable(str(exc)) from exc
    if _proxy_key(connection, token):
        connection.state.caller = Caller(proxy_key=True)
        return
    async with services.pool.connection() as conn:
        owner = await keys.key_owner(conn, token)
    if owner is None:
        raise AuthenticationFailed("invalid API key")
    is_admin, owner_id = owner
    connection.state.caller = Caller(proxy_key=False, user_id=None if is_admin else owner_id)


def caller(connection: Connection) -> Caller:
    """The `Caller` that `require_any_key` admitted."""
    found: Caller = connection.state.caller
    return found
