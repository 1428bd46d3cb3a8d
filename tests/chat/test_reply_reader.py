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


def test_one_reading_feeds_the_meter_to_the_end_and_the_last_event_without_its_blank_line() -> None:
    """The limits' meter reads the same events (one JSON parse each): also past the text kept for formation, where
    the usage chunk comes, and a last event the stream ended without its blank line."""
    seen: list[object] = []
    tee = ReplyTee(seen.append)
    for _ in range(MAX_REPLY_CHARS // 100 + 10):
        tee.feed(event("x" * 100))
    tee.feed(b'data: {"choices": [], "usage": {"total_tokens": 7}}\n\n' + event("tail")[:-2])
    tee.end()
    assert tee.text == "x" * MAX_REPLY_CHARS
    assert len(seen) == MAX_REPLY_CHARS // 100 + 12
    assert seen[-2] == {"choices": [], "usage": {"total_tokens": 7}}
    assert seen[-1] == {"choices": [{"index": 0, "delta": {"content": "tail"}}]}


@pytest.mark.parametrize(("parsed", "text"), [
    ({"choices": [{"message": {"role": "assistant", "content": "Hi Ana."}}]}, "Hi Ana."),
    ({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": []}}]}, ""),
    ({"error": {"message": "bad"}}, ""), (None, ""), ([], ""), ({"choices": [{}]}, ""),
])
def test_reply_text_of_a_plain_completion(parsed: object, text: str) -> None:
    assert reply_text(parsed) == text
