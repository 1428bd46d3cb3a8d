"""Step 1 of formation: the new, permanent facts about the user in one chat turn (prompts/extract.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from ..prompts import render
from ..schemas import FactAttributes
from ..settings import FormationSettings
from .llm import MemoryLLM
from .redact import redact

MAX_FACTS_PER_TURN = 10  # per-turn cap on new memories: a runaway extraction cannot flood the store
MAX_MEMORY_BYTES = 2048  # per-memory size limit (UTF-8); a longer "fact" is dropped, never cut mid-meaning


T = TypeVar("T")
MemoryType = Literal["identity", "preference", "relationship", "project", "context", "temporary"]


class ExtractedFact(BaseModel):
    """One fact about the user, a standalone third-person sentence, with how it should be kept."""

    text: str
    type: MemoryType = "preference"
    importance: int = Field(default=5, ge=1, le=10, description="1 trivia … 10 essential for every future chat")
    confidence: float = Field(default=0.5, ge=0, le=1, description="how sure it is a lasting fact")


class ExtractedFacts(BaseModel):
    """New, lasting facts about the user."""

    memories: list[ExtractedFact] = Field(default_factory=list)


def keep(facts: list[ExtractedFact], settings: FormationSettings,
         said_at: datetime) -> list[tuple[str, FactAttributes]]:
    """The facts worth storing — importance and confidence at their thresholds (seed 003), then cleaned
    as `clean_facts` says — with the attributes stored beside them (expiry from the type's TTL)."""
    rated = [f for f in facts if f.importance >= settings.min_importance and f.confidence >= settings.min_confidence]
    kept = []
    for text, fact in _cleaned([(f.text, f) for f in rated]):
        kept.append((text, FactAttributes(memory_type=fact.type, importance=fact.importance,
                                          confidence=fact.confidence,
                                          expires_at=settings.expiry(fact.type, said_at))))
    return kept


def _bullets(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines) or "(none)"


def clean_facts(facts: list[str]) -> list[str]:
    """Redacted, trimmed, non-empty, at most MAX_MEMORY_BYTES, without repeats (case and spacing
    ignored), and at most MAX_FACTS_PER_TURN of them."""
    return [text for text, _ in _cleaned([(f, f) for f in facts])]


def _cleaned(facts: list[tuple[str, T]]) -> list[tuple[str, T]]:
    seen: set[str] = set()
    kept: list[tuple[str, T]] = []
    for fact, item in facts:
        text = redact(" ".join(fact.split())).text
        key = text.lower().rstrip(".!")
        if text and len(text.encode()) <= MAX_MEMORY_BYTES and key not in seen:
            seen.add(key)
            kept.append((text, item))
    return kept[:MAX_FACTS_PER_TURN]


async def extract_facts(llm: MemoryLLM, *, today: str, existing: list[str], context: list[str],
                        user_message: str, assistant_reply: str) -> list[ExtractedFact]:
    prompt = render("extract.md", today=today, existing_memories=_bullets(existing),
                    context=_bullets(context), user_message=user_message,
                    assistant_reply=assistant_reply or "(none)")
    result = await llm.structured(ExtractedFacts, [{"role": "user", "content": prompt}], purpose="extract")
    return result.memories
