"""What a new fact does to the user's memories, and what a request to forget names: both
judged by the memory LLM in narrow, grammar-constrained calls, because only a model reads meaning in
every language ("is an accountant at Orvel" → "joined a start-up called Pinecrest" shares no word).

- `relate(llm, fact, candidates)`: one call per new fact, over its nearest memories: each is `same`,
  `updates` (changed, corrected, contradicted: no longer true), `detail` (the new fact says it with more
  detail) or `unrelated`. `proposals` orders the answer into actions: replace the first memory it updates,
  else refine the first it details, else ignore when one says the same; with none, the fact is added.
- `forgotten(llm, request, what, candidates)`: one call; the numbers of the candidates the request names.
- `check(llm, question, given)`: one yes/no question, the narrowest call there is. A small model
  answering for many candidates at once says `updates` far too often, and `same` for a memory about
  something else, so an answer that retires a memory (`updates`, `detail`) or drops the new fact (`same`)
  is acted on only once the model confirms it for that one pair (`confirmed`). (A check that the message
  states an extracted fact was tried and left out: a small model refused true facts and accepted injected
  instructions. What was measured: docs/FORMATION.md#what-shaped-the-calls.)

The fixed instructions (memory_proxy/prompts/memory.md, one system message for every formation call) come first, so
that a local server keeps them in its prompt cache whichever call comes next. What stays deterministic is bookkeeping: exact duplicates are
found before any call (formation/steps.py), and the flip-flop rule (only a strictly newer statement
replaces) is applied where the decision is written (formation/write.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from ..embedding.embedders import Embedder, embed_one
from ..prompts import load_prompt, render
from ..records import FactAttributes, Memory
from ..store import search
from ..store.teams import Holder
from .extract import Numbers, neutral, numbered
from .memory_llm import MemoryLLM

Action = Literal["add", "replace", "refine", "ignore", "forget"]
Relation = Literal["same", "updates", "detail", "unrelated"]
RELATIONS: tuple[Relation, ...] = ("same", "updates", "detail", "unrelated")
# A small model's other words for the same answers: read, not refused (a re-ask would say the same).
_SYNONYMS: dict[str, Relation] = {
    "contradiction": "updates", "contradicts": "updates", "update": "updates", "replaces": "updates",
    "replace": "updates", "outdated": "updates", "correction": "updates", "changes": "updates",
    "more_specific": "detail", "more specific": "detail", "refines": "detail", "refinement": "detail",
    "duplicate": "same", "identical": "same", "redundant": "same", "different": "unrelated", "none": "unrelated",
}


@dataclass
class Resolution:
    fact: str
    embedding: list[float]
    action: Action
    target_id: str | None
    reason: str
    attributes: FactAttributes = field(default_factory=FactAttributes)
    holder: Holder | None = None  # whose memories it changes: a team's; None for the job's user
    propose: bool = False  # a team's fact under TEAM_FACTS=review: kept apart for the team's editors


class _Relations(BaseModel):
    """Base of the per-size answer models: one relation per candidate, keyed "1", "2"…"""

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, value: Any) -> dict[str, Relation]:
        """Every key present, every value one of RELATIONS: a list is read in order, a wrapping object
        ("relations") is opened, an unknown word or a missing key is "unrelated"."""
        if isinstance(value, dict) and isinstance(value.get("relations"), dict | list):
            value = value["relations"]
        if isinstance(value, list):  # ["unrelated", "updates"]
            value = {str(i): v for i, v in enumerate(value, 1)}
        given = value if isinstance(value, dict) else {}
        return {field.alias or name: _relation(given.get(field.alias or name, "unrelated"))
                for name, field in cls.model_fields.items()}

    def by_number(self) -> dict[int, Relation]:
        return {int(name.removeprefix("k")): getattr(self, name) for name in type(self).model_fields}


def _relation(value: Any) -> Relation:
    text = str(value).strip().lower()
    return text if text in RELATIONS else _SYNONYMS.get(text, "unrelated")


@cache
def relations_model(n: int) -> type[_Relations]:
    """The answer model for `n` candidates: keys "1"…"n", each one of RELATIONS (a grammar on llama.cpp)."""
    fields: dict[str, Any] = {f"k{i}": (Relation, Field(alias=str(i))) for i in range(1, n + 1)}
    return create_model(f"Relations{n}", __base__=_Relations, **fields)


class Answer(BaseModel):
    """A yes/no answer; anything but a clear yes is no."""

    answer: Literal["yes", "no"] = "no"

    @field_validator("answer", mode="before")
    @classmethod
    def _yes_or_no(cls, value: Any) -> str:
        return "yes" if value is True or str(value).strip().lower() in ("yes", "true", "y", "oui", "ja", "sí", "si") else "no"


# The phrasings a small model answered best, among those tried on probe pairs (a "detail" question that asks
# whether the new fact includes the old one, not whether it says the same with more detail): the figures are
# in docs/FORMATION.md#what-shaped-the-calls.
FORGET_CANDIDATES = 10  # the user's memories nearest to a request to forget, that the model picks among

QUESTIONS = {
    "updates": "Is the old fact no longer true once the new fact is true?",
    "detail": "Does the new fact include the old fact?",
    "same": "Does the old fact include the new fact?",  # the detail question, turned round
}


class Forgotten(BaseModel):
    """The numbers of the known facts that a request to forget names."""

    forget: Numbers = Field(default_factory=list)


async def relate(llm: MemoryLLM, fact: str, candidates: list[Memory]) -> dict[int, Relation]:
    """How `fact` relates to each candidate, by its number (1-based)."""
    turn = render("relate_turn.md", fact=neutral(fact), known=numbered([m.content for m in candidates]))
    answer = await llm.structured(relations_model(len(candidates)),
                                  [{"role": "system", "content": load_prompt("memory.md")},
                                   {"role": "user", "content": turn}], purpose="relate")
    return answer.by_number()


_ORDER: tuple[tuple[Relation, Action, str], ...] = (
    ("updates", "replace", "the model: the new fact updates it"),
    ("detail", "refine", "the model: the new fact says it with more detail"),
    ("same", "ignore", "the model: already known"))


def proposals(candidates: list[Memory], relations: dict[int, Relation]
              ) -> list[tuple[Relation, Action, Memory, str]]:
    """What the model's relations propose, strongest first: updates, then details, then the same."""
    return [(relation, action, memory, why) for relation, action, why in _ORDER
            for number, memory in enumerate(candidates, 1) if relations.get(number) == relation]


