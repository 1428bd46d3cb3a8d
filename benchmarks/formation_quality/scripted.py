"""Scripted OpenAI-compatible chat servers on loopback, and a way to serve any ASGI app in this loop.

`ScriptedChat` answers every `POST /v1/chat/completions` with the text it is told to say next, streamed
or not as asked, and keeps the requests it received: the benchmark's upstream (the scripted assistant
reply; the probe's request shows what the proxy injected) and its fake memory LLM (the scripted
extraction answer). Both are reached over real HTTP, as the proxy reaches any server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from ..fakes import free_port, read_body


class ScriptedChat:
    def __init__(self, name: str) -> None:
        self.name = name
        self.say = "OK."
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["path"].endswith("/models"):
            await _send(send, 200, {"object": "list", "data": [{"id": self.name, "object": "model"}]})
            return
        request = json.loads(body or b"{}")
        self.requests.append(request)
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if request.get("stream"):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": self.name,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": self.say},
                                  "finish_reason": None}]}
            done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (chunk, done))
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await send({"type": "http.response.body", "body": events + b"data: [DONE]\n\n"})
            return
        await _send(send, 200, {"id": "c1", "object": "chat.completion", "created": 1, "model": self.name,
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": self.say}}],
                                "usage": usage})


async def _send(send: Any, status: int, payload: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


@asynccontextmanager
async def serving(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Serve an ASGI app on loopback in this event loop (its lifespan run); yield its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="auto", loop="none"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the server stopped before it started")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
