"""What an operator sees of the memory tools' rounds (memory_proxy/tool_rounds.py, tool_stream.py): a count of the
turns by the rounds they ran, JSON and streamed, and one log line per call that holds no memory text.

Real PostgreSQL; the upstream is a respx route answering scripted tool calls (tests/test_memory_tools.py's and
tests/test_tool_stream.py's scripts).
"""

import json
from typing import Any

from structlog.testing import capture_logs

from tests import test_tool_stream
from tests.conftest import BUN, CHAT, RUNTIME_Q, USER_A, add_memory, chat_body, metric, user_headers
from tests.test_memory_tools import ASK, call, calling, script

SECRET_FACT = "User's password is Tr0ub4dor&3"  # remember refuses it (a secret)


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
    [ended] = [line for line in logs if line["event"] == "memory_tool_rounds"]
    assert (ended["rounds"], ended["calls"]) == (1, 2)


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
    test_tool_stream.script(outside, test_tool_stream.calls_stream(
        (0, "call_1", "search_memory", [arguments[:9], arguments[9:]])))
    streamed = await client.post(CHAT, json=chat_body(ASK, stream=True), headers=user_headers(USER_A))
    assert streamed.status_code == 200 and b"Bun." in streamed.content and b"search_memory" not in streamed.content
    assert (turns(0), turns(1)) == (before[0] + 1, before[1] + 2)
