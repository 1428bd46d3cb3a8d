"""A request id on every response and on every log line of the request.

A pure ASGI middleware wrapped around the whole app (so 404s, error replies and streams carry it too):
the id is the client's `X-Request-Id` when it is sane (1–128 characters of [A-Za-z0-9._-]), else a fresh
uuid4 hex. It is bound with structlog's contextvars for the whole request (the handler, the streamed body
and the formation job written at its end all run inside this call, in the request's task) and returned
in the `X-Request-Id` response header — one header: a relayed upstream's own id is renamed
`X-Upstream-Request-Id` (kept for a provider's support; two `X-Request-Id` headers confuse clients). Per request: one header scan, at most one uuid4, one contextvar
bind and reset — no allocation of note on the chat path.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from structlog.contextvars import bind_contextvars, reset_contextvars

HEADER = b"x-request-id"
UPSTREAM_HEADER = b"x-upstream-request-id"
_SANE = re.compile(rb"[A-Za-z0-9._-]{1,128}")

Scope = dict[str, Any]
ASGIApp = Any


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's id if sane, else a new one."""
    for name, value in headers:
        if name == HEADER:  # ASGI servers lower-case header names
            if _SANE.fullmatch(value):
                return value.decode("ascii")
            break
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope["headers"])
        header = (HEADER, request_id.encode("ascii"))

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*((UPSTREAM_HEADER, v) if n.lower() == HEADER else (n, v)
                                        for n, v in message.get("headers", ())), header]
            await send(message)

        tokens = bind_contextvars(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            reset_contextvars(**tokens)
