"""A memory's text: one rule for every way in (chat formation, the management API, the CLI).

Whitespace is collapsed, secrets are redacted (memory_proxy/redact/), and a text over MAX_MEMORY_BYTES of
UTF-8 is refused, never cut mid-meaning (the database enforces the same limit). Its size is checked before
the secret scan, whose cost grows with the text: an oversized text is refused unread. Formation is stricter:
a fact that held a secret is dropped whole, since "User's API key is [REDACTED]" is worth nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..redact import PLACEHOLDER, Redaction, redact
from ..redact.scan_pool import Scanner

_WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")  # PostgreSQL's \s in memory_key()
# What UTF-8 text in PostgreSQL cannot hold: NUL, and lone surrogates (valid JSON escapes such as "\ud800"
# that no UTF-8 can encode). Text read for memory gets U+FFFD instead (`storable`); the API refuses it.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

MAX_MEMORY_BYTES = 2048
MAX_FACTS_PER_TURN = 10  # per-turn cap on new memories: a runaway extraction cannot flood the store


@dataclass(frozen=True, slots=True)
class Content:
    text: str  # empty when oversized: a text that was not scanned is never handed on
    secrets: tuple[str, ...]  # kinds of secret it held (redacted now, or already when it came in)
    oversized: bool = False  # over MAX_MEMORY_BYTES before redaction: refused unread

    @property
    def problem(self) -> str | None:
        """Why it cannot be stored (too long, empty), or None."""
        if self.oversized:
            return f"the memory text is over {MAX_MEMORY_BYTES} bytes"
        if not self.text:
            return "the memory text is empty"
        if UNSTORABLE.search(self.text):
            return "the memory text holds NUL or a lone surrogate"
        if len(self.text.encode()) > MAX_MEMORY_BYTES:
            return f"the memory text is over {MAX_MEMORY_BYTES} bytes"
        return None


def storable(text: str) -> str:
    """`text` with what PostgreSQL cannot store (NUL, lone surrogates) replaced by U+FFFD."""
    return UNSTORABLE.sub("\ufffd", text)


def same_text_key(text: str) -> str:
    """What makes two memories "the same text", as the database's memory_key() (memory_proxy/store/migrations/0002) sees it:
    case, surrounding spaces and trailing or leading "." and "!" aside, runs of ASCII whitespace as one
    (tests/formation/test_memory_text.py compares the two; lower() may differ for a few letters such as Turkish İ, where
    the database's unique guard still decides)."""
    return _WHITESPACE.sub(" ", text.strip(" \t\r\n.!").lower())


def _oversized(text: str) -> bool:
    return len(text.encode("utf-8", "surrogatepass")) > MAX_MEMORY_BYTES


def _content(raw: str, redaction: Redaction) -> Content:
    return Content(redaction.text, redaction.kinds or tuple(PLACEHOLDER.findall(raw)))  # held one before


def memory_content(raw: str) -> Content:
    """`raw` as a memory, scanned here (a worker process, the CLI: no event loop to hold up)."""
    text = " ".join(raw.split())
    return Content("", (), oversized=True) if _oversized(text) else _content(raw, redact(text))


async def scanned_content(raw: str, scanner: Scanner) -> Content:
    """`memory_content(raw)` with the scan off the event loop (the management API); raises ScanFailed."""
    text = " ".join(raw.split())
    return Content("", (), oversized=True) if _oversized(text) else _content(raw, await scanner.redact(text))
