"""Which parts of the user's message are not their own words: a narrow memory-LLM call, a guard that only
removes (memory_proxy/prompts/provenance_turn.md).

`own_words` (formation/evidence.py) leaves out what has a form: the RAG template's documents, code, quotes,
separated blocks, English lines addressed to a machine. Text pasted with no separator ("can you shorten
this email: Hi Tom, I moved to Porto…") and an injection in another language have no form a rule can
see in every language; a model reads them. The call is shown the parts that own_words kept, numbered (a
part is a sentence, or the text on either side of a colon that ends a request: "shorten this email:" |
"Hi Tom, …"), and answers the numbers of the parts that are not the user speaking for themselves (pasted
or forwarded text, someone else's words, lines addressed to an AI or a memory). Those parts join
`left_out`, so that no fact may come from them (grounding refuses their names and numbers).

It can only remove: whatever the model answers, every part it keeps is one own_words kept. It runs only
where it can matter: a message of at least MIN_PARTS parts (one part is either all the user's or all
pasted, and a lone paste with no words of the user's around it cannot be told apart by anyone). A call
that fails or cannot be read leaves own_words' result as it is and the job goes on (memory never breaks
on this guard); the outcome is counted (memory_proxy_provenance_total).

Off by default (FORMATION_PROVENANCE_CHECK): a small memory model removed the user's own words too, whatever
the answer's form (benchmarks/provenance; the figures: docs/FORMATION.md, "Optional provenance call"). A
memory model is worth turning it on for once `python -m benchmarks.provenance --llm-url …` shows it loses
nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import MemoryUnavailable
from ..observability import PROVENANCE_CHECKS
from ..prompts import load_prompt, render
from .evidence import OwnWords
from .extract import Numbers, neutral
from .memory_llm import MalformedReply, MemoryLLM

MIN_PARTS = 2
MAX_PARTS = 40  # parts shown to the model; those past it are kept as own_words kept them
_AFTER_COLON = re.compile(r"(?<=[:：])\s+(?=\S)")  # "shorten this email: Hi Tom, …"

Outcome = Literal["removed", "kept", "fallback", "not_needed"]


class NotOwn(BaseModel):
    """The numbers of the parts that are not the user's own words."""

    not_own: Numbers = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Checked:
    said: OwnWords
    outcome: Outcome
    error: str = ""  # why the call fell back, for the job's log


def parts(said: OwnWords) -> list[str]:
    """The user's sentences, each cut after a colon followed by more text."""
    return [p.strip() for sentence in said.sentences for p in _AFTER_COLON.split(sentence) if p.strip()]


async def not_own(llm: MemoryLLM, shown: list[str]) -> set[int]:
    """The numbers (1-based) of the parts the model says are not the user's own words."""
    numbered = "\n".join(f"[{i}] {neutral(part)}" for i, part in enumerate(shown, 1))
    answer = await llm.structured(NotOwn, [{"role": "system", "content": load_prompt("memory.md")},
                                           {"role": "user", "content": render("provenance_turn.md",
                                                                              parts=numbered)}],
                                  purpose="provenance")
    return {n for n in answer.not_own if 1 <= n <= len(shown)}


async def checked(llm: MemoryLLM, said: OwnWords) -> Checked:
    """`said` less the parts the model says are not the user's (see the module docstring), counted."""
    result = await _checked(llm, said)
    PROVENANCE_CHECKS.labels(result.outcome).inc()
    return result


async def _checked(llm: MemoryLLM, said: OwnWords) -> Checked:
    found = parts(said)
    if len(found) < MIN_PARTS:
        return Checked(said, "not_needed")
    try:
        removed = await not_own(llm, found[:MAX_PARTS])
    except (MalformedReply, MemoryUnavailable) as exc:
        return Checked(said, "fallback", str(exc)[:200])
    if not removed:
        return Checked(said, "kept")
    kept = tuple(p for i, p in enumerate(found, 1) if i not in removed)
    left_out = "\n".join(t for t in (said.left_out, *(found[i - 1] for i in sorted(removed))) if t)
    return Checked(OwnWords(kept, left_out), "removed")
