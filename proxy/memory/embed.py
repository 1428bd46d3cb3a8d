"""Embedding providers behind one narrow interface: `await embedder.embed(texts) -> vectors`.

`mistral`: mistral-embed through the `mistralai` SDK. `openai`: any OpenAI-compatible `/v1/embeddings`
through the `openai` SDK. Both are handed an `httpx.AsyncClient` we own: mistralai 3.x would otherwise
build its own client on `httpx2`, which respx cannot intercept in tests. SDK retries are off: retrieval
runs under a time budget, and a failure simply means a turn without memories.
"""

from __future__ import annotations

from typing import Protocol

import httpx
import openai
from mistralai.client import Mistral

from ..errors import MemoryUnavailable
from ..settings import EmbeddingSettings


class Embedder(Protocol):
    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class MistralEmbedder:
    def __init__(self, settings: EmbeddingSettings, http_client: httpx.AsyncClient) -> None:
        self.model = settings.model
        server_url = settings.base_url.removesuffix("/v1")  # the SDK adds /v1 to its paths
        self._client = Mistral(api_key=settings.api_key, server_url=server_url, async_client=http_client)  # type: ignore[arg-type]  # httpx, not httpx2: same protocol

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.embeddings.create_async(model=self.model, inputs=texts)
        except Exception as exc:  # SDK, HTTP and validation errors alike: translated at the boundary
            raise MemoryUnavailable("embedder", f"mistral embeddings failed: {exc!r}") from exc
        return [item.embedding for item in sorted(response.data, key=lambda d: d.index or 0)
                if item.embedding is not None]


class OpenAIEmbedder:
    def __init__(self, settings: EmbeddingSettings, http_client: httpx.AsyncClient) -> None:
        self.model = settings.model
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url, api_key=settings.api_key or "unused",
            http_client=http_client, max_retries=0,
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.embeddings.create(model=self.model, input=texts)
        except Exception as exc:
            raise MemoryUnavailable("embedder", f"openai-compatible embeddings failed: {exc!r}") from exc
        return [item.embedding for item in sorted(response.data, key=lambda d: d.index)]


def build_embedder(settings: EmbeddingSettings, http_client: httpx.AsyncClient) -> Embedder:
    if settings.provider == "openai":
        return OpenAIEmbedder(settings, http_client)
    return MistralEmbedder(settings, http_client)


async def embed_one(embedder: Embedder, text: str) -> list[float]:
    vectors = await embedder.embed([text])
    if len(vectors) != 1 or not vectors[0]:
        raise MemoryUnavailable("embedder", f"expected one embedding, got {len(vectors)}")
    return vectors[0]
