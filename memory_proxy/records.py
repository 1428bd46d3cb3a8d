"""Plain data shared across layers (no behaviour, no imports from the package)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory as retrieval sees it: the vector's id, its text, when it was stated, and its score."""

    id: str
    content: str
    created_at: datetime
    score: float = 0.0
    stated_at: datetime | None = None  # when the user said it (defaults to created_at)
    memory_type: str = "preference"
    pinned: bool = False
    team: str = ""  # the team's id for a team memory (held by "team:<id>"); "" for the user's own
    team_name: str = ""

    @property
    def said_at(self) -> datetime:
        return self.stated_at or self.created_at


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A candidate of the hybrid search, before ranking (retrieval/rank.py): what the SQL knows about it."""

    memory: Memory
    fused: float  # reciprocal rank fusion score of the vector and full-text ranks
    cosine: float  # similarity of its vector to the query's
    matched_terms: int  # distinct query words it contains
    query_terms: int = 0  # distinct words of the query (stemmed, without stop words)
    access_count: int = 0
    last_accessed_at: datetime | None = None
    similar: Sequence[float] = field(default_factory=tuple, repr=False)  # to each candidate, in their order


@dataclass(frozen=True, slots=True)
class FactAttributes:
    """What extraction says of a fact, stored with it (vectors.memory_type, expires_at)."""

    memory_type: str = "preference"
    expires_at: datetime | None = None
