"""A request id on every response and on every log line of the request.

A pure ASGI middleware wrapped around the whole app (so 404s, error replies and streams carry it too).
Our `request_id` is always a fresh uuid4 hex, never one a client chose: a client could otherwise send
another user's id and the lines of two users' requests would share it. The client's own id — the
`X-Client-Request-Id` header (OpenAI's name for it), else `X-Request-Id` (what gateways and SDKs send) —
is kept for correlation when it is sane (1–128 characters of [A-Za-z0-9._-]): logged as
`client_request_id` beside ours, so a client's trace id still finds its lines; an insane one is ignored.
Both are bound with structlog's contextvars for the whole request (the handler, the streamed body and
the formation job written at its end all run inside this call, in the request's task).

The response carries ours in `X-Request-Id` — one header: a relayed upstream's own id is renamed
`X-Upstream-Request-Id` (kept for a provider's support; two `X-Request-Id` headers confuse clients). The
client's id is not echoed: the client has it, and the id to quote to an operator is ours, which names one
request. Per request: one header scan, one uuid4, one contextvar bind and reset.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from structlog.contextvars import bind_contextvars, reset_contextvars

HEADER = b"x-request-id"
CLIENT_HEADER = b"x-client-request-id"
UPSTREAM_HEADER = b"x-upstream-request-id"
_SANE = re.compile(rb"[A-Za-z0-9._-]{1,128}")

Scope = dict[str, Any]
ASGIApp = Any


def client_request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The client's own id (X-Client-Request-Id, else X-Request-Id) if sane, else None."""
    found = {name: value for name, value in headers if name in (CLIENT_HEADER, HEADER)}  # ASGI names: lower case
    value = found.get(CLIENT_HEADER, found.get(HEADER))
    return value.decode("ascii") if value is not None and _SANE.fullmatch(value) else None


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        header = (HEADER, request_id.encode("ascii"))

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*((UPSTREAM_HEADER, v) if n.lower() == HEADER else (n, v)
                                        for n, v in message.get("headers", ())), header]
            await send(message)

        client_id = client_request_id(scope["headers"])
        tokens = bind_contextvars(request_id=request_id, **({"client_request_id": client_id} if client_id else {}))
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            reset_contextvars(**tokens)
