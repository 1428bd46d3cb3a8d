"""Late interaction: a third arm of the fusion, over the search's candidates only (EMBEDDING_PROVIDER=local).

The local model (embedding/local_model.py) reads every word of a text in context before it averages them
into one vector. Kept per word ("token states"), they score a memory as ColBERT does (Khattab & Zaharia
2020, MaxSim): for each word of the query — stop words and punctuation left out — its best cosine to a
word of the memory, averaged over the query's words. A memory that says what the question asks, in
other words or another form, scores high where one averaged vector and stemmed keywords both miss.

It ranks only the candidates the other two arms found, and adds `weight / (k + rank)` to their fused
scores, as the other arms do (store/scoring.py `rrf`). With MiniLM it lifts recall on LoCoMo, for
multi-hop and open-domain questions most (`python -m benchmarks.locomo`, ablation hybrid-nolate; the
figures, its weight and its costs: docs/BENCHMARKS.md#retrieval-quality-on-locomo). A
memory's states are computed once per process when its user's index is built (retrieval/indexes.py), kept
as int8 with a scale per word (a byte a dimension; quantizing changed no recall figure), and the query's
come from the pass that embeds it, so a turn pays only the products over its few candidates. A user
searched in SQL (their first turn, or too big to hold) is ranked without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Tokens:
    """One text's token states: unit vectors, one row a word piece, as int8 codes times a scale per row."""

    codes: np.ndarray  # int8 (n, dims)
    scales: np.ndarray  # float32 (n,)

    @classmethod
    def pack(cls, states: np.ndarray) -> Tokens:
        scales = np.abs(states).max(axis=1) / 127 if len(states) else np.zeros(0, dtype=np.float32)
        safe = np.where(scales > 0, scales, 1.0)[:, None]
        return cls(np.round(states / safe).astype(np.int8), scales.astype(np.float32))

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scales.nbytes


def maxsim(query: np.ndarray, memories: Sequence[Tokens | None]) -> np.ndarray:
    """Each memory's mean over the query's words of their best cosine to one of its words; -inf for a
    memory without states (or an empty query or memory): not ranked by this arm."""
    scores = np.full(len(memories), -np.inf)
    held = [(i, t) for i, t in enumerate(memories) if t is not None and len(t.codes)]
    if not len(query) or not held or held[0][1].codes.shape[1] != query.shape[1]:
        return scores
    codes = np.concatenate([t.codes for _, t in held])
    scales = np.concatenate([t.scales for _, t in held])
    starts = np.cumsum([0] + [len(t.codes) for _, t in held[:-1]])
    similar = (query @ codes.T.astype(np.float32)) * scales  # (query words, all memory words)
    scores[[i for i, _ in held]] = np.maximum.reduceat(similar, starts, axis=1).mean(axis=0)
    return scores

