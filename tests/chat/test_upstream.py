"""Upstream faults against a real HTTP upstream on a loopback port: every fault gives the client an
OpenAI-format error or a clean end of stream, within a bounded time, and leaves nothing running.

`LoopbackUpstream` is a raw asyncio HTTP/1.1 server scripted by the request's first message content;
it records what the proxy did to its connections. It runs in the test's event loop, so the proxy is
served by the live uvicorn fixture in that loop too (litestar's AsyncTestClient would block the loop).
Mocked (respx) variants of refused/timeout and the upstream's own 4xx/5xx replies are in test_chat.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from memory_proxy.chat.upstream import Clients
from memory_proxy.settings import Settings, load_settings
from tests.support.data import CHAT, PROXY_KEY
from tests.support.proxy import make_env
from tests.support.servers import free_port, served

AUTH = {"authorization": f"Bearer {PROXY_KEY}"}
FIRST_BYTE_TIMEOUT = 0.5
READ_TIMEOUT = 1.0
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n',
          b'data: {"choices": [{"index": 0, "delta": {"content": "tial"}}]}\n\n']
FLOOD_EVENT = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"
FLOOD_EVENTS = 1024  # 64 MiB


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def json_reply(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body), body)


Script = Callable[["LoopbackUpstream", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class LoopbackUpstream:
    """Each script answers one request and returns whether the connection may serve another."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()  # the proxy closed a connection while a reply was under way
        self.sent = 0  # flood: body bytes the proxy accepted so far
        self.blocked_since: float | None = None  # flood: waiting for the proxy to read
        self.finished = asyncio.Event()  # flood: every byte was accepted
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def stop(self) -> None:
        assert self.server
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                raw = await reader.readexactly(int(length.group(1))) if length else b""
                name = json.loads(raw)["messages"][0]["content"] if raw else "models"
                if not await SCRIPTS[name](self, reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def wait_close(self, reader: asyncio.StreamReader, seconds: float | None = None) -> bool:
        """Wait (at most `seconds`) for the proxy to close the connection; set `closed` when it did."""
        try:
            eof = await asyncio.wait_for(reader.read(1), seconds) == b""
        except TimeoutError:
            return False
        if eof:
            self.closed.set()
        return eof


async def silent(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    await up.wait_close(reader)  # never answers
    return False


async def headers_only(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD)
    await up.wait_close(reader)  # a stream that never starts
    return False


async def drop(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + b"".join(chunked(e) for e in EVENTS))
    await writer.drain()
    return False  # closed without the final chunk: the reply is cut short


async def stall(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + b"".join(chunked(e) for e in EVENTS))
    await up.wait_close(reader)  # then silence
    return False


async def slow(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD)
    while True:  # one event every 20 ms, until the proxy hangs up
        writer.write(chunked(EVENTS[0]))
        if await up.wait_close(reader, 0.02):
            return False


async def flood(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD)
    for _ in range(FLOOD_EVENTS):  # as fast as the proxy takes it
        writer.write(chunked(FLOOD_EVENT))
        up.blocked_since = time.monotonic()
        await writer.drain()
        up.blocked_since = None
        up.sent += len(FLOOD_EVENT)
    writer.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    up.finished.set()
    return True


async def hello(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(json_reply({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}))
    return True


async def json_cut(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"id\"")
    await writer.drain()
    return False


async def models(up: LoopbackUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    await up.wait_close(reader)  # GET /models that never answers
    return False


SCRIPTS: dict[str, Script] = {f.__name__: f for f in (silent, headers_only, drop, stall, slow, flood, hello,
                                                        json_cut, models)}


@pytest.fixture
async def upstream() -> AsyncIterator[LoopbackUpstream]:
    server = LoopbackUpstream()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def env(database_url: str, tmp_path: Path, upstream: LoopbackUpstream) -> dict[str, str]:
    """The tests' settings (make_env), pointed at the loopback upstream, with short timeouts."""
    return make_env(database_url, tmp_path, UPSTREAM_BASE_URL=upstream.url,
                    UPSTREAM_FIRST_BYTE_TIMEOUT=str(FIRST_BYTE_TIMEOUT), UPSTREAM_READ_TIMEOUT=str(READ_TIMEOUT),
                    UPSTREAM_CONNECT_TIMEOUT="0.5")


def ask(script: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": script}]}


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]  # type: ignore[no-any-return]


def sse_error(data: bytes) -> dict[str, Any]:
    """The error of the stream's final SSE event `data: {"error": {...}}`."""
    *_, last = data.rstrip(b"\n").split(b"\n\n")
    assert last.startswith(b"data: "), data[-300:]
    error = json.loads(last[6:])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


# ---------------------------------------------------------------- before the reply starts: an HTTP error

async def test_connection_refused_is_502(env: dict[str, str], app_factory: Any) -> None:
    app = app_factory(load_settings({**env, "UPSTREAM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}))
    async with AsyncTestClient(app) as client, asyncio.timeout(5):
        for response in (await client.post(CHAT, json=ask("hello"), headers=AUTH),
                         await client.get("/v1/models", headers=AUTH)):
            assert response.status_code == 502
            assert error_of(response)["code"] == "upstream_unavailable"


def test_clients_are_filled_in_order_and_the_least_busy_takes_the_overflow() -> None:
    """A quiet proxy stays on the first client's warm connections; a busy one keeps each pool small."""
    pick = Clients([httpx.AsyncClient() for _ in range(3)], per_client=2)
    assert [pick.take() for _ in range(7)] == [0, 0, 1, 1, 2, 2, 0]
    pick.release(1)
    pick.release(1)
    assert pick.take() == 1 and pick.busy == [3, 1, 2]


@pytest.mark.parametrize("script", ["hello", "silent", "drop", "stall"])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_request_gives_its_client_back(settings: Settings, app_factory: Any, script: str,
                                                   stream: bool) -> None:
    """Answered, timed out before the first byte, dropped or stalled mid-reply: the client is free again."""
    app = app_factory(settings)
    async with served(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH, timeout=10) as client:
        response = await client.post(CHAT, json=ask(script, stream))
        assert response.status_code == (504 if script == "silent" else 200)  # the others fail mid-reply, if at all
        assert app.state.services.upstream.pick.busy == [0]


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose listen queue is full: the kernel drops further SYNs, so connecting times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for sock in (*fillers, listener):
        sock.close()


async def test_connect_timeout_is_504(env: dict[str, str], app_factory: Any, full_backlog: int) -> None:
    app = app_factory(load_settings({**env, "UPSTREAM_BASE_URL": f"http://127.0.0.1:{full_backlog}/v1",
                                     "UPSTREAM_CONNECT_TIMEOUT": "0.3"}))
    async with AsyncTestClient(app) as client:
        started = time.monotonic()
        response = await client.post(CHAT, json=ask("hello"), headers=AUTH)
    error = error_of(response)
    assert response.status_code == 504 and error["code"] == "upstream_timeout" and "ConnectTimeout" in error["message"]
    # It waited the connect timeout, and not the default 10 s: a bound far from 0.3 s, so that a busy machine
    # does not fail it.
    assert 0.3 <= time.monotonic() - started < 5


@pytest.mark.parametrize("script", ["silent", "headers_only"])
@pytest.mark.parametrize("stream", [False, True])
async def test_no_first_byte_in_time_is_504(live_client: httpx.AsyncClient, upstream: LoopbackUpstream, script: str,
                                            stream: bool) -> None:
    """No headers, or headers but no body: a 504 (never a 200 that then fails), and the upstream
    request is closed."""
    started = time.monotonic()
    response = await live_client.post(CHAT, json=ask(script, stream))
    assert response.status_code == 504
    error = error_of(response)
    assert error["code"] == "upstream_timeout"
    assert f"within {FIRST_BYTE_TIMEOUT:g}s (UPSTREAM_FIRST_BYTE_TIMEOUT)" in error["message"], error
    # Not before the timeout; after it, the configured one (the message) and not the default 300 s (the client
    # gives up after 20 s): no upper bound that a busy machine could fail.
    assert time.monotonic() - started >= FIRST_BYTE_TIMEOUT
    async with asyncio.timeout(5):
        await upstream.closed.wait()


async def test_models_without_answer_is_504(live_client: httpx.AsyncClient, upstream: LoopbackUpstream) -> None:
    response = await live_client.get("/v1/models")
    assert response.status_code == 504 and error_of(response)["code"] == "upstream_timeout"


async def test_json_reply_cut_short_is_502(live_client: httpx.AsyncClient, upstream: LoopbackUpstream) -> None:
    response = await live_client.post(CHAT, json=ask("json_cut"))
    assert response.status_code == 502 and error_of(response)["code"] == "upstream_unavailable"


# ---------------------------------------------------------------- mid-stream: the chunks, then an error event

async def test_stream_dropped_mid_way_ends_with_an_sse_error_event(live_client: httpx.AsyncClient,
                                                                   upstream: LoopbackUpstream) -> None:
    response = await live_client.post(CHAT, json=ask("drop", stream=True))
    assert response.status_code == 200  # the stream had started: the error comes in-band
    assert response.content.startswith(b"".join(EVENTS))
    assert response.content.endswith(b"\n\n") and b"[DONE]" not in response.content
    error = sse_error(response.content)
    assert error["code"] == "upstream_unavailable" and "dropped mid-reply" in error["message"]
    assert response.content == b"".join(EVENTS) + b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


async def test_stream_stalled_mid_way_ends_with_an_sse_error_event(live_client: httpx.AsyncClient,
                                                                   upstream: LoopbackUpstream) -> None:
    started = time.monotonic()
    response = await live_client.post(CHAT, json=ask("stall", stream=True))
    # Not before the read timeout; not the default 300 s either: the client gives up after 20 s.
    assert time.monotonic() - started >= READ_TIMEOUT
    assert response.content.startswith(b"".join(EVENTS))
    assert sse_error(response.content)["code"] == "upstream_timeout"
    async with asyncio.timeout(5):
        await upstream.closed.wait()


# ---------------------------------------------------------------- the client side

async def test_client_disconnect_closes_the_upstream_and_leaves_no_task(live_url: str,
                                                                        upstream: LoopbackUpstream) -> None:
    before = asyncio.all_tasks()
    async with httpx.AsyncClient(timeout=5) as client, client.stream(
            "POST", f"{live_url}{CHAT}", json=ask("slow", stream=True), headers=AUTH) as response:
        parts = response.aiter_raw()
        assert EVENTS[0] in await anext(parts)
        assert not upstream.closed.is_set()
    # The client hung up mid-stream. The `slow` upstream sends an event every 20 ms until the proxy hangs up: the
    # proxy closes it because the client left, or never (the bound below catches that hang, not a slow machine).
    async with asyncio.timeout(5):
        await upstream.closed.wait()
        while asyncio.all_tasks() - before:  # the request's tasks end; none is left behind
            await asyncio.sleep(0.01)


async def test_slow_client_backpressures_the_upstream_without_buffering(live_url: str,
                                                                        upstream: LoopbackUpstream) -> None:
    """A client that stops reading stalls its own stream only: the proxy stops reading the upstream
    (bounded buffers: sockets plus uvicorn's 64 KiB), other requests go on, and once the client reads
    again every byte arrives unchanged."""
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{live_url}{CHAT}", json=ask("flood", stream=True), headers=AUTH) as response:
        parts = response.aiter_raw()
        received = bytearray(await anext(parts))
        async with asyncio.timeout(20):  # until the upstream has been held back for a while
            while not upstream.finished.is_set() and not (
                    upstream.blocked_since and time.monotonic() - upstream.blocked_since > 0.5):
                await asyncio.sleep(0.01)
        assert not upstream.finished.is_set(), "the proxy read the whole reply the client did not"
        assert upstream.sent < FLOOD_EVENTS * len(FLOOD_EVENT) // 2

        other = await client.post(f"{live_url}{CHAT}", json=ask("hello"), headers=AUTH)
        assert other.status_code == 200 and other.json()["choices"][0]["message"]["content"] == "hello"

        async for part in parts:
            received += part
    assert upstream.finished.is_set()
    assert received == FLOOD_EVENT * FLOOD_EVENTS + b"data: [DONE]\n\n"
