"""memory_proxy/limits/: a chat request over a limit of its key, user or model gets 429 in OpenAI's shape with
Retry-After, others go on; what a request spends is counted when it ends (the upstream's usage, streamed or not);
no limit costs nothing; the shared state failing admits the request, counted."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import respx

from memory_proxy.limits import limiter as limiter_module
from memory_proxy.limits.limiter import UNCOUNTED, Limiter, key_id
from memory_proxy.settings import load_settings
from memory_proxy.store import limits
from memory_proxy.store.database import make_pool
from tests.support.data import CHAT, PROXY_KEY, USER_A, USER_B
from tests.support.fakes import ScriptedStream, chunk, sse, stream_reply
from tests.support.proxy import chat_body, metric, user_headers
from tests.support.servers import until
from tests.support.tools import ASK, FINAL_STREAM, call, calling, calls_stream, script, script_stream


async def test_a_user_past_a_limit_gets_429_with_retry_after_and_others_go_on(proxy: Any) -> None:
    client = await proxy(LIMITS_PER_USER="rpm=2")
    before = metric("memory_proxy_limited_total", kind="user", limit="rpm")
    codes = [(await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A))).status_code
             for _ in range(2)]
    refused = await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A))
    other = await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_B))
    assert codes == [200, 200] and refused.status_code == 429 and other.status_code == 200
    assert 1 <= int(refused.headers["retry-after"]) <= 70
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "requests per minute" in error["message"] and USER_A in error["message"]
    assert metric("memory_proxy_limited_total", kind="user", limit="rpm") == before + 1


async def test_a_key_is_limited_by_its_fingerprint_never_named(proxy: Any, db: Any) -> None:
    client = await proxy(LIMITS_PER_KEY="rpm=1")
    assert (await client.post("/v1/chat/completions", json=chat_body("hi"))).status_code == 200
    refused = await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_B))
    assert refused.status_code == 429 and PROXY_KEY not in refused.text and "this API key" in refused.text
    [use] = await limits.usage(db, "key")
    assert use.subject == key_id(PROXY_KEY) and use.requests_today == 1


async def test_tokens_are_the_upstreams_usage_and_a_minutes_tokens_are_a_limit(proxy: Any, db: Any) -> None:
    client = await proxy(LIMITS_PER_USER="tpm=20")  # the fake upstream's completion says 11 tokens
    assert [(await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A)))
            .status_code for _ in range(2)] == [200, 200]
    [use] = await limits.usage(db, "user", USER_A)
    assert use.tokens_today == 22
    refused = await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A))
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"


async def test_a_stream_is_counted_when_it_ends_and_gives_its_place_back(proxy: Any, db: Any,
                                                                         outside: respx.MockRouter) -> None:
    body = sse(chunk({"content": "Hello"}), chunk({}, "stop"),
               {"id": "c", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}})
    outside.routes["chat"].side_effect = lambda request: stream_reply(ScriptedStream(list(body)))
    client = await proxy(LIMITS_PER_USER="concurrent=1")
    for _ in range(2):  # one at a time: the first gave its place back when its stream ended
        async with client.stream("POST", "/v1/chat/completions", json=chat_body("hi", stream=True),
                                 headers=user_headers(USER_A)) as reply:
            assert reply.status_code == 200
            assert b"Hello" in b"".join([part async for part in reply.aiter_bytes()])
    [use] = await limits.usage(db, "user", USER_A)
    assert (use.requests_today, use.tokens_today, use.in_flight) == (2, 74, 0)


async def test_the_memory_tools_rounds_count_in_the_turns_tokens(proxy: Any, db: Any,
                                                                 outside: respx.MockRouter) -> None:
    """A round the client never sees (a search_memory call and its result) is upstream tokens the turn spent: counted
    with the reply's, JSON and streamed; and so is what the remote embedder says the search's query cost."""
    client = await proxy(LIMITS_PER_USER="tpm=500", MEMORY_TOOLS="search")  # near: counted as each request ends
    embeddings = outside.routes["embeddings"]
    script(outside, calling(call("search_memory", {"query": "home"})))  # each reply says 11 tokens
    assert (await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))).status_code == 200
    [use] = await limits.usage(db, "user", USER_A)
    assert embeddings.call_count >= 1 and use.tokens_today == 11 + 11 + 3 * embeddings.call_count  # 3 a query
    embedded = embeddings.call_count

    def used(total: int) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": total}}
    script_stream(outside, calls_stream((0, "call_1", "search_memory", ['{"query": "home"}']))[:-1] + sse(used(40)),
                  FINAL_STREAM[:-1] + sse(used(60)))
    streamed = await client.post(CHAT, json=chat_body(ASK, stream=True), headers=user_headers(USER_A))
    assert b"Bun." in streamed.content
    [use] = await limits.usage(db, "user", USER_A)
    assert use.tokens_today == 22 + 3 * embedded + 40 + 60 + 3 * (embeddings.call_count - embedded)


async def test_without_limits_nothing_is_asked_of_the_database(env: dict[str, str]) -> None:
    class NoPool:
        def connection(self) -> Any:
            raise AssertionError("no limit applies: the database is not asked")

    limiter = Limiter(load_settings(env).limits, NoPool())  # type: ignore[arg-type]
    limiter.changed()  # the operator's rows: none
    assert await limiter.admit(key="k", user=USER_A, model="m") is UNCOUNTED


async def test_a_database_that_cannot_be_reached_admits_uncounted_in_bounded_time(env: dict[str, str]) -> None:
    settings = load_settings({**env, "LIMITS_PER_USER": "rpm=1"}).limits
    async with make_pool("postgresql://nobody@127.0.0.1:1/none?connect_timeout=5", 1) as pool:
        limiter = Limiter(settings, pool)
        before = metric("memory_proxy_limits_fail_open_total", phase="admit")
        started = time.monotonic()
        results = [await limiter.admit(key=None, user=USER_A, model=None) for _ in range(3)]
        assert results == [UNCOUNTED] * 3 and time.monotonic() - started < 2
    assert metric("memory_proxy_limits_fail_open_total", phase="admit") == before + 3


async def test_a_limit_an_operator_set_beats_the_default(proxy: Any, db: Any) -> None:
    await limits.set_limit(db, limits.Limit("user", USER_A, rpm=1))
    client = await proxy(LIMITS_PER_USER="rpm=100")
    codes = [(await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A))).status_code
             for _ in range(2)]
    assert codes == [200, 429]
    assert (await client.post("/v1/chat/completions", json=chat_body("hi"),
                              headers=user_headers(USER_B))).status_code == 200



async def test_a_limit_set_through_another_replica_is_read_without_a_request(env: dict[str, str], db: Any,
                                                                             database_url: str, monkeypatch: Any) -> None:
    """The operator's rows are read again every REFRESH_S by `run`, so a burst after a quiet spell is held to them."""
    monkeypatch.setattr(limiter_module, "REFRESH_S", 0.05)
    async with make_pool(database_url, 2) as pool:
        limiter = Limiter(load_settings(env).limits, pool)
        assert await limiter.admit(key=None, user=USER_A, model=None) is UNCOUNTED  # rows read: none
        stop = asyncio.Event()
        running = asyncio.create_task(limiter.run(stop))
        await limits.set_limit(db, limits.Limit("user", USER_A, concurrent=1))  # as another replica's API would
        await until(lambda: bool(limiter.applying({"user": USER_A})))
        stop.set()
        await running
        first = await limiter.admit(key=None, user=USER_A, model=None)
        assert first is not UNCOUNTED and isinstance(await limiter.admit(key=None, user=USER_A, model=None),
                                                     limits.Refusal)


async def test_a_subject_just_refused_is_refused_again_without_asking_the_database(env: dict[str, str],
                                                                                   database_url: str) -> None:
    """A flood of one key costs PostgreSQL one refusal a second, not one per request (benchmarks.stall key_flood)."""
    async with make_pool(database_url, 2) as pool:
        class Counting:
            asked = 0

            def connection(self) -> Any:
                self.asked += 1
                return pool.connection()

        counting = Counting()
        limiter = Limiter(load_settings({**env, "LIMITS_PER_USER": "rpm=1"}).limits, counting)  # type: ignore[arg-type]
        assert await limiter.admit(key=None, user=USER_A, model=None) is not UNCOUNTED
        first = await limiter.admit(key=None, user=USER_A, model=None)
        asked = counting.asked
        again = [await limiter.admit(key=None, user=USER_A, model=None) for _ in range(20)]
        assert isinstance(first, limits.Refusal) and all(isinstance(r, limits.Refusal) for r in again)
        assert counting.asked == asked and all(1 <= r.retry_after <= first.retry_after for r in again)  # type: ignore[union-attr]
        assert await limiter.admit(key=None, user=USER_B, model=None) is not UNCOUNTED  # another user: asked
        assert counting.asked == asked + 1
