"""An upstream scripted to call the memory tools (MEMORY_TOOLS): its replies in order, as JSON (`script`) or as an
SSE stream cut at odd byte boundaries (`script_stream`), and what the proxy sent it back."""

from __future__ import annotations

import json
from typing import Any

import httpx

from memory_proxy.tools.streamed_rounds import KEEP_ALIVE
from tests.support.fakes import ScriptedStream, chunk, completion, sse, stream_reply

FINAL = "Final answer from the fake upstream."
FINAL_STREAM = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "You use "}),
                   chunk({"content": "Bun."}), chunk({}, finish_reason="stop"))
ASK = "What do you know about me?"
CLIENT_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
SECRET_FACT = "User's password is Tr0ub4dor&3"  # remember refuses it (a secret)


def call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """One tool call as a JSON reply holds it (`arguments` given as text is sent as it is)."""
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}


def calling(*calls: dict[str, Any]) -> dict[str, Any]:
    """A JSON reply that calls `calls`."""
    reply = completion()
    reply["choices"][0].update(message={"role": "assistant", "content": None, "tool_calls": list(calls)},
                               finish_reason="tool_calls")
    return reply


def script(outside: Any, *replies: dict[str, Any] | httpx.Response) -> list[dict[str, Any]]:
    """The upstream answers with `replies` in order (then the final text); returns the request bodies it got."""
    queue = list(replies)
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        reply = queue.pop(0) if queue else completion(FINAL)
        return reply if isinstance(reply, httpx.Response) else httpx.Response(200, json=reply)

    outside.routes["chat"].side_effect = answer
    return seen


def calls_stream(*calls: tuple[int, str, str, list[str]]) -> list[bytes]:
    """A streamed reply that calls tools: (index, id, name, pieces of its arguments), as OpenAI streams them."""
    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": None})]
    for index, call_id, name, pieces in calls:
        events.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
    return sse(*events, chunk({}, finish_reason="tool_calls"))


def split(parts: list[bytes], size: int = 7) -> list[bytes]:
    """The same bytes cut every `size` bytes, across event boundaries."""
    whole = b"".join(parts)
    return [whole[i:i + size] for i in range(0, len(whole), size)]


def script_stream(outside: Any, *replies: list[bytes] | httpx.Response) -> list[dict[str, Any]]:
    """The upstream streams `replies` in order (then FINAL_STREAM); returns the request bodies it got."""
    queue = list(replies)
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        reply = queue.pop(0) if queue else FINAL_STREAM
        return reply if isinstance(reply, httpx.Response) else stream_reply(ScriptedStream(split(reply)))

    outside.routes["chat"].side_effect = answer
    return seen


def without_comments(body: bytes) -> bytes:
    """A streamed reply without the proxy's keep-alive comments."""
    return body.replace(KEEP_ALIVE, b"")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]
