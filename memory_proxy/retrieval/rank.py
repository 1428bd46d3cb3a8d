"""Pure ranking of search hits: relevance, time and use, a minimum score, then diversity (MMR).

    relevance = fused / best possible fused       (weighted reciprocal rank fusion scaled to 0–1:
                                                   1 = first in every arm that ran)
    recency   = 1                                  pinned, or a type that never decays
              = 0.5 ** (age_days / half_life)      age: days since the memory was last used, or stated
    frequency = min(access_count / 20, 1)          (20 uses: as frequent as it gets)
    score     = w_rel · relevance + w_rec · recency + w_freq · frequency

Minimum score (RETRIEVAL_MIN_SCORE) keeps one meaning whatever the fusion: it is a floor on the cosine
similarity of the memory to the query, because a fused rank says only how a memory compares with the
other memories, never whether it is relevant at all (every query has a first result). A memory below
the floor still qualifies when it contains at least half of the query's words (a name, a rare term:
the keyword evidence that full-text search adds).

MMR (Carbonell & Goldstein 1998) then picks, one at a time, the hit with the best
λ · score − (1 − λ) · (highest similarity to a hit already picked), so near-identical memories do not
crowd the prompt. The similarities between candidates come with them from SQL (store/search.py, from
their binary codes), so no vector is shipped to Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from ..records import Memory, SearchHit
from ..settings import RankingSettings
from ..store import scoring

FREQUENCY_SATURATION = 20  # uses after which frequency counts in full
MIN_TERM_SHARE = 0.5  # share of the query's words that qualifies a memory below the cosine floor


STALE_RECENCY = 0.05  # maintenance prunes an unused memory once its recency fell below this


def decayed_after_days(half_life_days: Mapping[str, float | None], floor: float = STALE_RECENCY) -> dict[str, float]:
    """For each type that decays, the age (days since last use or statement) at which `recency` falls
    below `floor`: 0.5 ** (age / half_life) < floor ⇔ age > half_life · log2(1 / floor)."""
    return {kind: half_life * math.log2(1 / floor) for kind, half_life in half_life_days.items()
            if half_life is not None}


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


def best_fused(mode: str, settings: RankingSettings, late_weight: float = 0.0) -> float:
    """First in every arm that ran (late_weight: the late-interaction arm's, when it ran: retrieval/late_interaction.py)."""
    weight = {"hybrid": 1.0 + settings.text_weight, "vector": 1.0, "text": settings.text_weight}[mode]
    return scoring.rrf(weight + late_weight, 1, settings.rrf_k)


def score(hit: SearchHit, *, best: float, now: datetime, settings: RankingSettings) -> float:
    return (settings.relevance * relevance(hit, best)
            + settings.recency * recency(hit, now, settings.half_life_days)
            + settings.frequency * frequency(hit))


def qualifies(hit: SearchHit, min_score: float) -> bool:
    return hit.cosine >= min_score or (hit.query_terms > 0 and hit.matched_terms >= MIN_TERM_SHARE * hit.query_terms)


def mmr(scores: Sequence[float], similar: np.ndarray, k: int, lambda_: float) -> list[int]:
    """Indexes of up to `k` hits picked by maximal marginal relevance; `similar[i, j]` is the similarity
    of hits i and j (vectorized: O(k·n))."""
    if not len(scores):
        return []
    if lambda_ >= 1.0 or similar.shape != (len(scores), len(scores)):
        return sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
    relevance = lambda_ * np.asarray(scores, dtype=np.float64)
    redundancy = np.zeros(len(scores))  # highest similarity to anything picked so far
    available = np.ones(len(scores), dtype=bool)
    picked: list[int] = []
    for _ in range(min(k, len(scores))):
        marginal = np.where(available, relevance - (1 - lambda_) * redundancy, -np.inf)
        best = int(np.argmax(marginal))  # ties: the earlier (better-fused) hit
        picked.append(best)
        available[best] = False
        redundancy = np.maximum(redundancy, similar[best])
    return picked


def similarities(hits: Sequence[SearchHit], kept: Sequence[int]) -> np.ndarray:
    """The similarity matrix among the `kept` hits (indexes into `hits`, whose `similar` rows cover all)."""
    if not kept or any(len(h.similar) != len(hits) for h in hits):
        return np.zeros((0, 0))
    return np.asarray([hits[i].similar for i in kept], dtype=np.float64)[:, list(kept)]


def rank(hits: Sequence[SearchHit], *, top_k: int, min_score: float, mode: str, now: datetime,
         settings: RankingSettings, late_weight: float = 0.0) -> list[Memory]:
    """The `top_k` memories to inject, best first, each carrying its final score."""
    best = best_fused(mode, settings, late_weight)
    kept = [i for i, h in enumerate(hits) if qualifies(h, min_score)]
    scores = [score(hits[i], best=best, now=now, settings=settings) for i in kept]
    picked = mmr(scores, similarities(hits, kept), top_k, settings.mmr_lambda)
    return [replace(hits[kept[i]].memory, score=round(scores[i], 6)) for i in picked]
