"""A non-streamed chat turn with the memory tools (memory_proxy/memory_tools.py): offered beside the client's own
tools, run by the proxy, and never seen by the client.

Round by round: the request goes upstream with our tools added; a reply whose calls are all ours (any call
to a name that is not one of the client's tools) is not relayed: the calls are run, the assistant message and
their results are appended, and the upstream is asked again. After MAX_ROUNDS rounds the request goes without
our tools. Whatever ends the loop is relayed as the upstream sent it, byte for byte, unless it still holds a
call of ours: then those calls are taken out (and a message left without calls ends as `stop`).

A reply that calls both ours and the client's tools goes to the client with only the client's calls: ours
are not run (the client answers its own calls and sends the conversation back, and the model may search then).

An upstream that answers 400 to a request carrying our tools gets the turn again as the client sent it
(memories injected), and its model is offered no tools for a while (memory_proxy/toolless.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from .memory_tools import ToolTurn, call_name, definitions, offered, run_calls, tool_calls
from .observability import TOOL_CALLS, WRITTEN_CALLS, log
from .services import Services
from .upstream import read_body
from .written_calls import written_calls

MAX_ROUNDS = 3
CHAT_PATH = "/chat/completions"


def client_tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    return {str(t["function"].get("name")) for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
            } if isinstance(tools, list) else set()


def offers_tools(services: Services, body: dict[str, Any]) -> bool:
    """Whether this identified chat turn gets our tools: MEMORY_TOOLS on, its `tools` (if any) a list, and its
    model has not refused tools lately. Streamed turns run their rounds in memory_proxy/tool_stream.py."""
    return (services.settings.retrieval.tools != "off"
            and isinstance(body.get("tools", []), list) and str(body.get("model")) not in services.tool_less)


async def open_round(services: Services, headers: Mapping[str, str], body: dict[str, Any], content: bytes,
                     turn: ToolTurn, messages: list[Any], round_: int,
                     encode: Callable[[Any], bytes]) -> tuple[httpx.Response, AsyncIterator[bytes], bool]:
    """One round's upstream request: `body` with `messages`, and our tools while `round_` < MAX_ROUNDS. An
    upstream 400 to it gets the turn again as the client sent it (`content`, memories injected) and the model
    is remembered as tool-less; the flag says so (that reply is final)."""
    upstream = services.upstream
    theirs = client_tool_names(body)
    payload = {**body, "messages": messages}
    if round_ < MAX_ROUNDS:
        payload["tools"] = [*body.get("tools", []),
                            *(t for t in definitions(turn.mode) if t["function"]["name"] not in theirs)]
    response, reply = await upstream.open("POST", CHAT_PATH, headers, encode(payload))
    if response.status_code != 400:
        return response, reply, False
    await read_body(reply)
    if round_ == 0:
        services.tool_less.add(str(body.get("model")))
        TOOL_CALLS.labels("all", "rejected").inc()
    log.warning("memory_tools_rejected", user_id=turn.user_id, round=round_ + 1)
    response, reply = await upstream.open("POST", CHAT_PATH, headers, content)
    return response, reply, True


def assistant_turn(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message that made the calls, as the conversation goes on with it."""
    return {"role": "assistant", "content": message.get("content"), "tool_calls": message["tool_calls"]}


async def open_with_tools(services: Services, headers: Mapping[str, str], body: dict[str, Any], content: bytes,
                          turn: ToolTurn, encode: Callable[[Any], bytes]) -> tuple[httpx.Response, AsyncIterator[bytes]]:
    """The upstream's final reply to `body` (the request as it would be sent, `content` its bytes), our
    tools' calls run on the way (see the module docstring). `encode` is the pipeline's JSON encoder."""
    theirs = client_tool_names(body)
    messages = list(body["messages"])
    round_ = 0
    try:
        for round_ in range(MAX_ROUNDS + 1):
            offer = round_ < MAX_ROUNDS
            response, reply, rejected = await open_round(services, headers, body, content, turn, messages, round_,
                                                         encode)
            if rejected or response.status_code >= 300 or "json" not in response.headers.get("content-type", ""):
                return response, reply
            raw = await read_body(reply)
            parsed = _parsed(raw)
            message = _message(parsed)
            calls = tool_calls(message) or (written(message, turn) if offer else [])
            if calls and not tool_calls(message):  # written as text: carried on as the calls it spells
                message = {**message, "content": None, "tool_calls": calls}
            mine = [c for c in calls if call_name(c) not in theirs]
            if offer and calls and len(mine) == len(calls):
                results = await run_calls(turn, mine, messages)
                messages = [*messages, assistant_turn(message), *results]
                continue
            if mine:
                raw = encode(_without(parsed, theirs))
            return response, _once(raw)
    finally:
        turn.done(round_)
    raise AssertionError("unreachable: the last round offers no tools and returns")


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def written(message: Any, turn: ToolTurn) -> list[Any]:
    """Calls of our tools a model wrote as its whole text (memory_proxy/written_calls.py), counted; or []."""
    content = message.get("content") if isinstance(message, dict) else None
    calls = written_calls(content, offered(turn.mode)) if isinstance(content, str) else []
    WRITTEN_CALLS.inc(len(calls))
    return calls


def _message(parsed: Any) -> Any:
    try:
        return parsed["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None


def _without(parsed: dict[str, Any], theirs: set[str]) -> dict[str, Any]:
    """The reply with only the client's tool calls left in its first choice."""
    choice = parsed["choices"][0]
    message = dict(choice["message"])
    kept = [c for c in tool_calls(message) if call_name(c) in theirs]
    finish = choice.get("finish_reason")
    if kept:
        message["tool_calls"] = kept
    else:
        message.pop("tool_calls", None)
        finish = "stop" if finish == "tool_calls" else finish
    return {**parsed, "choices": [{**choice, "message": message, "finish_reason": finish}, *parsed["choices"][1:]]}


async def _once(raw: bytes) -> AsyncIterator[bytes]:
    yield raw
