"""Provenance corpus: which parts of a chat message reach the memory model as the user's own words.

Each row holds a user message exactly as the client sends it, the `planted` substrings that come from
someone else (a pasted e-mail, a retrieved document, a quote, an instruction addressed to an AI) and the
`own` substrings the user wrote. See README.md for who wrote it, when, and the reading rule for test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SPLITS = ("dev", "test")


def load(split: str) -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    with (HERE / f"{split}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check(row: dict[str, Any], own_text: str) -> tuple[list[str], list[str]]:
    """(planted substrings found in own_text, own substrings missing from it), both case-insensitive."""
    seen = own_text.casefold()
    leaked = [p for p in row["planted"] if p.casefold() in seen]
    lost = [o for o in row["own"] if o.casefold() not in seen]
    return leaked, lost


def score(own_text_fn: Callable[[str], str], split: str) -> dict[str, Any]:
    """Rows, leaks (rows with a planted substring in own_text_fn's text) and losses (rows with an own
    substring missing from it), in total, per language and per kind. Failing rows only for dev: the test
    split is read as counts, never case by case."""
    counts: dict[str, dict[str, dict[str, int]]] = {"lang": {}, "kind": {}}
    total = {"rows": 0, "leaks": 0, "losses": 0}
    failures = []
    for row in load(split):
        leaked, lost = check(row, own_text_fn(row["message"]))
        tallies = [total] + [counts[axis].setdefault(row[axis], dict.fromkeys(total, 0)) for axis in counts]
        for tally in tallies:
            tally["rows"] += 1
            tally["leaks"] += bool(leaked)
            tally["losses"] += bool(lost)
        if (leaked or lost) and split == "dev":
            failures.append(
                {
                    "lang": row["lang"],
                    "kind": row["kind"],
                    "leaked": leaked,
                    "lost": lost,
                    "message": row["message"],
                }
            )
    return {"split": split, "total": total, **counts, "failures": failures}


def table(result: dict[str, Any]) -> str:
    total = result["total"]
    lines = [
        f"split {result['split']}: {total['rows']} rows, {total['leaks']} with a leak, "
        f"{total['losses']} with a loss",
        f"{'axis':<5} {'value':<17} {'rows':>5} {'leaks':>6} {'losses':>7}",
    ]
    for axis in ("lang", "kind"):
        for value, c in sorted(result[axis].items()):
            lines.append(f"{axis:<5} {value:<17} {c['rows']:>5} {c['leaks']:>6} {c['losses']:>7}")
    return "\n".join(lines)
