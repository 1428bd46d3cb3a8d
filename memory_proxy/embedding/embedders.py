"""Embeddings behind one narrow interface: `await embedder.embed(texts) -> vectors`.

Both providers speak the same wire format (`POST {base}/embeddings` with `{"model", "input"}`, answer
`data[i].embedding`): `mistral` (mistral-embed at https://api.mistral.ai/v1, the default) and `openai`
(any OpenAI-compatible server). Embedding is on every chat turn's critical path, so the request is
made with our own httpx client and parsed with `json` instead of an SDK: a fraction of either SDK's CPU
per call (the openai SDK's typed parse visits every float; docs/BENCHMARKS.md#relay-overhead); vectors
come as base64 (`encoding_format`, both APIs offer it). The SDKs stay where they earn their keep: mistralai
drives the memory LLM through instructor, off the request path. No retries: retrieval runs under a time
budget, and a failure simply means a turn without memories.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Protocol, runtime_checkable

import httpx
import numpy as np

from ..chat.upstream import Clients
from ..errors import MemoryUnavailable
from ..retrieval.late_interaction import Tokens
from ..settings import EmbeddingSettings
from ..tokens import spent, tokens_of


class Embedder(Protocol):
    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def warm_up(self) -> None:
        """Load whatever the first call would load, before the first chat turn pays for it."""


@runtime_checkable
class WordsEmbedder(Embedder, Protocol):
    """An embedder that also gives the states of a text's words (the local model: retrieval/late_interaction.py)."""

    async def embed_query(self, text: str) -> tuple[list[float], np.ndarray]: ...

    def tokens_sync(self, texts: list[str]) -> list[Tokens]: ...


class HttpEmbedder:
    def __init__(self, settings: EmbeddingSettings, clients: Clients) -> None:
        self.model = settings.model
        # The upstream's clients, shared by load (upstream.py): httpcore's per-request scan of a pool grows with the
        # connections one client holds, and every turn's embedding call on one client made it grow with concurrency.
        self._clients = clients
        self._url = f"{settings.base_url}/embeddings"
        self._headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            with self._clients.one() as client:
                response = await client.post(self._url, headers=self._headers,
                                             json={"model": self.model, "input": texts, "encoding_format": "base64"})
            response.raise_for_status()
            parsed = json.loads(response.content)
            data = parsed["data"]
            vectors = [_floats(item["embedding"]) for item in sorted(data, key=lambda item: item["index"])]
        except (httpx.HTTPError, ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise MemoryUnavailable("embedder", f"embeddings failed: {exc!r}") from exc
        if len(vectors) != len(texts):
            raise MemoryUnavailable("embedder", f"asked {len(texts)} embeddings, got {len(vectors)}")
        usage = parsed.get("usage") if isinstance(parsed, dict) else None
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        spent(total if isinstance(total, int) and total >= 0 else tokens_of(sum(len(t.encode()) for t in texts)))
        return vectors

    async def warm_up(self) -> None:
        """Nothing to load: a remote API (a warm-up call would cost a request and need the key now)."""


def _floats(embedding: str | list[float]) -> list[float]:
    """An embedding as base64 of little-endian float32 (asked for, as the OpenAI SDK asks: 4 bytes a number
    instead of ~20 characters of JSON, less CPU per query: docs/BENCHMARKS.md#relay-overhead) or as the JSON
    numbers a server that ignores `encoding_format` sends."""
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").tolist()
    return embedding


def build_embedder(settings: EmbeddingSettings, clients: Clients) -> Embedder:
    if settings.provider == "local":
        from .local_model import LocalEmbedder  # lazily: only `local` needs onnxruntime

        return LocalEmbedder(settings.model)
    return HttpEmbedder(settings, clients)


async def embed_one(embedder: Embedder, text: str) -> list[float]:
    vectors = await embedder.embed([text])
    if not vectors[0]:
        raise MemoryUnavailable("embedder", "the embeddings API returned an empty vector")
    return vectors[0]


async def embed_query(embedder: Embedder, text: str, words: bool) -> tuple[list[float], np.ndarray | None]:
    """A query's vector and, when `words` is asked for and the embedder has them (the local model), the
    states of its words for late interaction (retrieval/late_interaction.py); else None."""
    if words and isinstance(embedder, WordsEmbedder):
        return await embedder.embed_query(text)
    return await embed_one(embedder, text), None
