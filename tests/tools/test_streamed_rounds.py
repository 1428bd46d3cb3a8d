"""The memory tools on streamed turns (memory_proxy/tools/streamed_rounds.py): our calls read out of the upstream's SSE and
run by the proxy, keep-alive comments meanwhile, and never a chunk of our calls at the client.

Real PostgreSQL; the upstream is a respx route answering scripted SSE bodies, split at odd byte boundaries.
"""

import asyncio
import json
from typing import Any

import httpx

from memory_proxy.settings import load_settings
from memory_proxy.tools import streamed_rounds
from memory_proxy.tools.streamed_rounds import KEEP_ALIVE, RUNAWAY_NOTE
from tests.support.data import BUN, CHAT, PROXY_KEY, RUNTIME_Q, USER_A
from tests.support.fakes import ScriptedStream, chunk, sse, stream_reply
from tests.support.proxy import add_memory, chat_body, collect, sdk, user_headers
from tests.support.servers import served
from tests.support.tools import (
    ASK,
    CLIENT_TOOL,
    FINAL_STREAM,
    calls_stream,
    script_stream,
    tool_names,
    tool_results,
    without_comments,
)

SEARCH_ARGUMENTS = json.dumps({"query": RUNTIME_Q})


async def post(proxy: Any, **body: Any) -> httpx.Response:
    client = await proxy(MEMORY_TOOLS="search")
    response: httpx.Response = await client.post(CHAT, json=chat_body(ASK, stream=True, **body),
                                                 headers=user_headers(USER_A))
    return response


async def test_a_search_round_streams_only_the_final_answer(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    third = len(SEARCH_ARGUMENTS) // 3
    pieces = [SEARCH_ARGUMENTS[:third], SEARCH_ARGUMENTS[third:2 * third], SEARCH_ARGUMENTS[2 * third:]]
    seen = script_stream(outside, calls_stream((0, "call_1", "search_memory", pieces)))
    response = await post(proxy)

    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert KEEP_ALIVE in response.content
    assert without_comments(response.content) == b"".join(FINAL_STREAM)
    assert b"search_memory" not in response.content and b"tool_calls" not in response.content
    assert len(seen) == 2 and tool_names(seen[0]) == ["search_memory"] and seen[1]["stream"] is True
    assert seen[1]["messages"][-2]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "search_memory", "arguments": SEARCH_ARGUMENTS}}]
    assert json.loads(tool_results(seen[1])[0]) == [BUN]


async def test_the_openai_sdk_reads_a_streamed_search_round(env: dict[str, str], app_factory: Any, outside: Any,
                                                            db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    script_stream(outside, calls_stream((0, "call_1", "search_memory", [SEARCH_ARGUMENTS[:5], SEARCH_ARGUMENTS[5:]])))
    async with served(app_factory(load_settings({**env, "MEMORY_TOOLS": "search"}))) as url:
        stream = await sdk(f"{url}/v1", PROXY_KEY).chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": ASK}], stream=True)
        read = await collect(stream)
    assert read == {"text": "You use Bun.", "calls": {}, "finish": "stop", "usage": None}


async def test_a_content_first_stream_is_relayed_byte_for_byte(proxy: Any, outside: Any) -> None:
    text_stream = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hello"}),
                      ": a comment of the upstream's", chunk({"content": " there"}), chunk({}, finish_reason="stop"))
    seen = script_stream(outside, text_stream)
    response = await post(proxy)
    assert tool_names(seen[0]) == ["search_memory"] and len(seen) == 1
    assert response.content == b"".join(text_stream)


async def test_a_stray_call_of_ours_after_the_text_is_dropped(proxy: Any, outside: Any) -> None:
    text_then_call = sse(chunk({"content": "Let me look."}),
                         *[chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                  "function": {"name": "search_memory", "arguments": ""}}]}),
                           chunk({"tool_calls": [{"index": 0, "function": {"arguments": SEARCH_ARGUMENTS}}]})],
                         chunk({}, finish_reason="tool_calls"))
    seen = script_stream(outside, text_then_call)
    response = await post(proxy)
    assert len(seen) == 1 and b"search_memory" not in response.content
    events = [json.loads(line[6:]) for line in response.content.split(b"\n\n") if line.startswith(b"data: {")]
    assert [e["choices"][0]["delta"].get("content") for e in events] == ["Let me look.", None]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_call_past_the_held_bound_is_not_run_and_the_model_answers_without_it(proxy: Any, outside: Any) -> None:
    """A runaway call (over MAX_HELD_BYTES while it is still being read) is dropped unread: the client gets the
    answer round's words, told of it, with no tool offered, never an empty reply."""
    huge = calls_stream((0, "c1", "search_memory", ["{\"query\": \"" + "x" * 1000 + " "] * 300 + ["\"}"]))
    seen = script_stream(outside, huge)
    response = await post(proxy)
    assert len(seen) == 2 and "tools" not in seen[1]  # not run: the second request is the answer round
    assert RUNAWAY_NOTE in json.dumps(seen[1]["messages"])
    assert response.status_code == 200 and b"search_memory" not in response.content
    assert b"xxxx" not in response.content  # none of our call's pieces reached the client
    assert without_comments(response.content) == b"".join(FINAL_STREAM)


