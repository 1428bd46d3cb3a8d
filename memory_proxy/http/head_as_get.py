"""HEAD answered wherever GET is (RFC 9110 §9.3.2): the GET's status and headers, without its body.

Load balancers and uptime checks send HEAD to /healthz and /readyz; Litestar routes only the methods a
handler names, so without this every HEAD was a 405. A pure ASGI wrapper, outside the app: the route
runs as GET (its side effects are a GET's), and the body it sends is dropped here.
"""

from __future__ import annotations

from typing import Any


class HeadAsGet:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return  # a streamed GET: nothing of it is sent, only its end
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
