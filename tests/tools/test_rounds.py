"""A turn offered the memory tools: what the model is told, what is injected beside the tools
(MEMORY_TOOLS_INJECT), what a retry without tools sends, the `memory_retrieval` line with its rounds, a count
of the turns by the rounds they ran (JSON and streamed), and one log line per call that holds no memory text.

Real PostgreSQL; the upstream is a respx route scripted by tests/support/tools.py.
"""

import json
from typing import Any

import httpx
from structlog.testing import capture_logs

from tests.support.data import BERLIN, BUN, CHAT, RUNTIME_Q, USER_A
from tests.support.fakes import chunk, completion, sse
from tests.support.proxy import add_memory, chat_body, metric, user_headers
from tests.support.tools import (
    ASK,
    FINAL,
    FINAL_STREAM,
    SECRET_FACT,
    call,
    calling,
    calls_stream,
    script,
    script_stream,
    without_comments,
)

NOTE = "<memory_tools>"
def system_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"] if m["role"] == "system")


async def pin(db: Any, user_id: str, content: str) -> str:
    memory_id = await add_memory(db, user_id, content)
    await db.execute("UPDATE users_vectors SET pinned = true WHERE user_id = %s AND vector_id = %s",
                     [user_id, memory_id])
    return memory_id


async def test_the_model_is_told_it_can_search_only_when_the_tools_are_offered(proxy: Any, outside: Any) -> None:
    seen = script(outside)
    await (await proxy()).post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    assert NOTE not in system_text(seen[-1])
    await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    assert NOTE in system_text(seen[-1]) and "search_memory" in system_text(seen[-1])
    await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK, stream=True),
                                                   headers=user_headers(USER_A))
    assert NOTE in system_text(seen[-1])


async def test_a_retry_without_tools_does_not_mention_them(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BERLIN)
    seen = script(outside, httpx.Response(400, json={"error": {"message": "tools not supported"}}))
    client = await proxy(MEMORY_TOOLS="search")
    response = await client.post(CHAT, json=chat_body("Where do I live, Berlin?"), headers=user_headers(USER_A))
    assert response.status_code == 200
    offered, retried = seen
    assert NOTE in system_text(offered) and "tools" in offered
    assert NOTE not in system_text(retried) and "tools" not in retried
    assert BERLIN in system_text(retried)  # the memories are still injected


async def test_always_on_injects_only_pinned_and_identity_memories_beside_the_tools(proxy: Any, outside: Any,
                                                                                     db: Any) -> None:
    pinned = "User's name is Ada."
    await pin(db, USER_A, pinned)
    await add_memory(db, USER_A, BERLIN)
    question = "Where do I live, Berlin?"
    seen = script(outside)
    await (await proxy(MEMORY_TOOLS="search", MEMORY_TOOLS_INJECT="threshold")).post(
        CHAT, json=chat_body(question), headers=user_headers(USER_A))
    assert pinned in system_text(seen[-1]) and BERLIN in system_text(seen[-1])
    await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(question), headers=user_headers(USER_A))
    assert pinned in system_text(seen[-1]) and BERLIN not in system_text(seen[-1])  # always_on: the default
    await (await proxy(MEMORY_TOOLS_INJECT="always_on")).post(CHAT, json=chat_body(question),
                                                               headers=user_headers(USER_A))
    assert BERLIN in system_text(seen[-1])  # without tools the setting changes nothing


async def test_the_retrieval_line_carries_the_rounds_json_and_streamed(proxy: Any, outside: Any,
                                                                        json_logs: Any) -> None:
    client = await proxy(MEMORY_TOOLS="search")
    script(outside, calling(call("search_memory", {"query": "home"})), calling(call("search_memory", {"query": "x"})))
    await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    [line] = [e for e in json_logs() if e["event"] == "memory_retrieval"]
    assert (line["tools"], line["rounds"], line["tool_calls"]) == ("search", 2, 2)

    script_stream(outside, calls_stream((0, "call_1", "search_memory", ['{"query": ', '"home"}'])))
    response = await client.post(CHAT, json=chat_body(ASK, stream=True), headers=user_headers(USER_A))
    assert b"[DONE]" in response.content
    [line] = [e for e in json_logs() if e["event"] == "memory_retrieval"]
    assert (line["tools"], line["rounds"], line["tool_calls"]) == ("search", 1, 1)

    plain = await proxy()
    await plain.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    [line] = [e for e in json_logs() if e["event"] == "memory_retrieval"]
    assert "rounds" not in line and line["outcome"] in ("hit", "miss")