async def test_a_client_tool_call_streams_through(proxy: Any, outside: Any) -> None:
    theirs = calls_stream((0, "call_9", "get_time", ['{"zo', 'ne": "UTC"}']))
    seen = script_stream(outside, theirs)
    response = await post(proxy, tools=[CLIENT_TOOL])
    assert len(seen) == 1 and tool_names(seen[0]) == ["get_time", "search_memory"]
    assert without_comments(response.content) == b"".join(theirs)


async def test_a_stream_calling_ours_and_the_clients_gets_the_clients_only(proxy: Any, outside: Any) -> None:
    both = calls_stream((0, "c1", "get_time", ["{}"]), (1, "c2", "search_memory", ['{"query"', ': "x"}']))
    seen = script_stream(outside, both)
    response = await post(proxy, tools=[CLIENT_TOOL])
    assert len(seen) == 1  # ours were not run
    body = without_comments(response.content)
    assert b"get_time" in body and b"search_memory" not in body and b'"query' not in body
    assert body.endswith(b"data: [DONE]\n\n")


async def test_an_upstream_rejecting_tools_on_a_stream_costs_one_retry(proxy: Any, outside: Any) -> None:
    rejected = httpx.Response(400, json={"error": {"message": "fake-model does not support tools"}})
    seen = script_stream(outside, rejected)
    response = await post(proxy)
    assert response.status_code == 200 and response.content == b"".join(FINAL_STREAM)
    assert len(seen) == 2 and "tools" in seen[0] and "tools" not in seen[1]


async def test_rounds_are_capped_on_a_stream(proxy: Any, outside: Any) -> None:
    seen = script_stream(outside, *(calls_stream((0, "c1", "search_memory", [f'{{"query": "{q}"}}'])) for q in "abcd"))
    response = await post(proxy)
    assert len(seen) == 4 and "tools" not in seen[3]
    assert b"search_memory" not in response.content and b'"finish_reason": "stop"' in response.content


async def test_a_repeated_call_on_a_stream_ends_the_rounds(proxy: Any, outside: Any) -> None:
    again = calls_stream((0, "c1", "search_memory", ['{"query": "x"}']))
    seen = script_stream(outside, again, again)
    response = await post(proxy)
    assert len(seen) == 3 and "tools" not in seen[2] and [m["role"] for m in seen[2]["messages"]] == ["system", "user"]
    assert without_comments(response.content) == b"".join(FINAL_STREAM)


async def test_a_client_leaving_after_a_tool_round_closes_the_upstream(env: dict[str, str], app_factory: Any,
                                                                       outside: Any) -> None:
    final = ScriptedStream(sse(chunk({"content": "first"}), chunk({"content": "never sent"})), hold_at=1)
    replies = [stream_reply(ScriptedStream(calls_stream((0, "c1", "search_memory", ['{"query": "x"}'])))),
               stream_reply(final)]
    outside.routes["chat"].side_effect = lambda _: replies.pop(0)
    async with served(app_factory(load_settings({**env, "MEMORY_TOOLS": "search"}))) as url:
        async with httpx.AsyncClient(timeout=10) as client, client.stream(
                "POST", f"{url}{CHAT}", json=chat_body(ASK, stream=True),
                headers={"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)}) as response:
            received = b""
            async for part in response.aiter_raw():
                received += part
                if b"first" in received:
                    break
        async with asyncio.timeout(5):  # the client hung up mid-reply: the proxy closes the round's upstream
            await final.closed.wait()
    assert not final.release.is_set() and b"search_memory" not in received


async def test_keep_alives_flow_while_the_upstream_is_silent(env: dict[str, str], app_factory: Any, outside: Any,
                                                              monkeypatch: Any) -> None:
    """A slow model (a small one reading a long prompt takes minutes) must not leave the client's connection
    silent while a round is held or the next one is opened: a comment every KEEP_ALIVE_EVERY seconds."""
    monkeypatch.setattr(streamed_rounds, "KEEP_ALIVE_EVERY", 0.05)
    # the first round starts (the proxy's reply starts with its first bytes), then goes silent
    first = ScriptedStream(calls_stream((0, "c1", "search_memory", ['{"query": "x"}'])), hold_at=1)
    opened = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        if not first.release.is_set():
            return stream_reply(first)
        await opened.wait()  # the second round's answer is late to start
        return stream_reply(ScriptedStream(FINAL_STREAM))

    outside.routes["chat"].side_effect = answer
    async with served(app_factory(load_settings({**env, "MEMORY_TOOLS": "search"}))) as url, \
            httpx.AsyncClient(timeout=10) as client, client.stream(
                "POST", f"{url}{CHAT}", json=chat_body(ASK, stream=True),
                headers={"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)}) as response:
        received = b""
        async for part in response.aiter_raw():
            received += part
            if received.count(KEEP_ALIVE) >= 3 and not first.release.is_set():
                first.release.set()  # held round: 3 comments heard while the upstream said nothing
            elif received.count(KEEP_ALIVE) >= 8 and not opened.is_set():
                opened.set()  # next round: more comments while its upstream had not answered
    assert without_comments(received) == b"".join(FINAL_STREAM)
    assert received.count(KEEP_ALIVE) >= 8
