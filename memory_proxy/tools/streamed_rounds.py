"""A streamed chat turn (`stream: true`) with the memory tools: the rounds of memory_proxy/tools/rounds.py, read
from the upstream's server-sent events, and no chunk of our calls ever reaching the client.

Each round's stream is read event by event. Until the first choice's delta shows content text or a tool call
(or the stream ends), its events are held, role-only ones too; text that may be one of our calls written out
(memory_proxy/tools/text_calls.py) is held until it is clearly text, or read as those calls when the round ends;
a round after ours that ends with no text and no call is not relayed, and the answer round follows:
- content first: the held events and then the rest are relayed as they arrive, byte for byte. An event that
  later carries a call of ours (a model that writes and then calls) is dropped; one that mixes ours with the
  client's is re-encoded with the client's only;
- a tool call first: the stream is read to its end, nothing relayed, its calls accumulated by index (arguments
  split anyhow across deltas). When every call is ours and tools were offered, the calls are run, appended, and
  the upstream asked again (streamed). Otherwise the held stream goes to the client without our calls (a
  `finish_reason` of `tool_calls` left without any call becomes `stop`): the client's calls pass untouched and
  ours are not run, as on a non-streamed turn.
While a round's calls are read and run, the client gets an SSE comment (KEEP_ALIVE), which the openai SDKs and
OpenWebUI skip: one when the first call shows, one before the next round is sent, and one every
KEEP_ALIVE_EVERY seconds while a held round's upstream, or the next round's, is silent.

The first round is opened before the client's response starts, so its errors keep their status (and its 400
its retry without tools, tools/rounds.open_round). A later round's error status ends the stream
with an error event (memory_proxy/chat/turn.relay_stream). A client that leaves closes the upstream request
of the round under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from functools import partial
from typing import Any, TypeVar

import httpx

from ..chat.reply_reader import DONE, SSEEvents, delta_calls, event_data, first_choice
from ..chat.request import encode_json
from ..chat.upstream import read_body
from ..errors import UpstreamUnavailable
from ..observability import TOOL_TURNS, WRITTEN_CALLS
from ..services import Services
from .calls import ToolCall, ToolTurn, call_name, offered
from .outbound import prepare, report, withholds
from .rounds import MAX_ROUNDS, client_tool_names, open_round, run_round
from .text_calls import may_be_written_call, written_calls

KEEP_ALIVE = b": keep-alive\n\n"
DECIDE_CHARS = 512  # of a round's text read to tell a written call from text (its start decides): a long held
# reply costs each of its events this much, not its whole length
KEEP_ALIVE_EVERY = 10.0  # seconds of the upstream's silence, while a round is held or opened, between comments
T = TypeVar("T")
MAX_HELD_BYTES = 256 * 1024  # of a round held while it reads as a tool call; past it the call is dropped unread
RUNAWAY_NOTE = "A tool call of over 256 KB was not read. Answer the user without it."
class Reading:
    """One round's stream as read so far: what it starts with, its text, and its calls put together by index.
    With `names` (our tools, when offered), text that may be a call written out (memory_proxy/tools/text_calls.py)
    keeps the round undecided until it is clearly text or the stream ends; then it is read as those calls."""

    def __init__(self, names: tuple[str, ...] = (), hold_empty: bool = False) -> None:
        self.starts_with: str | None = None  # "content", "tools" or (with hold_empty) "empty", once the stream
        # shows which: "empty" is a round after ours that ended with no text and no call, held, not relayed
        self._hold_empty = hold_empty
        self.text = ""
        self.written: list[dict[str, Any]] = []  # the calls the text spelled, when it did
        self._names = names
        self._calls: dict[int, dict[str, str]] = {}
        self.usage: Any = None  # the round's own, when the stream reports it
        self.size = 0  # bytes read: the estimate of its tokens when it does not

    def feed(self, raw: bytes) -> None:
        event = event_data(raw)
        self.size += len(raw)
        if isinstance(event, dict) and event.get("usage"):
            self.usage = event["usage"]
        choice = first_choice(event)
        delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
        content = delta.get("content")
        if isinstance(content, str):
            self.text += content
        for piece in delta_calls(choice):
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", 0)
            call = self._calls.setdefault(index if isinstance(index, int) else 0,
                                          {"id": "", "name": "", "arguments": ""})
            function: dict[str, Any] = piece["function"] if isinstance(piece.get("function"), dict) else {}
            call["id"] += str(piece.get("id") or "")
            call["name"] += str(function.get("name") or "")
            arguments = function.get("arguments")
            call["arguments"] += arguments if isinstance(arguments, str) else ""
        if self.starts_with is None:
            if self._calls:
                self.starts_with = "tools"
            elif choice.get("finish_reason") or event == DONE:
                self.written = written_calls(self.text, self._names) if self._names else []
                empty = self._hold_empty and not self.text.strip()
                self.starts_with = "tools" if self.written else "empty" if empty else "content"
            elif content and not (self._names and may_be_written_call(self.text[:DECIDE_CHARS], self._names)):
                self.starts_with = "content"

    def message(self) -> dict[str, Any]:
        """The assistant message the stream spelled out, as a non-streamed reply holds it."""
        if self.written:
            return {"role": "assistant", "content": None, "tool_calls": self.written}
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for _, c in sorted(self._calls.items())]
        return {"role": "assistant", "content": self.text or None, "tool_calls": calls}


class Relay:
    """Events as relayed to the client: unchanged, unless they carry a call of ours (by name, or by the index a
    call of ours was given), or, with `guard` (our tools showed the model memories this turn), a call of the
    client's: those are held back until whole, then sent in one event before the round's finish, or withheld when
    `guard(arguments)` says so (tools/outbound.py)."""

    def __init__(self, theirs: set[str], guard: Callable[[str], bool] | None = None) -> None:
        self._theirs = theirs
        self._ours: set[Any] = set()
        self._client_called = False
        self._guard = guard
        self._pending: dict[Any, dict[str, str]] = {}  # the client's calls held back, by index
        self.withheld: list[str] = []  # the names of the client's calls not sent

    def relayed(self, raw: bytes) -> bytes:
        event = event_data(raw)
        choice = first_choice(event)
        calls = delta_calls(choice)
        kept = []
        for piece in calls:
            name = call_name(piece)
            index = piece.get("index") if isinstance(piece, dict) else None
            if name and name not in self._theirs:
                self._ours.add(index)
            if index in self._ours:
                continue
            if self._guard is None:
                kept.append(piece)
            else:
                self._hold(index, piece)
        finish = choice.get("finish_reason")
        released = self._release() if finish and self._pending else []
        kept += released
        self._client_called = self._client_called or bool(kept)
        orphan_finish = finish == "tool_calls" and not self._client_called
        if len(kept) == len(calls) and not released and not orphan_finish:
            return raw
        given = choice.get("delta")
        delta = {k: v for k, v in given.items() if k != "tool_calls"} if isinstance(given, dict) else {}
        if kept:
            delta["tool_calls"] = kept
        finish = "stop" if orphan_finish else finish
        if not any(v not in (None, "") for v in delta.values()) and finish is None and not event.get("usage"):
            return b""
        rewritten = {**event, "choices": [{**choice, "delta": delta, "finish_reason": finish},
                                          *event["choices"][1:]]}
        return b"data: " + encode_json(rewritten) + b"\n\n"

    def rest(self) -> bytes:
        """The client's calls still held back when the stream ended without a finish: sent now, or withheld."""
        released = self._release()
        if not released:
            return b""
        self._client_called = True
        return b"data: " + encode_json({"choices": [{"index": 0, "delta": {"tool_calls": released}}]}) + b"\n\n"

    def _hold(self, index: Any, piece: Any) -> None:
        call = self._pending.setdefault(index, {"id": "", "name": "", "arguments": ""})
        function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
        call["id"] += str(piece.get("id") or "")
        call["name"] += str(function.get("name") or "")
        arguments = function.get("arguments")
        call["arguments"] += arguments if isinstance(arguments, str) else ""

    def _release(self) -> list[dict[str, Any]]:
        """The held calls to send, whole; the others noted as withheld."""
        assert self._guard is not None or not self._pending
        released = []
        for index, call in sorted(self._pending.items(), key=lambda item: str(item[0])):
            if self._guard and self._guard(call["arguments"]):
                self.withheld.append(call["name"])
                continue
            released.append({"index": index, "id": call["id"], "type": "function",
                             "function": {"name": call["name"], "arguments": call["arguments"]}})
        self._pending = {}
        return released


