"""Relay through a real uvicorn server: the official openai SDK as client, SSE timing and disconnects."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.data import PROXY_KEY, UPSTREAM, USER_A
from tests.support.fakes import ScriptedStream, chunk, completion, sse, stream_reply
from tests.support.proxy import add_memory, collect, sdk, sent_body

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather for a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
TOOL_STREAM = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me check"}),
    chunk({"content": " the weather."}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "get_weather", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Berl'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'in"}'}}]}),
    chunk({}, finish_reason="tool_calls"),
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", "choices": [],
     "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}},
)


async def test_sdk_stream_with_tools_is_the_same_through_the_proxy(live_url: str, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, "User lives in Berlin.")
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(ScriptedStream(TOOL_STREAM)))
    request = {"model": "fake-model", "messages": [{"role": "user", "content": "Weather where I live?"}],
               "tools": TOOLS, "stream": True, "stream_options": {"include_usage": True}}

    direct = await collect(await sdk(UPSTREAM, "upstream").chat.completions.create(**request))
    proxied = await collect(await sdk(f"{live_url}/v1", PROXY_KEY).chat.completions.create(**request))

    assert proxied == direct
    assert direct["calls"][0] == {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Berlin"}'}
    assert direct["finish"] == "tool_calls" and direct["usage"]["total_tokens"] == 21
    assert sent_body(outside)["tools"] == TOOLS and sent_body(outside)["stream_options"] == {"include_usage": True}


async def test_stream_bytes_are_relayed_unchanged(live_url: str, outside: Any) -> None:
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(ScriptedStream(TOOL_STREAM)))
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{live_url}/v1/chat/completions", headers={
            "authorization": f"Bearer {PROXY_KEY}"}, json={"model": "m", "stream": True,
                                                          "messages": [{"role": "user", "content": "hi"}]})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b"".join(TOOL_STREAM)


async def test_sdk_non_streaming_with_tools_is_the_same_through_the_proxy(live_url: str, outside: Any) -> None:
    reply = completion(None)
    reply["choices"][0]["message"]["tool_calls"] = [{"id": "call_9", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    reply["choices"][0]["finish_reason"] = "tool_calls"
    outside.routes["chat"].respond(200, json=reply)
    request = {"model": "fake-model", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}

    direct = await sdk(UPSTREAM, "upstream").chat.completions.create(**request)
    proxied = await sdk(f"{live_url}/v1", PROXY_KEY).chat.completions.create(**request)

    assert proxied.choices[0].message.tool_calls == direct.choices[0].message.tool_calls
    assert proxied.choices[0].finish_reason == direct.choices[0].finish_reason == "tool_calls"
    assert proxied.usage == direct.usage
    assert proxied.model_extra["memories"] == []  # the proxy's addition: ids of injected memories


@contextlib.asynccontextmanager
async def open_stream(live_url: str) -> AsyncIterator[httpx.Response]:
    async with httpx.AsyncClient(timeout=10) as client, client.stream(
            "POST", f"{live_url}/v1/chat/completions", headers={"authorization": f"Bearer {PROXY_KEY}"},
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as response:
        yield response


async def test_first_chunk_reaches_the_client_before_the_upstream_finishes(live_url: str, outside: Any) -> None:
    upstream = ScriptedStream(sse(chunk({"content": "first"}), chunk({"content": "second"})), hold_at=1)
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(upstream))
    async with open_stream(live_url) as response:
        parts = response.aiter_raw()
        async with asyncio.timeout(5):
            first = await anext(parts)
        assert b"first" in first and not upstream.release.is_set()  # upstream still holding the rest
        upstream.release.set()
        rest = b"".join([part async for part in parts])
    assert b"second" in rest and rest.endswith(b"data: [DONE]\n\n")


async def test_client_disconnect_cancels_the_upstream_request(live_url: str, outside: Any) -> None:
    upstream = ScriptedStream(sse(chunk({"content": "first"}), chunk({"content": "never sent"})), hold_at=1)
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(upstream))
    async with open_stream(live_url) as response:
        assert b"first" in await anext(response.aiter_raw())
    # the client hung up while the upstream was still mid-reply: the proxy must close the upstream
    async with asyncio.timeout(5):
        await upstream.closed.wait()
    assert not upstream.release.is_set()


async def test_upstream_dropping_mid_stream_ends_with_an_error_event(live_url: str, outside: Any) -> None:
    upstream = ScriptedStream([b'data: {"choices": [{"delta": {"content": "par"}}]}\n\n'],
                              fail=httpx.ReadError("connection reset"))
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(upstream))
    stream = await sdk(f"{live_url}/v1", PROXY_KEY, user=None).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError, match="dropped mid-reply"):
        await collect(stream)
    assert upstream.closed.is_set()
