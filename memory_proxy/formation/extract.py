"""The extraction call of a formation job: the new lasting facts of a turn, each with its type, and what
the user asks to forget, if anything (memory_proxy/prompts/memory.md, then memory_proxy/prompts/extract_turn.md).

The fixed instructions, shared by every formation call, are the system message and come first, so that a local server (llama.cpp,
Ollama) reuses them from its prompt cache; what changes per turn comes last. The reply is read
leniently: a small model's usual deviations (a bare list, strings instead of objects, another key, an
unknown type, a stray `replaces`) are mapped onto the schema rather than failing the call, because a
re-ask at temperature 0 returns the same answer. Only a reply that is not JSON at all fails (instructor
re-asks once; then the job is retried like any LLM failure).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from ..prompts import load_prompt, render
from ..settings import MEMORY_TYPES
from .memory_llm import MemoryLLM

_FACT_KEYS = ("fact", "text", "memory", "content", "statement")
MAX_FORGET_CHARS = 200
SECRET = "secret"  # the type the model gives a fact that holds a secret: formation drops it, whatever it says


class ExtractedFact(BaseModel):
    """One new fact about the user."""

    fact: str = Field(description='one short sentence that starts with "User"')
    type: str = Field(default="preference",
                      description=f"{', '.join(MEMORY_TYPES[:-1])} or {MEMORY_TYPES[-1]}; {SECRET} when the fact "
                                  "holds a password, code, PIN, key, card or ID number, or a security answer")

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> str:
        text = str(value).strip().lower()
        return text if text in (*MEMORY_TYPES, SECRET) else "preference"


class Extraction(BaseModel):
    """The new lasting facts of the user's message (an empty list when there are none), and what the user
    asks to forget ("" when nothing)."""

    facts: list[ExtractedFact] = Field(default_factory=list)
    forget: str = Field(default="", description="what the user asks to forget, in a few words, or empty")

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, value: Any) -> dict[str, Any]:
        forget: Any = ""
        if isinstance(value, dict):
            forget = value.get("forget") or ""
            items = next((value[k] for k in ("facts", "memories", "new_facts") if k in value), None)
            if items is None and any(k in value for k in _FACT_KEYS):
                items = [value]  # one fact, not wrapped in a list
        else:
            items = value
        if isinstance(forget, list):  # ["my job"]
            forget = " ".join(str(f) for f in forget)
        return {"facts": [fact for item in (items if isinstance(items, list) else []) if (fact := _fact(item))],
                "forget": str(forget).strip()[:MAX_FORGET_CHARS]}


def _fact(item: Any) -> dict[str, Any] | None:
    """One list item as a fact object, or None when it holds no fact text."""
    if isinstance(item, str):
        item = {"fact": item}
    if not isinstance(item, dict):
        return None
    text = next((item[k] for k in _FACT_KEYS if isinstance(item.get(k), str) and item[k].strip()), None)
    return {"fact": text.strip(), "type": item.get("type", "preference")} if text else None


def neutral(text: str) -> str:
    """The user's text with angle brackets replaced: nothing inside it can close or open a prompt tag."""
    return text.replace("<", "‹").replace(">", "›")


def numbered(texts: list[str]) -> str:
    """Known facts as the prompts list them: "[1] …" lines, or "none"."""
    return "\n".join(f"[{i}] {neutral(text)}" for i, text in enumerate(texts, 1)) or "none"


def _numbers(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [int(v) for v in items if isinstance(v, int | str) and str(v).strip().isdigit()]


# The numbers a model answers of what a prompt listed `numbered` (a part, a fact): a bare number, digits in a
# string, a list of either; anything else is left out.
Numbers = Annotated[list[int], BeforeValidator(_numbers)]


async def extract_facts(llm: MemoryLLM, *, today: str, before: str, message: str, teams: str = "") -> Extraction:
    """The call reads the message alone, not the user's memories: a small model shown known facts copies
    them instead of the news. Comparing with what is known is the relate call's (formation/resolve.py). `teams`:
    for a user in a team, what the call is told of their teams (formation/team_facts.teams_block)."""
    turn = render("extract_turn.md", today=today, teams=teams, before=neutral(before) or "none",
                  message=neutral(message))
    return await llm.structured(Extraction, [{"role": "system", "content": load_prompt("memory.md")},
                                             {"role": "user", "content": turn}], purpose="extract")
