"""Whether a chat turn asks about the user as a whole ("what do you know about me?"): such a question is
answered from the user's profile (their newest facts, retrieval/retrieve.py), not only from the memories most
similar to it, which for a question about everything are arbitrary.

The decision is the embedder's: the query's vector is compared with questions that ask exactly that, in the nine
languages the formation benchmarks speak, and with questions that ask one thing about the user. A question is
about the user as a whole when it is close to the first (at least `similarity`) and closer to them than to the
second by at least `margin`. The rule only guards what the model says: the figures behind the two numbers, and
what a wrong guess costs (some tokens: the turn's own search results are still injected, first), are in
docs/RETRIEVAL.md#questions-about-the-user-as-a-whole.

Calibrated for the `local` embedder only (all-MiniLM-L6-v2: on 967 LoCoMo questions asked in the first person,
none is taken for one). Other embedders put related texts on other scales and were not measured here: for them
no question is taken for one, and retrieval is as before.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from ..embedding.embedders import Embedder

ABOUT_THE_USER = (
    "What do you know about me?", "What do you remember about me?", "Tell me everything you know about me.",
    "Summarize what you know about me.", "What have I told you about myself?", "Who am I?",
    "Was weißt du über mich?", "¿Qué sabes de mí?", "Que sais-tu de moi ?", "Cosa sai di me?",
    "O que você sabe sobre mim?", "Co o mnie wiesz?", "Что ты знаешь обо мне?", "私について何を知っていますか？",
)
ONE_THING = (
    "What is my dog's name?", "When did I move to Berlin?", "What should I cook tonight?", "Which car do I drive?",
    "Wie heißt meine Schwester?", "Was soll ich am Wochenende machen?", "¿Dónde trabajo ahora?",
    "¿Qué le regalo a mi madre?", "Quel est mon sport préféré ?", "Où est-ce que j'habite ?",
    "Come si chiama il mio gatto?", "Cosa cucino stasera?", "Onde eu moro agora?", "Qual é o meu trabalho?",
    "Jak ma na imię mój brat?", "Co mam dziś ugotować?", "Где я работаю?", "Что мне приготовить на ужин?",
    "私の犬の名前は何ですか？", "週末に何をすればいいですか？",
)


@dataclass(frozen=True, slots=True)
class Calibration:
    similarity: float  # least cosine with the nearest question about the user as a whole
    margin: float  # by how much it must be nearer to those than to any question about one thing


CALIBRATED = {"all-minilm-l6-v2-int8": Calibration(similarity=0.55, margin=0.10)}


class AboutUser:
    """The decision for one embedder; the examples are embedded once, on the first question (a failure then is
    "no": the turn is searched as any other, and the next turn tries again)."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._calibration = CALIBRATED.get(embedder.model)
        self._examples: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = asyncio.Lock()

    async def asks(self, vector: list[float]) -> bool:
        """Whether the question whose vector this is asks about the user as a whole."""
        if self._calibration is None:
            return False
        examples = await self._embedded()
        if examples is None:
            return False
        query = np.asarray(vector, dtype=np.float32)
        whole, one = (float((m @ query).max()) for m in examples)
        return whole >= self._calibration.similarity and whole - one >= self._calibration.margin

    async def _embedded(self) -> tuple[np.ndarray, np.ndarray] | None:
        async with self._lock:
            if self._examples is None:
                try:
                    vectors = np.asarray(await self._embedder.embed([*ABOUT_THE_USER, *ONE_THING]), dtype=np.float32)
                except Exception:  # noqa: BLE001 - the embedder's failure is the turn's search's to report
                    return None
                self._examples = vectors[:len(ABOUT_THE_USER)], vectors[len(ABOUT_THE_USER):]
            return self._examples
