"""Reading the assistant's text out of a reply (memory_proxy/chat/reply_reader.py): streamed SSE, split anywhere, and plain JSON."""

from __future__ import annotations

import json

import pytest

from memory_proxy.chat.reply_reader import MAX_REPLY_CHARS, ReplyTee, reply_text


def event(content: object) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}).encode() + b"\n\n"


STREAM = (b": keep-alive\n\n" + event("Hel") + event("lo, ") + event(None)
          + b'data: {"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}\n\n'
          + b"data: {not json}\n\n" + b'data: {"choices": []}\n\n' + event("Ana\u0000!") + b"data: [DONE]\n\n")


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(STREAM)])
def test_the_text_is_the_same_however_the_bytes_are_split(size: int) -> None:
    tee = ReplyTee()
    for start in range(0, len(STREAM), size):
        tee.feed(STREAM[start:start + size])
    assert tee.text == "Hello, Ana\ufffd!"  # comments, tool calls, bad JSON skipped; NUL made storable


def test_a_long_reply_is_kept_to_its_first_characters() -> None:
    tee = ReplyTee()
    for _ in range(MAX_REPLY_CHARS // 100 + 10):
        tee.feed(event("x" * 100))
    assert tee.text == "x" * MAX_REPLY_CHARS


@pytest.mark.parametrize(("parsed", "text"), [
    ({"choices": [{"message": {"role": "assistant", "content": "Hi Ana."}}]}, "Hi Ana."),
    ({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": []}}]}, ""),
    ({"error": {"message": "bad"}}, ""), (None, ""), ([], ""), ({"choices": [{}]}, ""),
])
def test_reply_text_of_a_plain_completion(parsed: object, text: str) -> None:
    assert reply_text(parsed) == text
