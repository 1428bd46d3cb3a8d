"""Calls of our tools that a model writes as text (memory_proxy/tools/text_calls.py): read as calls when the reply
leaves no doubt, JSON and streamed, and never when it is the model's text.

The written shapes are those Qwen2.5-Coder-1.5B produced on llama.cpp's server (its reply as content, no
`<tool_call>` tags; doubled braces copied from its chat template), plus the tagged and fenced forms.
"""

import json
from typing import Any

import pytest

from memory_proxy.tools.text_calls import may_be_written_call, written_calls
from tests.support.data import BUN, CHAT, RUNTIME_Q, USER_A
from tests.support.fakes import chunk, completion, sse
from tests.support.proxy import add_memory, chat_body, metric, user_headers
from tests.support.tools import (
    ASK,
    CLIENT_TOOL,
    FINAL,
    FINAL_STREAM,
    script,
    script_stream,
    tool_results,
    without_comments,
)

OURS = ("search_memory", "remember")
CALL = json.dumps({"name": "search_memory", "arguments": {"query": RUNTIME_Q}})


@pytest.mark.parametrize("text", [
    CALL, "{" + CALL + "}", f"<tool_call>\n{CALL}\n</tool_call>", f"```json\n{CALL}\n```",
    f"  {CALL}\n\nI'm ready to talk!",
    CALL.replace("{", "{{").replace("}", "}}"),  # every brace doubled, as the chat template shows them
])
def test_a_reply_that_starts_with_our_call_is_that_call(text: str) -> None:
    [call] = written_calls(text, OURS)
    assert call["function"]["name"] == "search_memory"
    assert json.loads(call["function"]["arguments"]) == {"query": RUNTIME_Q}
    assert call["id"].startswith("call_")


def test_two_written_calls_are_both_read() -> None:
    remember = json.dumps({"name": "remember", "arguments": {"fact": "User uses Bun."}})
    text = f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{remember}\n</tool_call>"
    assert [c["function"]["name"] for c in written_calls(text, OURS)] == ["search_memory", "remember"]


@pytest.mark.parametrize("text", [
    "You use Bun.", '{"foo": 1}', json.dumps({"name": "get_time", "arguments": {}}),
    f"Here is how to call it: {CALL}", '{"name": "search_memory", "arguments": ', "",
])
def test_text_is_never_read_as_a_call(text: str) -> None:
    assert written_calls(text, OURS) == []
    assert written_calls(CALL, ()) == []  # nothing offered: nothing read


def test_only_a_beginning_that_may_still_be_a_call_is_held() -> None:
    for held in ("", " ", "{", '{"na', '{{"name"', "<tool", "``", "```json", '{ "name": "sea', '{"name": "search_memory"'):
        assert may_be_written_call(held, OURS), held
    for text in ("Y", "You", '{"foo', "```python\nprint(1)", "<b>", '{"name": "Alice"'):
        assert not may_be_written_call(text, OURS), text  # a JSON answer naming Alice streams on


async def test_a_written_search_is_run_and_never_reaches_the_client(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    seen = script(outside, completion("{" + CALL + "}"))
    before = metric("memory_proxy_tool_calls_written_total")
    response = await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK),
                                                               headers=user_headers(USER_A))
    assert response.json()["choices"][0]["message"]["content"] == FINAL
    assert len(seen) == 2 and any(BUN in result for result in tool_results(seen[1]))
    assert seen[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "search_memory"
    assert metric("memory_proxy_tool_calls_written_total") == before + 1


async def test_a_written_call_of_a_client_tool_or_without_our_tools_is_relayed(proxy: Any, outside: Any) -> None:
    client_call = json.dumps({"name": "get_time", "arguments": {}})
    seen = script(outside, completion(client_call), completion(CALL))
    on = await proxy(MEMORY_TOOLS="search")
    first = await on.post(CHAT, json=chat_body(ASK, tools=[CLIENT_TOOL]), headers=user_headers(USER_A))
    assert first.json()["choices"][0]["message"]["content"] == client_call
    off = await proxy()
    second = await off.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    assert second.json()["choices"][0]["message"]["content"] == CALL and len(seen) == 2


async def test_a_streamed_written_search_is_run_and_never_streamed(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    pieces = ["{{", '"name', '": "search_memory", "arguments": ', json.dumps({"query": RUNTIME_Q}), "}}"]
    written = sse(chunk({"role": "assistant", "content": None}), *(chunk({"content": p}) for p in pieces),
                  chunk({}, finish_reason="stop"))
    seen = script_stream(outside, written)
    response = await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK, stream=True),
                                                               headers=user_headers(USER_A))
    assert without_comments(response.content) == b"".join(FINAL_STREAM)
    assert len(seen) == 2 and any(BUN in result for result in tool_results(seen[1]))


async def test_streamed_text_that_only_began_like_a_call_is_relayed_whole(proxy: Any, outside: Any) -> None:
    text = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "{"}), chunk({"content": '"foo": 1}'}),
               chunk({}, finish_reason="stop"))
    seen = script_stream(outside, text)
    response = await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK, stream=True),
                                                               headers=user_headers(USER_A))
    assert without_comments(response.content) == b"".join(text) and len(seen) == 1
