"""What an admitted chat request spent in tokens, counted when it ends: the upstream's own `usage` when the reply
carries it (a completion's, or a stream's last chunk with `stream_options.include_usage`), else our estimate
(memory_proxy/tokens.py) of the request as sent and the reply's text; with the memory tools, each round before
the reply too; and what the turn's own calls to a remote embedder spent (its query's embedding: `besides`)."""

from __future__ import annotations

from typing import Any

from ..chat.reply_reader import delta_text, first_choice, reply_text
from ..tokens import tokens_of


def _total(usage: Any) -> int | None:
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and total >= 0 else None


class Meter:
    """Fed the reply (each streamed event's JSON, from the relay's one reading of the stream: chat/turn.py
    `relay_stream`; or a completion), gives the request's tokens."""

    def __init__(self, sent: bytes) -> None:
        self._prompt = tokens_of(len(sent))  # the request as sent: bytes already, not decoded again
        self._reply_chars = 0
        self._usage: int | None = None
        self._rounds = 0  # tokens of the memory tools' rounds before the reply relayed (tools/rounds.py)
        self.besides = [0]  # tokens.SPENT while the turn retrieves (chat/turn.py)

    def round(self, usage: Any, reply_chars: int) -> None:
        """A memory-tool round the client never sees: the upstream's usage for it, else our estimate (the request
        as the client sent it, and the round's reply)."""
        self._rounds += _total(usage) or self._prompt + tokens_of(reply_chars)

    def event(self, data: Any) -> None:
        if isinstance(data, dict):
            self._usage = _total(data.get("usage")) or self._usage
            self._reply_chars += len(delta_text(first_choice(data)) or "")

    def completion(self, parsed: Any) -> None:
        self._usage = _total(parsed.get("usage")) if isinstance(parsed, dict) else None
        self._reply_chars = len(reply_text(parsed))

    @property
    def tokens(self) -> int:
        if self._usage is not None:
            return self.besides[0] + self._rounds + self._usage
        return self.besides[0] + self._rounds + self._prompt + tokens_of(self._reply_chars)  # (characters: at least one byte each)