async def ticking(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes | None]:
    """`chunks` as they come, and None after each KEEP_ALIVE_EVERY seconds without one (the next chunk is
    awaited in a task of its own, never cancelled by the wait, so nothing is lost)."""
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(chunks))
            done, _ = await asyncio.wait({pending}, timeout=KEEP_ALIVE_EVERY)
            if not done:
                yield None
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield chunk
    finally:
        if pending and not pending.done():
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)


async def awaited(job: Awaitable[T], into: list[T]) -> AsyncIterator[bytes]:
    """KEEP_ALIVE after each KEEP_ALIVE_EVERY seconds until `job` is done, its result then appended to `into`;
    cancelled if the client leaves meanwhile."""
    task = asyncio.ensure_future(job)
    try:
        while not (await asyncio.wait({task}, timeout=KEEP_ALIVE_EVERY))[0]:
            yield KEEP_ALIVE
        into.append(task.result())
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def open_streamed_with_tools(services: Services, headers: Mapping[str, str], body: dict[str, Any],
                                   content: bytes, turn: ToolTurn) -> tuple[httpx.Response, AsyncIterator[bytes]]:
    """The first round's response, and the SSE bytes the client gets over all rounds (see the module docstring)."""
    messages = list(body["messages"])
    response, reply, rejected = await open_round(services, headers, body, content, turn, messages, 0)
    if rejected or response.status_code >= 300 or "text/event-stream" not in response.headers.get("content-type", ""):
        turn.done(0)
        return response, reply
    return response, _rounds(services, headers, body, content, turn, reply)


