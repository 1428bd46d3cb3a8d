"""Step 1 of formation: the new, permanent facts about the user in one chat turn (prompts/extract.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..prompts import render
from .llm import MemoryLLM
from .redact import redact

MAX_FACTS_PER_TURN = 10  # per-turn cap on new memories: a runaway extraction cannot flood the store
MAX_MEMORY_BYTES = 2048  # per-memory size limit (UTF-8); a longer "fact" is dropped, never cut mid-meaning


class ExtractedFacts(BaseModel):
    """New, permanent facts about the user, each a standalone third-person sentence."""

    memories: list[str] = Field(default_factory=list)


def _bullets(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines) or "(none)"


def clean_facts(facts: list[str]) -> list[str]:
    """Redacted, trimmed, non-empty, at most MAX_MEMORY_BYTES, without repeats (case and spacing ignored), and at
    most MAX_FACTS_PER_TURN of them."""
    seen: set[str] = set()
    kept: list[str] = []
    for fact in facts:
        text = redact(" ".join(fact.split())).text
        key = text.lower().rstrip(".!")
        if text and len(text.encode()) <= MAX_MEMORY_BYTES and key not in seen:
            seen.add(key)
            kept.append(text)
    return kept[:MAX_FACTS_PER_TURN]


async def extract_facts(llm: MemoryLLM, *, today: str, existing: list[str], context: list[str],
                        user_message: str, assistant_reply: str) -> list[str]:
    prompt = render("extract.md", today=today, existing_memories=_bullets(existing),
                    context=_bullets(context), user_message=user_message,
                    assistant_reply=assistant_reply or "(none)")
    result = await llm.structured(ExtractedFacts, [{"role": "user", "content": prompt}], purpose="extract")
    return clean_facts(result.memories)
