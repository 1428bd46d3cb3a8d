"""A turn offered the memory tools: what the model is told, what is injected beside the tools
(MEMORY_TOOLS_INJECT), what a retry without tools sends, and the `memory_retrieval` line with its rounds.

Real PostgreSQL; the upstream is a respx route scripted as in tests/test_memory_tools.py.
"""

from typing import Any

import httpx

from tests.conftest import BERLIN, CHAT, USER_A, add_memory, chat_body, user_headers
from tests.test_logs import json_logs  # noqa: F401 - the fixture
from tests.test_memory_tools import ASK, call, calling, script
from tests.test_tool_stream import calls_stream
from tests.test_tool_stream import script as script_stream

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
    await (await proxy(MEMORY_TOOLS="search")).post(CHAT, json=chat_body(question), headers=user_headers(USER_A))
    assert pinned in system_text(seen[-1]) and BERLIN in system_text(seen[-1])  # threshold: the default
    await (await proxy(MEMORY_TOOLS="search", MEMORY_TOOLS_INJECT="always_on")).post(
        CHAT, json=chat_body(question), headers=user_headers(USER_A))
    assert pinned in system_text(seen[-1]) and BERLIN not in system_text(seen[-1])
    await (await proxy(MEMORY_TOOLS_INJECT="always_on")).post(CHAT, json=chat_body(question),
                                                               headers=user_headers(USER_A))
    assert BERLIN in system_text(seen[-1])  # without tools the setting changes nothing


async def test_the_retrieval_line_carries_the_rounds_json_and_streamed(proxy: Any, outside: Any,
                                                                        json_logs: Any) -> None:  # noqa: F811
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
