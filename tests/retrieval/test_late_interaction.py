"""retrieval/late_interaction.py: MaxSim over packed word states (hand-computed cases; its arm in the fusion: test_index.py)."""

from __future__ import annotations

import numpy as np
import pytest

from memory_proxy.retrieval.late_interaction import Tokens, maxsim


def unit(*rows: list[float]) -> np.ndarray:
    array = np.array(rows, dtype=np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def test_packing_keeps_each_state_within_a_step_of_its_scale() -> None:
    states = unit([3.0, -4.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0])
    packed = Tokens.pack(states)
    assert packed.codes.dtype == np.int8 and packed.nbytes == 3 * 3 + 3 * 4
    restored = packed.codes.astype(np.float32) * packed.scales[:, None]
    assert np.abs(restored - states).max() <= packed.scales.max() / 2 + 1e-7
    assert Tokens.pack(np.zeros((1, 3), dtype=np.float32)).codes.tolist() == [[0, 0, 0]]  # no division by 0


def test_maxsim_is_the_mean_over_query_words_of_their_best_match() -> None:
    query = unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
    both = Tokens.pack(unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]))  # each query word found: 1
    half = Tokens.pack(unit([1.0, 0.0, 0.0]))  # first word 1, second 0 → 0.5
    near = Tokens.pack(unit([0.0, 3.0, 4.0]))  # first 0, second 0.6 → 0.3
    scores = maxsim(query, [both, None, half, near, Tokens.pack(np.zeros((0, 3), dtype=np.float32))])
    assert scores[[0, 2, 3]] == pytest.approx([1.0, 0.5, 0.3], abs=0.01)
    assert np.isneginf(scores[1]) and np.isneginf(scores[4])  # no states: not ranked by this arm


def test_an_empty_query_or_other_dimensions_rank_nothing() -> None:
    memory = Tokens.pack(unit([1.0, 0.0, 0.0]))
    assert np.isneginf(maxsim(np.zeros((0, 3), dtype=np.float32), [memory])).all()
    assert np.isneginf(maxsim(unit([1.0, 0.0]), [memory])).all()