async def _rounds(services: Services, headers: Mapping[str, str], body: dict[str, Any], content: bytes,
                  turn: ToolTurn, reply: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    theirs = client_tool_names(body)
    messages = list(body["messages"])
    round_, offer, seen = 0, True, set[str]()
    try:
        while True:
            names = tuple(n for n in offered(turn.mode) if n not in theirs) if offer else ()
            await prepare(turn, body["messages"])  # once our tools showed memories: the client's calls are guarded
            guard = partial(withholds, turn) if turn.revealed else None
            events, relay, held, held_bytes, runaway = SSEEvents(), Relay(theirs, guard), [], 0, False
            reading = Reading(names, hold_empty=offer and round_ > 0)
            async with aclosing(reply), aclosing(ticking(reply)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    if chunk is None:  # the upstream is silent: the client hears that we are still here
                        if reading.starts_with != "content":
                            yield KEEP_ALIVE
                        continue
                    for raw in events.feed(chunk):
                        if reading.starts_with == "content":
                            if out := relay.relayed(raw):
                                yield out
                            continue
                        before = reading.starts_with
                        held.append(raw)
                        held_bytes += len(raw)
                        reading.feed(raw)
                        if held_bytes > MAX_HELD_BYTES and reading.starts_with == "tools":  # a runaway call
                            runaway = True
                            break
                        if held_bytes > MAX_HELD_BYTES:  # text that only looked like a call: relayed as text
                            reading.starts_with = "content"
                        if reading.starts_with == "content":
                            yield b"".join(relay.relayed(h) for h in held)
                            held = []
                        elif reading.starts_with == "tools" and before is None:
                            yield KEEP_ALIVE
                    if runaway:
                        break
            rest = events.rest()
            WRITTEN_CALLS.inc(len(reading.written))
            message = reading.message()
            calls = message["tool_calls"]
            mine = [c for c in calls if call_name(c) not in theirs]
            ours = reading.starts_with == "tools" and offer and len(mine) == len(calls) and not runaway
            client = [c for c in calls if call_name(c) in theirs] if reading.starts_with == "tools" else []
            withheld = [call_name(c) for c in client if guard and guard(ToolCall.read(c).arguments)]
            answer = (runaway or bool(withheld)) and round_ < MAX_ROUNDS and not turn.answered
            if runaway:
                turn.notes.append(RUNAWAY_NOTE)
            if answer:  # the round is not relayed: the model answers in words, with no tool
                report(turn, withheld)
                turn.answered, offer = True, False
            if ours or reading.starts_with == "empty" or answer:  # calls to run, or no answer yet: ask for it
                if turn.meter:  # a round the client never sees, counted in the turn's tokens
                    turn.meter.round(reading.usage, reading.size)
                repeated = True
                if ours:
                    messages, repeated = await run_round(turn, mine, message, messages, seen)
                yield KEEP_ALIVE
                round_ += 1
                offer = offer and round_ < MAX_ROUNDS and not repeated
                opened: list[tuple[httpx.Response, AsyncIterator[bytes], bool]] = []
                async for out in awaited(open_round(services, headers, body, content, turn, messages, round_,
                                                    offer), opened):
                    yield out
                [(response, reply, rejected)] = opened
                offer = offer and not rejected
                if response.status_code >= 300:
                    await read_body(reply)
                    raise UpstreamUnavailable(f"the upstream answered HTTP {response.status_code} to a memory tool round")
                continue
            TOOL_TURNS.labels(str(round_)).inc()
            if out := b"".join(relay.relayed(h) for h in held) + relay.rest() + rest:
                yield out
            report(turn, relay.withheld)
            return
    finally:
        turn.done(round_)