async def check(llm: MemoryLLM, question: str, given: str, turn: str = "check_turn.md") -> bool:
    """One yes/no question about `given` (`turn`: the prompt that frames it, with its examples)."""
    answer = await llm.structured(Answer, [{"role": "system", "content": load_prompt("memory.md")},
                                           {"role": "user", "content": render(turn, given=given, question=question)}],
                                  purpose="check")
    return answer.answer == "yes"


async def confirmed(llm: MemoryLLM, fact: str, memory: Memory, relation: Relation) -> bool:
    """The model confirms, for this one pair, that `fact` updates or details `memory`."""
    return await check(llm, QUESTIONS[relation], f"Old fact: {neutral(memory.content)}\nNew fact: {neutral(fact)}")


async def forgotten(llm: MemoryLLM, *, request: str, what: str, candidates: list[Memory]) -> list[Memory]:
    """The candidates that a request to forget `what` names, as the model picks them."""
    turn = render("forget_turn.md", request=neutral(request), what=neutral(what),
                  known=numbered([m.content for m in candidates]))
    answer = await llm.structured(Forgotten, [{"role": "system", "content": load_prompt("memory.md")},
                                              {"role": "user", "content": turn}], purpose="forget")
    return [candidates[n - 1] for n in dict.fromkeys(answer.forget) if 1 <= n <= len(candidates)]


async def forget_candidates(pool: AsyncConnectionPool, embedder: Embedder, user_id: str, what: str) -> list[Memory]:
    """The user's own memories nearest to what a request to forget names (never the global ones, never a team's),
    whatever their score: the model picks among them."""
    vector = await embed_one(embedder, what)
    async with pool.connection() as conn:
        return await search.neighbours(conn, user_id=user_id, model=embedder.model, embedding=vector,
                                       top_k=FORGET_CANDIDATES, min_score=-1.0, include_global=False)
