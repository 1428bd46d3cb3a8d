"""Personal secrets stated in chat prose, in 21 languages, and harmless look-alikes that must stay untouched.

A frozen corpus (see README.md): whoever tunes the detector may read ``dev.jsonl``; ``test.jsonl`` is run for
aggregate counts only, never read case by case. ``load(split)`` returns the rows; ``score(redact_fn, split)``
counts, per language and overall, the positives caught (every secret substring gone from the redacted text)
and the negatives changed (redacted text differs from the input).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SPLITS = ("dev", "test")
Row = dict[str, Any]


def load(split: str) -> list[Row]:
    """The rows of one split; raises if a secret is not an exact substring of its text."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    lines = (HERE / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    for row in rows:
        if any(secret not in row["text"] for secret in row.get("secrets", [])):
            raise ValueError(f"row {row['id']}: a secret is not a substring of its text")
    return rows


def is_right(row: Row, output: str) -> bool:
    """A positive is right when none of its secrets survives; a negative when it comes back unchanged."""
    if row["kind"] == "harmless":
        return output == row["text"]
    return all(secret not in output for secret in row["secrets"])


def score(redact_fn: Callable[[str], str], split: str, misses: list[tuple[Row, str]] | None = None) -> dict:
    """Counts per language and under "all": positives, caught, negatives, changed.

    When ``misses`` is a list, each wrong row is appended to it with its redacted output.
    """
    counts: dict[str, dict[str, int]] = {}
    for row in load(split):
        output = redact_fn(row["text"])
        right = is_right(row, output)
        for key in (row["lang"], "all"):
            c = counts.setdefault(key, {"positives": 0, "caught": 0, "negatives": 0, "changed": 0})
            if row["kind"] == "harmless":
                c["negatives"] += 1
                c["changed"] += not right
            else:
                c["positives"] += 1
                c["caught"] += right
        if not right and misses is not None:
            misses.append((row, output))
    return counts
