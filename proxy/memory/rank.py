"""Pure ranking of search hits: relevance, time and use, a minimum score, then diversity (MMR).

    relevance = fused / best possible fused       (weighted reciprocal rank fusion scaled to 0–1:
                                                   1 = first in every arm that ran)
    recency   = 1                                  pinned, or a type that never decays
              = 0.5 ** (age_days / half_life)      age: days since the memory was last used, or stated
    frequency = min(access_count / 20, 1)          (seed 002)
    score     = w_rel · relevance + w_rec · recency + w_freq · frequency

Minimum score (RETRIEVAL_MIN_SCORE) keeps one meaning whatever the fusion: it is a floor on the cosine
similarity of the memory to the query, because a fused rank says only how a memory compares with the
other memories, never whether it is relevant at all (every query has a first result). A memory below
the floor still qualifies when it contains at least half of the query's words (a name, a rare term:
the keyword evidence that full-text search adds).

MMR (Carbonell & Goldstein 1998) then picks, one at a time, the hit with the best
λ · score − (1 − λ) · (highest cosine to a hit already picked), so near-identical memories do not crowd
the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from ..schemas import Memory, SearchHit
from ..settings import RankingSettings

FREQUENCY_SATURATION = 20  # uses after which frequency counts in full
MIN_TERM_SHARE = 0.5  # share of the query's words that qualifies a memory below the cosine floor


def recency(hit: SearchHit, now: datetime, half_life_days: Mapping[str, float | None]) -> float:
    half_life = half_life_days.get(hit.memory.memory_type)
    if hit.memory.pinned or half_life is None:
        return 1.0
    last_used = max(hit.last_accessed_at or hit.memory.said_at, hit.memory.said_at)
    age_days = max((now - last_used).total_seconds() / 86400, 0.0)
    return float(0.5 ** (age_days / half_life))


def frequency(hit: SearchHit) -> float:
    return min(hit.access_count / FREQUENCY_SATURATION, 1.0)


def relevance(hit: SearchHit, best: float) -> float:
    """The fused score over the best one possible (first in every arm that ran)."""
    return hit.fused / best if best > 0 else 0.0


def best_fused(mode: str, settings: RankingSettings) -> float:
    weight = {"hybrid": 1.0 + settings.text_weight, "vector": 1.0, "text": settings.text_weight}[mode]
    return weight / (settings.rrf_k + 1)


def score(hit: SearchHit, *, best: float, now: datetime, settings: RankingSettings) -> float:
    return (settings.relevance * relevance(hit, best)
            + settings.recency * recency(hit, now, settings.half_life_days)
            + settings.frequency * frequency(hit))


def qualifies(hit: SearchHit, min_score: float) -> bool:
    return hit.cosine >= min_score or (hit.query_terms > 0 and hit.matched_terms >= MIN_TERM_SHARE * hit.query_terms)


def mmr(hits: Sequence[SearchHit], scores: Sequence[float], k: int, lambda_: float) -> list[int]:
    """Indexes of up to `k` hits picked by maximal marginal relevance (vectorized: O(k·n))."""
    if not hits:
        return []
    if lambda_ >= 1.0 or not all(len(h.embedding) for h in hits):
        return sorted(range(len(hits)), key=lambda i: -scores[i])[:k]
    vectors = np.asarray([np.asarray(h.embedding, dtype=np.float32) for h in hits])
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    relevance = lambda_ * np.asarray(scores, dtype=np.float64)
    redundancy = np.zeros(len(hits))  # highest similarity to anything picked so far
    available = np.ones(len(hits), dtype=bool)
    picked: list[int] = []
    for _ in range(min(k, len(hits))):
        marginal = np.where(available, relevance - (1 - lambda_) * redundancy, -np.inf)
        best = int(np.argmax(marginal))  # ties: the earlier (better-fused) hit
        picked.append(best)
        available[best] = False
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    return picked


def rank(hits: Sequence[SearchHit], *, top_k: int, min_score: float, mode: str, now: datetime,
         settings: RankingSettings) -> list[Memory]:
    """The `top_k` memories to inject, best first, each carrying its final score."""
    best = best_fused(mode, settings)
    kept = [h for h in hits if qualifies(h, min_score)]
    scores = [score(h, best=best, now=now, settings=settings) for h in kept]
    return [replace(kept[i].memory, score=round(scores[i], 6)) for i in mmr(kept, scores, top_k, settings.mmr_lambda)]
