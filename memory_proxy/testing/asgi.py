"""What the fakes are served with: raw ASGI helpers, a free loopback port, a server in this event loop,
and subprocesses started, awaited and stopped."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def read_body(receive: Receive) -> bytes:
    """The whole body of an ASGI request."""
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def reply(send: Send, status: int, body: bytes) -> None:
    """One JSON response over ASGI."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def error_body(message: str) -> bytes:
    """An OpenAI-format error body."""
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": None}}).encode()


async def lifespan(receive: Receive, send: Send, on_startup: Callable[[], Awaitable[None]] | None = None) -> None:
    """Answer an ASGI lifespan scope until shutdown, running `on_startup()` before start-up completes."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if on_startup is not None:
                await on_startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serving(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Serve an ASGI app on loopback in this event loop (its lifespan run); yield its base URL."""
    import uvicorn

    port = port or free_port()
    # keep-alive longer than any wait between two requests of a client: with uvicorn's 5 s, a connection
    # closed while a slow model's job ran was reused by the client (httpx.ReadError)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="auto", loop="none", timeout_keep_alive=3600))
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


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen[Any] | None = None,
              expect: int = 200) -> None:
    """Poll ``url`` with GET until it returns ``expect``; raise if ``proc`` dies or time runs out."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            last = httpx.get(url, timeout=2.0).status_code
            if last == expect:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer {expect} within {timeout:.0f}s (last: {last!r})")


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Terminate one process we started (SIGTERM, then SIGKILL after ``timeout``)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
