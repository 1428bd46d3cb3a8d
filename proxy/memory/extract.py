"""The one memory-LLM call of a formation job: the new facts of a turn, each with its type and the
known fact it replaces (prompts/extract.md, then prompts/extract_turn.md).

The fixed instructions are the system message and come first, so that a local server (llama.cpp,
Ollama) reuses them from its prompt cache; what changes per turn comes last. The reply is read
leniently: a small model's usual deviations (a bare list, strings instead of objects, another key, an
unknown type, `"replaces": 5e981234` or `"[2]"`) are mapped onto the schema rather than failing the
call, because a re-ask at temperature 0 returns the same answer. Only a reply that is not JSON at all
fails (instructor re-asks once; then the job is retried like any LLM failure).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from ..prompts import load_prompt, render
from ..settings import MEMORY_TYPES
from .llm import MemoryLLM

_NUMBER = re.compile(r"\d{1,3}")
_FACT_KEYS = ("fact", "text", "memory", "content", "statement")


class ExtractedFact(BaseModel):
    """One new fact about the user."""

    fact: str = Field(description='one short sentence that starts with "User"')
    type: str = Field(default="preference",
                      description=f"{', '.join(MEMORY_TYPES[:-1])} or {MEMORY_TYPES[-1]}")
    replaces: int = Field(default=0, description="number of the known fact it changes, 0 for none")

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> str:
        text = str(value).strip().lower()
        return text if text in MEMORY_TYPES else "preference"

    @field_validator("replaces", mode="before")
    @classmethod
    def _small_number(cls, value: Any) -> int:
        """A listed fact's number, or 0: `inf`, 5e981234, "[2]", null and words all map to a number or 0."""
        if isinstance(value, bool) or value is None:
            return 0
        if isinstance(value, int | float):
            return int(value) if math.isfinite(value) and value == int(value) and 0 <= value < 1000 else 0
        match = _NUMBER.search(str(value))
        return int(match.group()) if match else 0


class ExtractedFacts(BaseModel):
    """The new lasting facts of the user's message; an empty list when there are none."""

    facts: list[ExtractedFact] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, value: Any) -> dict[str, list[dict[str, Any]]]:
        if isinstance(value, dict):
            items = next((value[k] for k in ("facts", "memories", "new_facts") if k in value), None)
            if items is None and any(k in value for k in _FACT_KEYS):
                items = [value]  # one fact, not wrapped in a list
        else:
            items = value
        return {"facts": [fact for item in (items if isinstance(items, list) else []) if (fact := _fact(item))]}


def _fact(item: Any) -> dict[str, Any] | None:
    """One list item as a fact object, or None when it holds no fact text."""
    if isinstance(item, str):
        item = {"fact": item}
    if not isinstance(item, dict):
        return None
    text = next((item[k] for k in _FACT_KEYS if isinstance(item.get(k), str) and item[k].strip()), None)
    return {**item, "fact": text.strip()} if text else None


def _neutral(text: str) -> str:
    """The user's text with angle brackets replaced: nothing inside it can close or open a prompt tag."""
    return text.replace("<", "‹").replace(">", "›")


async def extract_facts(llm: MemoryLLM, *, today: str, known: list[str], before: str,
                        message: str) -> list[ExtractedFact]:
    known_lines = "\n".join(f"[{i}] {text}" for i, text in enumerate(known, 1)) or "none"
    turn = render("extract_turn.md", today=today, known=known_lines, before=_neutral(before) or "none",
                  message=_neutral(message))
    result = await llm.structured(ExtractedFacts, [{"role": "system", "content": load_prompt("extract.md")},
                                                   {"role": "user", "content": turn}], purpose="extract")
    return result.facts