async def test_a_round_after_ours_that_answers_nothing_gets_the_answer_round(proxy: Any, outside: Any) -> None:
    """A small model may end its turn at once after a tool result: the user gets an answer, not an empty reply."""
    empty = completion()
    empty["choices"][0]["message"] = {"role": "assistant", "content": None}
    seen = script(outside, calling(call("search_memory", {"query": "home"})), empty)
    client = await proxy(MEMORY_TOOLS="search")
    response = await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    assert response.json()["choices"][0]["message"]["content"] == FINAL
    assert len(seen) == 3 and "tools" not in seen[2] and [m["role"] for m in seen[2]["messages"]] == ["system", "user"]

    nothing = sse(chunk({"role": "assistant", "content": None}), chunk({}, finish_reason="stop"))
    seen = script_stream(outside, calls_stream((0, "c1", "search_memory", ['{"query": "home"}'])), nothing)
    streamed = await client.post(CHAT, json=chat_body(ASK, stream=True), headers=user_headers(USER_A))
    assert without_comments(streamed.content) == b"".join(FINAL_STREAM)
    assert len(seen) == 3 and "tools" not in seen[2]


async def test_an_empty_first_reply_is_relayed_as_the_model_gave_it(proxy: Any, outside: Any) -> None:
    nothing = sse(chunk({"role": "assistant", "content": ""}), chunk({}, finish_reason="stop"))
    seen = script_stream(outside, nothing)
    response = await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(ASK, stream=True),
                                                               headers=user_headers(USER_A))
    assert without_comments(response.content) == b"".join(nothing) and len(seen) == 1


def turns(rounds: int) -> float:
    return metric("memory_proxy_tool_turns_total", rounds=str(rounds))


async def test_each_tool_call_logs_one_line_without_memory_text(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    script(outside, calling(call("search_memory", {"query": RUNTIME_Q}, "call_1"),
                            call("remember", {"fact": SECRET_FACT}, "call_2")))
    client = await proxy(MEMORY_TOOLS="all")
    with capture_logs() as logs:
        response = await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))
    assert response.status_code == 200

    lines = [line for line in logs if line["event"] == "memory_tool_call"]
    assert [(line["tool"], line["outcome"], line["log_level"]) for line in lines] == [
        ("search_memory", "ok", "info"), ("remember", "refused", "info")]
    for line in lines:
        assert line["user_id"] == USER_A and isinstance(line["ms"], float) and line["ms"] >= 0
        shown = json.dumps(line)
        assert not any(text in shown for text in (RUNTIME_Q, BUN, SECRET_FACT, "Tr0ub4dor", ASK)), shown


async def test_turns_are_counted_by_the_rounds_they_ran_json_and_streamed(proxy: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    client = await proxy(MEMORY_TOOLS="search")
    before = turns(0), turns(1)

    script(outside)  # the model calls nothing
    assert (await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))).status_code == 200
    assert (turns(0), turns(1)) == (before[0] + 1, before[1])

    script(outside, calling(call("search_memory", {"query": RUNTIME_Q})))
    assert (await client.post(CHAT, json=chat_body(ASK), headers=user_headers(USER_A))).status_code == 200
    assert (turns(0), turns(1)) == (before[0] + 1, before[1] + 1)

    arguments = json.dumps({"query": RUNTIME_Q})
    script_stream(outside, calls_stream((0, "call_1", "search_memory", [arguments[:9], arguments[9:]])))
    streamed = await client.post(CHAT, json=chat_body(ASK, stream=True), headers=user_headers(USER_A))
    assert streamed.status_code == 200 and b"Bun." in streamed.content and b"search_memory" not in streamed.content
    assert (turns(0), turns(1)) == (before[0] + 1, before[1] + 2)
