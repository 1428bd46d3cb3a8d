"""embedding/embedders.py: the embeddings request, in either wire format a server may answer."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest
import respx

from memory_proxy.chat.upstream import Clients
from memory_proxy.embedding.embedders import HttpEmbedder
from memory_proxy.errors import MemoryUnavailable
from memory_proxy.settings import EmbeddingSettings, load_settings

URL = "http://embed.test/v1"
VECTOR = [0.25, -1.5, 3.0, 0.1]


def settings() -> EmbeddingSettings:
    return load_settings({"EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": URL, "EMBEDDING_MODEL": "m",
                          "UPSTREAM_BASE_URL": "http://up.test/v1"}).embedding


def answer(embedding: Any) -> httpx.Response:
    return httpx.Response(200, json={"data": [{"index": 0, "embedding": embedding}]})


@pytest.mark.parametrize("wire", ["base64", "floats"])
async def test_a_vector_arrives_as_base64_or_as_numbers(wire: str) -> None:
    as_base64 = base64.b64encode(np.asarray(VECTOR, dtype="<f4").tobytes()).decode()
    with respx.mock() as router:
        route = router.post(f"{URL}/embeddings").mock(answer(as_base64 if wire == "base64" else VECTOR))
        async with httpx.AsyncClient() as client:
            vectors = await HttpEmbedder(settings(), Clients([client])).embed(["hello"])
    assert json.loads(route.calls[0].request.content)["encoding_format"] == "base64"
    assert vectors == [pytest.approx(VECTOR, abs=1e-6)]


@pytest.mark.parametrize("bad", ["not base64!", "AAA="])  # not base64; 2 bytes, not a float32
async def test_a_malformed_vector_is_an_embedder_failure(bad: str) -> None:
    with respx.mock() as router:
        router.post(f"{URL}/embeddings").mock(answer(bad))
        async with httpx.AsyncClient() as client:
            with pytest.raises(MemoryUnavailable):
                await HttpEmbedder(settings(), Clients([client])).embed(["hello"])
