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

from memory_proxy.settings import load_settings
from tests.support.data import PROXY_KEY
from tests.support.proxy import make_env

TIMEOUT_S = 0.3
# The bound on an answer given at MODELS_TIMEOUT: well under the default MODELS_TIMEOUT (5 s), so that it fails when
# the setting is not applied, and far over 0.3 s, so that a busy machine does not fail it.
ANSWERED_BY_S = 3.0
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
    for response, took in responses:  # answered while the upstream still holds the request: at the timeout
        assert response.status_code == 200 and response.json() == OLD
        assert response.headers["x-memory-proxy-models"] == "cached" and took < ANSWERED_BY_S
    assert not server.released.is_set()
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
    message = response.json()["error"]["message"]
    assert response.status_code == 504 and f"within {TIMEOUT_S:g}s (MODELS_TIMEOUT)" in message, message
    assert took < ANSWERED_BY_S
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


NOT_LISTS = {
    "an HTML error page": (b"<html><body>502 Bad Gateway</body></html>", "text/html"),
    "an empty list": (b'{"object": "list", "data": []}', "application/json"),
    "models without an id": (b'{"object": "list", "data": [{"name": "qwen"}]}', "application/json"),
    "a bare array": (b'[{"id": "qwen"}]', "application/json"),
    "not JSON": (b'{"object": "list", "data": [', "application/json"),
}


@pytest.mark.parametrize(("body", "media_type"), NOT_LISTS.values(), ids=NOT_LISTS.keys())
async def test_a_200_that_is_not_a_model_list_is_relayed_but_never_served_later(
        client: Any, server: BusyServer, body: bytes, media_type: str) -> None:
    server.reply = httpx.Response(200, content=body, headers={"content-type": media_type})
    relayed = await client.get("/v1/models")
    assert relayed.status_code == 200 and relayed.content == body  # in time: the upstream's answer, as it is
    server.reply = httpx.Response(503, json={"error": {"message": "loading model", "type": "unavailable"}})
    failing = await client.get("/v1/models")
    assert failing.status_code == 503 and "x-memory-proxy-models" not in failing.headers


async def test_a_list_without_object_list_is_a_good_list(client: Any, server: BusyServer) -> None:
    """OpenWebUI reads `data[].id` only: a server that leaves out `"object": "list"` still lists its models."""
    server.reply = httpx.Response(200, json={"data": [{"id": "qwen-1.5b"}]})
    await client.get("/v1/models")
    server.reply = httpx.Response(503, json={"error": {"message": "loading model", "type": "unavailable"}})
    cached = await client.get("/v1/models")
    assert cached.status_code == 200 and cached.json() == {"data": [{"id": "qwen-1.5b"}]}


async def test_a_list_served_from_the_cache_carries_none_of_the_upstream_s_headers(
        client: Any, server: BusyServer) -> None:
    server.reply = httpx.Response(200, json=OLD, headers={
        "set-cookie": "session=upstream-1", "x-ratelimit-remaining-requests": "99", "x-request-id": "up-1",
        "openai-processing-ms": "12", "cache-control": "max-age=600"})
    live = await client.get("/v1/models")
    assert live.headers["x-ratelimit-remaining-requests"] == "99"  # the live reply is relayed with its headers
    server.reply = httpx.Response(503, json={"error": {"message": "loading model", "type": "unavailable"}})
    cached = await client.get("/v1/models")
    assert cached.status_code == 200 and cached.json() == OLD
    assert cached.headers["content-type"].startswith("application/json")
    assert cached.headers["x-memory-proxy-models"] == "cached" and int(cached.headers["age"]) >= 0
    assert int(cached.headers["content-length"]) == len(cached.content)
    upstream_names = {"set-cookie", "x-ratelimit-remaining-requests", "x-upstream-request-id",
                      "openai-processing-ms", "cache-control"}
    assert not upstream_names & set(cached.headers.keys())
    assert cached.headers["x-request-id"] != "up-1"  # our own request id, not the upstream's


async def test_a_list_older_than_models_cache_max_age_is_not_served(database_url: str, tmp_path: Path,
                                                                     app_factory: Any, server: BusyServer) -> None:
    settings = load_settings(make_env(database_url, tmp_path, MODELS_TIMEOUT=str(TIMEOUT_S),
                                      MODELS_CACHE_MAX_AGE="60"))
    now = [1000.0]
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as old_client:
        old_client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        old_client.app.state.services.models.clock = lambda: now[0]
        await old_client.get("/v1/models")
        server.reply = httpx.Response(503, json={"error": {"message": "loading model", "type": "unavailable"}})
        now[0] += 59
        assert (await old_client.get("/v1/models")).json() == OLD  # within the age: served
        now[0] += 2
        expired = await old_client.get("/v1/models")
        assert expired.status_code == 503 and expired.json()["error"]["message"] == "loading model"
        server.busy.set()  # a late upstream, as well as a failing one, gets the error past the age
        late = await old_client.get("/v1/models")
        assert late.status_code == 504
        server.released.set()
