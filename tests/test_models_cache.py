"""`GET /v1/models` against an upstream that blocks while it generates, as llama.cpp's server does (issue 26)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from proxy.settings import load_settings
from tests.conftest import PROXY_KEY, make_env

TIMEOUT_S = 0.3
OLD = {"object": "list", "data": [{"id": "qwen-1.5b", "object": "model"}]}
NEW = {"object": "list", "data": [{"id": "qwen-7b", "object": "model"}]}


class BusyServer:
    """The upstream's /models: answers at once, or blocks until released (a generation in progress)."""

    def __init__(self) -> None:
        self.reply = httpx.Response(200, json=OLD)
        self.busy = asyncio.Event()
        self.released = asyncio.Event()
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.busy.is_set():
            await self.released.wait()
        return self.reply


@pytest.fixture
def server(outside: Any) -> BusyServer:
    busy = BusyServer()
    outside.routes["models"].mock(side_effect=busy)
    return busy


@pytest.fixture
async def client(database_url: str, tmp_path: Path, app_factory: Any) -> AsyncIterator[Any]:
    settings = load_settings(make_env(database_url, tmp_path, MODELS_TIMEOUT=str(TIMEOUT_S)))
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as test_client:
        test_client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        yield test_client


async def timed_get(client: Any) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await client.get("/v1/models")
    return response, time.perf_counter() - started


async def test_an_upstream_that_answers_in_time_is_relayed_as_it_answers(client: Any, server: BusyServer) -> None:
    response = await client.get("/v1/models")
    assert response.status_code == 200 and response.json() == OLD and "x-memory-proxy-models" not in response.headers
    server.reply = httpx.Response(200, json=NEW)
    assert (await client.get("/v1/models")).json() == NEW  # no stale copy while the upstream answers


async def test_a_busy_upstream_gets_the_last_list_within_the_timeout_and_refreshes_it_later(
        client: Any, server: BusyServer) -> None:
    await client.get("/v1/models")
    server.busy.set()
    server.reply = httpx.Response(200, json=NEW)
    responses = await asyncio.gather(*(timed_get(client) for _ in range(3)))
    for response, took in responses:
        assert response.status_code == 200 and response.json() == OLD
        assert response.headers["x-memory-proxy-models"] == "cached" and took < TIMEOUT_S + 0.5
    assert server.calls == 2  # the three waited on one request to the upstream
    server.busy.clear()
    server.released.set()  # the generation ends: the request still in flight refreshes the list
    async with asyncio.timeout(5):
        while (await client.get("/v1/models")).json() != NEW:
            await asyncio.sleep(0.01)


async def test_with_no_good_list_yet_a_busy_upstream_is_a_504_within_the_timeout(
        client: Any, server: BusyServer) -> None:
    server.busy.set()
    response, took = await timed_get(client)
    assert response.status_code == 504 and "MODELS_TIMEOUT" in response.json()["error"]["message"]
    assert took < TIMEOUT_S + 0.5
    server.released.set()


async def test_an_upstream_failing_with_5xx_gets_the_last_list_but_a_4xx_is_relayed(
        client: Any, server: BusyServer) -> None:
    await client.get("/v1/models")
    server.reply = httpx.Response(503, json={"error": {"message": "loading model", "type": "unavailable"}})
    cached = await client.get("/v1/models")
    assert cached.status_code == 200 and cached.json() == OLD and cached.headers["x-memory-proxy-models"] == "cached"
    server.reply = httpx.Response(401, json={"error": {"message": "bad key", "type": "invalid_request_error"}})
    refused = await client.get("/v1/models")
    assert refused.status_code == 401 and refused.json()["error"]["message"] == "bad key"


async def test_an_unreachable_upstream_gets_the_last_list(client: Any, server: BusyServer, outside: Any) -> None:
    await client.get("/v1/models")
    outside.routes["models"].mock(side_effect=httpx.ConnectError("refused"))
    response = await client.get("/v1/models")
    assert response.status_code == 200 and response.json() == OLD
