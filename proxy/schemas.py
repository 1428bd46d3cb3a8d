"""Plain data shared across layers (no behaviour, no imports from the package)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory as retrieval sees it: the vector's id, its text, and its similarity to the query."""

    id: str
    content: str
    created_at: datetime
    score: float = 0.0
