"""Reading the assistant's text out of a reply without touching the bytes relayed to the client."""

from __future__ import annotations

import json
from typing import Any

from .classify import storable

MAX_REPLY_CHARS = 8000  # formation needs the gist of the reply, not all of it


class ReplyTee:
    """Fed the relayed SSE bytes chunk by chunk; collects `choices[0].delta.content` (bounded)."""

    def __init__(self) -> None:
        self._pending = b""
        self._parts: list[str] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._size >= MAX_REPLY_CHARS:
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._take(line[5:].strip())

    def _take(self, data: bytes) -> None:
        if not data or data == b"[DONE]":
            return
        try:
            event = json.loads(data)
            text = event["choices"][0]["delta"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return
        if isinstance(text, str) and text:
            self._parts.append(text)
            self._size += len(text)

    @property
    def text(self) -> str:
        return storable("".join(self._parts)[:MAX_REPLY_CHARS])


def reply_text(parsed: Any) -> str:
    """The assistant's text in a non-streaming chat completion."""
    try:
        content = parsed["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return storable(content[:MAX_REPLY_CHARS]) if isinstance(content, str) else ""
