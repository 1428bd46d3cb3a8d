"""Step 2 of formation: for each new fact, add / replace / refine / ignore (seed 001 §4.6).

Cheap cases are settled without the LLM: an exact duplicate (same normalized text) is ignored, and a fact
with no existing memory near it is added. All other facts go to the LLM in one batched call, so a turn
costs about two LLM calls (extract + resolve) whatever the number of facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from ..prompts import render
from ..schemas import FactAttributes, Memory
from .llm import MemoryLLM

Action = Literal["add", "replace", "refine", "ignore"]


@dataclass
class Candidate:
    fact: str
    embedding: list[float]
    duplicate_of: str | None = None  # id of a memory of this user with the same normalized text
    neighbors: list[Memory] = field(default_factory=list)  # nearest existing memories of this user
    attributes: FactAttributes = field(default_factory=FactAttributes)  # type, importance… (stored with it)


@dataclass
class Resolution:
    fact: str
    embedding: list[float]
    action: Action
    target_id: str | None
    reason: str
    attributes: FactAttributes = field(default_factory=FactAttributes)


class Decision(BaseModel):
    candidate: int
    action: Action
    target_id: str | None = None
    reason: str = ""


class Decisions(BaseModel):
    """One decision per new fact, in the order given."""

    decisions: list[Decision]


def describe(candidates: list[Candidate]) -> str:
    blocks = []
    for i, candidate in enumerate(candidates):
        lines = [f"[{i}] New fact: {json.dumps(candidate.fact, ensure_ascii=False)}"]
        lines += [f"    Existing: (id {m.id}) {json.dumps(m.content, ensure_ascii=False)}" for m in candidate.neighbors]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _checked(candidate: Candidate, decision: Decision | None) -> Resolution:
    """The LLM's decision, kept only if it names one of the fact's own neighbours when it needs a target."""
    if decision is None:
        return Resolution(candidate.fact, candidate.embedding, "add", None, "no decision returned: kept as new")
    targets = {m.id for m in candidate.neighbors}
    if decision.action in ("replace", "refine") and decision.target_id not in targets:
        return Resolution(candidate.fact, candidate.embedding, "add", None,
                          f"{decision.action} named an unknown memory: kept as new")
    target = decision.target_id if decision.target_id in targets else None
    return Resolution(candidate.fact, candidate.embedding, decision.action, target,
                      decision.reason or decision.action)


async def resolve(llm: MemoryLLM, candidates: list[Candidate]) -> list[Resolution]:
    resolutions: dict[int, Resolution] = {}
    to_ask: list[int] = []
    for i, candidate in enumerate(candidates):
        if candidate.duplicate_of:
            resolutions[i] = Resolution(candidate.fact, candidate.embedding, "ignore", candidate.duplicate_of,
                                        "exact duplicate")
        elif not candidate.neighbors:
            resolutions[i] = Resolution(candidate.fact, candidate.embedding, "add", None, "new information")
        else:
            to_ask.append(i)
    if to_ask:
        asked = [candidates[i] for i in to_ask]
        prompt = render("resolve.md", candidates=describe(asked))
        answer = await llm.structured(Decisions, [{"role": "user", "content": prompt}], purpose="resolve")
        by_index = {d.candidate: d for d in answer.decisions if 0 <= d.candidate < len(asked)}
        for position, i in enumerate(to_ask):
            resolutions[i] = _checked(candidates[i], by_index.get(position))
    for i, candidate in enumerate(candidates):
        resolutions[i].attributes = candidate.attributes
    return [resolutions[i] for i in range(len(candidates))]
