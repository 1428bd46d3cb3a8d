"""What text stands for a memory in the vector index: the fact with who said it and when.

Facts are stored in the third person ("User moved to Berlin.") and embedded after the date of the
statement, "[2 March 2026] User moved to Berlin.": a date prefix, because on LoCoMo it lifts recall more
than the same date as a suffix, and far above the bare text (`python -m benchmarks.locomo`, against its
`-bare` ablations; docs/BENCHMARKS.md#retrieval-quality-on-locomo). The stored text stays the bare fact (the
injected line shows the date separately), so the exact-duplicate guard still sees the same fact said on two
days as one.
"""

from __future__ import annotations

from datetime import datetime


def embedding_text(content: str, stated_at: datetime) -> str:
    return f"[{stated_at.day} {stated_at:%B %Y}] {content}"
