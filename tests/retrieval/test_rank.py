"""retrieval/rank.py with hand-computed expectations: decay, use, fusion, the minimum score, MMR."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_proxy.records import Memory, SearchHit
from memory_proxy.retrieval.rank import (
    STALE_RECENCY,
    best_fused,
    decayed_after_days,
    frequency,
    mmr,
    qualifies,
    rank,
    recency,
    relevance,
    score,
    similarities,
)
from memory_proxy.settings import RankingSettings, load_settings

NOW = datetime(2026, 11, 23, tzinfo=UTC)
HALF_LIVES = RankingSettings().half_life_days  # identity never, preference 180, context 7, temporary 1…


def hit(memory_id: str = "m", *, said_days_ago: float = 0, memory_type: str = "preference", pinned: bool = False,
        used_days_ago: float | None = None, uses: int = 0, fused: float = 1 / 61, cosine: float = 0.9,
        matched: int = 0, terms: int = 0, similar: tuple[float, ...] = ()) -> SearchHit:
    said = NOW - timedelta(days=said_days_ago)
    memory = Memory(memory_id, f"fact {memory_id}", said, stated_at=said, memory_type=memory_type, pinned=pinned)
    used = None if used_days_ago is None else NOW - timedelta(days=used_days_ago)
    return SearchHit(memory, fused=fused, cosine=cosine, matched_terms=matched, query_terms=terms,
                     access_count=uses, last_accessed_at=used, similar=similar)


@pytest.mark.parametrize(("case", "expected"), [
    (hit(said_days_ago=0), 1.0),
    (hit(said_days_ago=180), 0.5),  # one preference half-life
    (hit(said_days_ago=360), 0.25),  # two
    (hit(said_days_ago=14, memory_type="context"), 0.25),  # context: 7-day half-life
    (hit(said_days_ago=3, memory_type="temporary"), 0.125),
    (hit(said_days_ago=5000, memory_type="identity"), 1.0),  # never decays
    (hit(said_days_ago=5000, pinned=True), 1.0),  # pinned never decays
    (hit(said_days_ago=360, used_days_ago=90), 0.5 ** 0.5),  # age counts from the last use
])
def test_recency_halves_every_half_life_of_the_type(case: SearchHit, expected: float) -> None:
    assert recency(case, NOW, HALF_LIVES) == pytest.approx(expected)


def test_maintenance_prunes_at_the_age_the_ranking_decays_below_the_floor() -> None:
    ages = decayed_after_days(HALF_LIVES)
    assert "identity" not in ages  # never decays, never stale
    for kind, age in ages.items():
        assert recency(hit(said_days_ago=age * 0.99, memory_type=kind), NOW, HALF_LIVES) > STALE_RECENCY
        assert recency(hit(said_days_ago=age * 1.01, memory_type=kind), NOW, HALF_LIVES) < STALE_RECENCY


@pytest.mark.parametrize(("uses", "expected"), [(0, 0.0), (10, 0.5), (20, 1.0), (40, 1.0)])
def test_frequency_saturates_at_20_uses(uses: int, expected: float) -> None:
    assert frequency(hit(uses=uses)) == expected


def test_relevance_is_the_fused_score_over_the_best_possible() -> None:
    settings = RankingSettings(rrf_k=60, text_weight=3.0)
    assert best_fused("hybrid", settings) == pytest.approx(4 / 61)  # first in both: 1/61 + 3/61
    assert best_fused("vector", settings) == pytest.approx(1 / 61)
    assert best_fused("text", settings) == pytest.approx(3 / 61)
    first_in_text_only = hit(fused=3 / 61)
    assert relevance(first_in_text_only, best_fused("hybrid", settings)) == pytest.approx(0.75)


def test_score_weighs_relevance_recency_and_use() -> None:
    settings = RankingSettings(rrf_k=60, text_weight=1.0, relevance=0.8, recency=0.15, frequency=0.05)
    half_of_everything = hit(fused=1 / 61, said_days_ago=180, uses=10)  # relevance 0.5 of 2/61
    assert score(half_of_everything, best=best_fused("hybrid", settings), now=NOW, settings=settings) == \
        pytest.approx(0.8 * 0.5 + 0.15 * 0.5 + 0.05 * 0.5)


def test_the_minimum_score_is_a_cosine_floor_that_half_the_query_words_can_pass() -> None:
    assert qualifies(hit(cosine=0.8), 0.8)
    assert not qualifies(hit(cosine=0.79, matched=1, terms=3), 0.8)
    assert qualifies(hit(cosine=0.1, matched=2, terms=4), 0.8)  # half the words: keyword evidence
    assert not qualifies(hit(cosine=0.1, matched=0, terms=0), 0.8)


def test_mmr_skips_a_near_copy_for_something_new() -> None:
    similar = np.array([[1.0, 0.99, 0.0], [0.99, 1.0, 0.01], [0.0, 0.01, 1.0]])  # a, a's copy, b
    scores = [1.0, 0.99, 0.5]
    assert mmr(scores, similar, 3, 1.0) == [0, 1, 2]  # λ = 1: by score alone
    # λ = 0.5: after a, the copy gets 0.5·0.99 − 0.5·0.99 = 0, b gets 0.5·0.5 − 0 = 0.25
    assert mmr(scores, similar, 3, 0.5) == [0, 2, 1]
    assert mmr(scores, similar, 2, 0.5) == [0, 2]


def test_rank_reads_the_similarities_of_the_hits_that_qualify() -> None:
    settings = replace(RankingSettings(), mmr_lambda=0.5)
    rows = [(1.0, 0.3, 0.99, 0.0), (0.3, 1.0, 0.3, 0.3), (0.99, 0.3, 1.0, 0.0), (0.0, 0.3, 0.0, 1.0)]
    hits = [hit("a", fused=2 / 61, similar=rows[0]), hit("weak", cosine=0.1, similar=rows[1]),
            hit("a2", fused=2 / 61, similar=rows[2]), hit("b", fused=1 / 61, similar=rows[3])]
    assert similarities(hits, [0, 2, 3]).tolist() == [[1.0, 0.99, 0.0], [0.99, 1.0, 0.0], [0.0, 0.0, 1.0]]
    ranked = rank(hits, top_k=2, min_score=0.8, mode="hybrid", now=NOW, settings=settings)
    assert [m.id for m in ranked] == ["a", "b"]  # "weak" under the floor; a2 is a's near copy


def test_rank_filters_scores_and_orders() -> None:
    settings = replace(RankingSettings(), mmr_lambda=1.0)
    hits = [hit("weak", fused=1 / 62, cosine=0.5), hit("old", fused=2 / 61, said_days_ago=720),
            hit("new", fused=2 / 61)]
    ranked = rank(hits, top_k=5, min_score=0.8, mode="hybrid", now=NOW, settings=settings)
    assert [m.id for m in ranked] == ["new", "old"]  # "weak" is under the floor; recency breaks the tie
    assert ranked[0].score == pytest.approx(0.8 + 0.15)


def test_defaults_are_the_documented_ones() -> None:
    ranking = load_settings({}).retrieval.ranking
    assert (ranking.rrf_k, ranking.relevance, ranking.recency, ranking.frequency, ranking.mmr_lambda) == \
        (60, 0.8, 0.15, 0.05, 0.7)
    assert ranking.half_life_days == {"identity": None, "preference": 180.0, "relationship": 365.0,
                                      "project": 60.0, "context": 7.0, "temporary": 1.0, "episode": 90.0}


def test_the_best_fused_score_counts_the_late_interaction_arm_when_it_ran() -> None:
    settings = RankingSettings(rrf_k=20, text_weight=4.0)
    assert best_fused("hybrid", settings) == pytest.approx(5 / 21)
    assert best_fused("hybrid", settings, late_weight=8.0) == pytest.approx(13 / 21)
    first_everywhere = hit("top", fused=13 / 21)
    [ranked] = rank([first_everywhere], top_k=1, min_score=0.0, mode="hybrid", now=NOW, settings=settings,
                    late_weight=8.0)
    assert ranked.score == pytest.approx(0.8 + 0.15 * 1.0)  # relevance 1, recency 1 (said now), no uses
