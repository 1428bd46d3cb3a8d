"""A non-streamed chat turn with the memory tools (memory_proxy/tools/calls.py): offered beside the client's own
tools, run by the proxy, and never seen by the client.

Round by round: the request goes upstream with our tools added; a reply whose calls are all ours (any call
to a name that is not one of the client's tools) is not relayed: the calls are run, the assistant message and
their results are appended, and the upstream is asked again. After MAX_ROUNDS rounds, or once the model repeats
calls it already made this turn (a loop small models fall into), the last request goes without our tools and
without the rounds' messages: the turn as it goes without tools, with what the tools returned in its system
prompt (`answer_messages`; a model shown its calls but no tools tends to write another call). So is a round
after ours that answers nothing at all (no text, no call: a small model may end its turn at once after a
result). Whatever ends the loop is relayed as the upstream sent it, byte for byte, unless it still holds a
call of ours: then those calls are taken out (and a message left without calls ends as `stop`).

A reply that calls both ours and the client's tools goes to the client with only the client's calls: ours
are not run (the client answers its own calls and sends the conversation back, and the model may search then).

An upstream that answers 400 to a request carrying our tools gets the turn again as the client sent it
(memories injected), and its model is offered no tools for a while (memory_proxy/tools/refusals.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from ..chat.inject import with_tool_results
from ..chat.reply_reader import first_message, parse_json
from ..chat.request import encode_json
from ..chat.upstream import read_body
from ..observability import TOOL_CALLS, TOOL_TURNS, WRITTEN_CALLS, log
from ..services import Services
from .calls import ToolCall, ToolTurn, call_name, definitions, offered, run_calls, tool_calls
from .outbound import prepare, report, withholds
from .text_calls import written_calls

MAX_ROUNDS = 3
CHAT_PATH = "/chat/completions"


def client_tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    return {str(t["function"].get("name")) for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
            } if isinstance(tools, list) else set()


def offers_tools(services: Services, body: dict[str, Any]) -> bool:
    """Whether this identified chat turn gets our tools: MEMORY_TOOLS on, its `tools` (if any) a list, and its
    model has not refused tools lately. Streamed turns run their rounds in memory_proxy/tools/streamed_rounds.py."""
    return (services.settings.retrieval.tools != "off"
            and isinstance(body.get("tools", []), list) and str(body.get("model")) not in services.tool_less)


async def open_round(services: Services, headers: Mapping[str, str], body: dict[str, Any], content: bytes,
                     turn: ToolTurn, messages: list[Any], round_: int, offer: bool = True) -> tuple[httpx.Response, AsyncIterator[bytes], bool]:
    """One round's upstream request: `body` with `messages` and our tools, or, when tools are no longer offered,
    the answer round (`answer_messages`). An upstream 400 to it gets the turn again as the client sent it
    (`content`, memories injected) and the model is remembered as tool-less; the flag says so (that reply is
    final)."""
    upstream = services.upstream
    theirs = client_tool_names(body)
    payload = {**body, "messages": messages}
    if offer:
        payload["tools"] = [*body.get("tools", []),
                            *(t for t in definitions(turn.mode) if t["function"]["name"] not in theirs)]
    else:
        payload["messages"] = answer_messages(body, turn, messages)
        if turn.notes:  # a call to the client's tool was withheld: the answer comes in words, with no tool at all
            payload.pop("tools", None)
            payload.pop("tool_choice", None)
    response, reply = await upstream.open("POST", CHAT_PATH, headers, encode_json(payload))
    if response.status_code != 400:
        return response, reply, False
    await read_body(reply)
    if round_ == 0:
        services.tool_less.add(str(body.get("model")))
        TOOL_CALLS.labels("all", "rejected").inc()
    log.warning("memory_tools_rejected", user_id=turn.user_id, round=round_ + 1)
    response, reply = await upstream.open("POST", CHAT_PATH, headers, content)
    return response, reply, True


def answer_messages(body: dict[str, Any], turn: ToolTurn, messages: list[Any]) -> list[Any]:
    """The last round's conversation: the turn as offered but with no word of tools (`turn.answer_base`), with
    what our tools returned this turn added to its system prompt as data, and no tool messages. A model that
    was shown its own calls and their results, but no tools, tends to write another call (small ones do);
    asked this way, it answers."""
    results = [str(m.get("content") or "") for m in messages[len(body["messages"]):]
               if isinstance(m, dict) and m.get("role") == "tool"]
    return with_tool_results(turn.answer_base or body["messages"], [*results, *turn.notes])


def call_key(call: Any) -> str:
    """A call's name and arguments, the same for the same call however its JSON is spaced."""
    read = ToolCall.read(call)
    try:
        arguments = json.dumps(json.loads(read.arguments), sort_keys=True)
    except (ValueError, RecursionError):
        arguments = read.arguments
    return f"{read.name}\0{arguments}"


