"""Reading an upstream's reply without changing a byte relayed: the one reader of server-sent events and of a
chat completion's first choice, for the relay (the assistant's text for formation) and the memory tools.

`SSEEvents` gives the bytes back as whole events, each exactly as it came (with its blank line), so a caller
may hold, drop or relay each one unchanged. httpx-sse does not fit here: its public API consumes the
`httpx.Response` and yields parsed events only, and what is relayed must be the upstream's own bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..formation.memory_text import storable

MAX_REPLY_CHARS = 8000  # of the assistant's text kept for formation: it needs the gist of the reply, not all of it
DONE = "[DONE]"
_EVENT_END = re.compile(rb"\r?\n\r?\n")


class SSEEvents:
    """SSE bytes fed in any pieces, given back as whole events (each with its blank line), bytes unchanged."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        start = max(0, len(self._pending) - 3)  # an event's end may straddle the pieces: look back 3 bytes only,
        self._pending += chunk                  # so that a long event costs its length once, not once per piece
        events = []
        while match := _EVENT_END.search(self._pending, start):
            events.append(self._pending[:match.end()])
            self._pending = self._pending[match.end():]
            start = 0
        return events

    def rest(self) -> bytes:
        """What came after the last whole event (a stream cut short, or no final blank line)."""
        rest, self._pending = self._pending, b""
        return rest


def event_data(raw: bytes) -> Any:
    """The JSON of an event's data lines; the string DONE for `[DONE]`; None for a comment or anything unreadable."""
    data = b"\n".join(line[5:].removeprefix(b" ") for line in raw.splitlines() if line.startswith(b"data:"))
    if data.strip() == b"[DONE]":
        return DONE
    try:
        return json.loads(data) if data else None
    except (ValueError, RecursionError):
        return None


def parse_json(raw: bytes) -> Any:
    """A JSON body, or None when it is not JSON (bad bytes, too deep)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def first_choice(reply: Any) -> dict[str, Any]:
    """The first choice of a completion or of one streamed chunk; {} when there is none."""
    try:
        choice = reply["choices"][0]
    except (KeyError, IndexError, TypeError):
        return {}
    return choice if isinstance(choice, dict) else {}


def first_message(reply: Any) -> dict[str, Any] | None:
    """The first choice's message of a (non-streamed) chat completion; None when there is none."""
    message = first_choice(reply).get("message")
    return message if isinstance(message, dict) else None


def delta_calls(choice: dict[str, Any]) -> list[Any]:
    """The tool call pieces of a streamed chunk's choice."""
    delta = choice.get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    return calls if isinstance(calls, list) else []


def delta_text(choice: dict[str, Any]) -> str | None:
    """The content text of a streamed chunk's choice, when it holds some."""
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else None


class ReplyTee:
    """Fed the relayed SSE bytes chunk by chunk; collects the first choice's content text (bounded), and hands each
    event's JSON to `sink` when given (the limits' meter: one reading of a stream serves both)."""

    def __init__(self, sink: Callable[[Any], None] | None = None) -> None:
        self._events = SSEEvents()
        self._parts: list[str] = []
        self._size = 0
        self._sink = sink

    def feed(self, chunk: bytes) -> None:
        if self._size < MAX_REPLY_CHARS or self._sink:
            for raw in self._events.feed(chunk):
                self._take(raw)

    def _take(self, raw: bytes) -> None:
        data = event_data(raw)
        if self._sink:
            self._sink(data)
        if self._size < MAX_REPLY_CHARS and (text := delta_text(first_choice(data))):
            self._parts.append(text)
            self._size += len(text)

    def end(self) -> None:
        """The stream ended: a last event without its blank line is read too."""
        if self._size < MAX_REPLY_CHARS or self._sink:
            self._take(self._events.rest())

    @property
    def text(self) -> str:
        return storable("".join(self._parts)[:MAX_REPLY_CHARS])


def reply_text(reply: Any) -> str:
    """The assistant's text in a non-streamed chat completion (parsed), bounded and storable."""
    content = (first_message(reply) or {}).get("content")
    return storable(content[:MAX_REPLY_CHARS]) if isinstance(content, str) else ""