async def run_round(turn: ToolTurn, mine: list[Any], message: dict[str, Any], messages: list[Any],
                    seen: set[str]) -> tuple[list[Any], bool]:
    """A round's calls (all ours) run and appended to the conversation; (the conversation, whether they were all
    calls the model already made this turn: then nothing is run, and the model is asked for its answer)."""
    keys = {call_key(c) for c in mine}
    if keys <= seen:
        return messages, True
    seen |= keys
    return [*messages, assistant_turn(message), *await run_calls(turn, mine, messages)], False


def assistant_turn(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message that made the calls, as the conversation goes on with it."""
    return {"role": "assistant", "content": message.get("content"), "tool_calls": message["tool_calls"]}


async def open_with_tools(services: Services, headers: Mapping[str, str], body: dict[str, Any], content: bytes,
                          turn: ToolTurn) -> tuple[httpx.Response, AsyncIterator[bytes]]:
    """The upstream's final reply to `body` (the request as it would be sent, `content` its bytes), our
    tools' calls run on the way (see the module docstring)."""
    theirs = client_tool_names(body)
    messages = list(body["messages"])
    round_, offer, seen = 0, True, set[str]()
    try:
        for round_ in range(MAX_ROUNDS + 1):
            response, reply, rejected = await open_round(services, headers, body, content, turn, messages, round_,
                                                         offer)
            if rejected or response.status_code >= 300 or "json" not in response.headers.get("content-type", ""):
                return response, reply
            raw = await read_body(reply)
            parsed = parse_json(raw)
            message = first_message(parsed) or {}
            calls = tool_calls(message) or (written(message, turn) if offer else [])
            if calls and not tool_calls(message):  # written as text: carried on as the calls it spells
                message = {**message, "content": None, "tool_calls": calls}
            mine = [c for c in calls if call_name(c) not in theirs]
            if offer and calls and len(mine) == len(calls):
                _metered(turn, parsed, raw)
                messages, repeated = await run_round(turn, mine, message, messages, seen)
                offer = round_ + 1 < MAX_ROUNDS and not repeated
                continue
            if offer and round_ and not calls and not _text(message):  # our rounds ended in no answer: ask for it
                _metered(turn, parsed, raw)
                offer = False
                continue
            await prepare(turn, body["messages"])
            held = [c for c in calls if call_name(c) in theirs and withholds(turn, ToolCall.read(c).arguments)]
            report(turn, [call_name(c) for c in held])
            if held and round_ < MAX_ROUNDS and not turn.answered:  # the answer, in words, without that call
                _metered(turn, parsed, raw)
                offer, turn.answered = False, True
                continue
            if mine or held:
                raw = encode_json(_without(parsed, {id(c) for c in calls if call_name(c) in theirs and c not in held}))
            TOOL_TURNS.labels(str(round_)).inc()
            return response, _once(raw)
    finally:
        turn.done(round_)
    raise AssertionError("unreachable: the last round offers no tools and returns")


def _metered(turn: ToolTurn, parsed: Any, raw: bytes) -> None:
    """A round the client never sees counted in the turn's tokens (its reply's bytes: at least its characters)."""
    if turn.meter:
        turn.meter.round(parsed.get("usage") if isinstance(parsed, dict) else None, len(raw))


def written(message: Any, turn: ToolTurn) -> list[Any]:
    """Calls of our tools a model wrote as its whole text (memory_proxy/tools/text_calls.py), counted; or []."""
    content = message.get("content") if isinstance(message, dict) else None
    calls = written_calls(content, offered(turn.mode)) if isinstance(content, str) else []
    WRITTEN_CALLS.inc(len(calls))
    return calls


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    return content.strip() if isinstance(content, str) else ""


def _without(parsed: dict[str, Any], sent: set[int]) -> dict[str, Any]:
    """The reply with only the calls to send (their ids: the client's, not withheld) left in its first choice."""
    choice = parsed["choices"][0]
    message = dict(choice["message"])
    kept = [c for c in tool_calls(message) if id(c) in sent]
    finish = choice.get("finish_reason")
    if kept:
        message["tool_calls"] = kept
    else:
        message.pop("tool_calls", None)
        finish = "stop" if finish == "tool_calls" else finish
    return {**parsed, "choices": [{**choice, "message": message, "finish_reason": finish}, *parsed["choices"][1:]]}


async def _once(raw: bytes) -> AsyncIterator[bytes]:
    yield raw
