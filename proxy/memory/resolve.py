"""What a new fact does to the user's memories: add, replace, refine or ignore (seed 001 §4.6). Pure rules.

The extraction call (memory/extract.py) may say which known fact a new one `replaces`; a small model
often does not, or names a wrong one. So the decision is taken here, by rules that read the texts and
the user's own words, and the model's pointer is one input among them, checked before it is trusted:

1. redundant: an existing memory of the same subject already holds every content word and name of the
   new fact → ignore ("User plays the violin." beside "User plays the violin in an orchestra.");
2. the model's `replaces` points at a listed fact that is related (a shared content word, the same
   sentence with another value, or the user's words are about the same kind of thing: home, job) →
   replace it (refine when the new fact holds all of its words);
3. richer: an existing memory of the same subject whose content words are all in the new fact, which
   says more → refine it ("User has a dog." → "User's dog is a beagle called Max.");
4. a new home: both say where the same one lives, in different places → replace ("I live in Montreal"
   after "User lives in Lyon"): one home at a time;
5. change: the user's words signal a change ("switched", "moved", "quit", "actually", "not …", "back
   to") and a related memory is contradicted: its old value is named in those words ("from Bun to
   Node"), or it is the same sentence with another value ("prefers tabs" / "prefers spaces"), or the
   new fact says it changed and shares more than a verb with it ("User switched to spaces…" / "User
   prefers tabs…"), or one of the two is negated ("no longer drinks coffee"), or the new fact repeats
   its names and adds some ("moved from Lyon to Montreal") → replace it;
6. otherwise → add.
Rules 3 to 5 need no model at all, so an update is kept even when the model returns no pointer, an
unknown number or `inf`. The flip-flop rule (only a strictly newer statement replaces) is applied where
the decision is written (worker.apply_resolutions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ..schemas import FactAttributes, Memory
from .evidence import Evidence, OwnWords, content_stems, names, negated, words

Action = Literal["add", "replace", "refine", "ignore", "forget", "restore"]

_CHANGE = re.compile(r"""(?ix)\b(
    switch(ed|ing)?|mov(ed|ing)|chang(ed|ing)|now|nowadays|these\s+days|any\s?more|no\s+longer|instead
  | back\s+to|actually|misspoke|mistake|correction|sorry|quit|stopped|left|used\s+to|not|no|never|new
  | became|become|turned|rather)\b""")
_HOME = re.compile(r"(?i)\b(lives?|living|moved|moves|moving|relocated|relocating|based|resides?)\s+(in|to|near|at)\b")
# What a fact is about, for the common single-valued ones: a memory of that kind may be replaced when the
# user's own words are about the same kind ("To be more precise about my job: …" for "User works in tech.").
_KINDS = {
    "home": re.compile(r"(?i)\b(lives?|living|lived|moved?|moving|relocat\w*|home|city|town|address|based)\b"),
    "job": re.compile(r"(?i)\b(works?|working|worked|job|jobs|career|profession|occupation|employe[rd]|company)\b"),
}
_CHANGED = re.compile(r"(?i)\b(switched|moved|changed|quit|stopped|left|gave\s+up|no\s+longer|any\s?more)\b")
# Verbs that many unrelated facts share ("plays piano" / "plays chess"): sharing one of them alone does
# not make two facts about the same thing.
_COMMON_VERBS = frozenset(content_stems(
    "use uses like likes love loves live lives work works play plays go goes make makes do does have has drink "
    "drinks eat eats write writes read reads watch watches listen listens prefer prefers want wants need needs "
    "get gets take takes spend spends enjoy enjoys switched moved changed quit stopped left", keep_generic=True))
FRAME_MAX_SPAN = 5  # words that may differ between "the same sentence with another value"


@dataclass
class Resolution:
    fact: str
    embedding: list[float]
    action: Action
    target_id: str | None
    reason: str
    attributes: FactAttributes = field(default_factory=FactAttributes)
    restored: str | None = None  # restore: the retired memory that comes back (target_id: what it replaces)


def _stems(text: str) -> set[str]:
    return set(content_stems(text))


def _subject(text: str) -> str | None:
    """The thing of the user's a fact is about ("User's dog is …" → the stem of "dog"), or None when the
    fact is about the user themself."""
    found = words(text)
    return content_stems(found[1], keep_generic=True)[0] if len(found) > 1 and found[0] == "user's" else None


def _same_subject(fact: str, memory: str) -> bool:
    """About the same one: both about the user, or the new fact is about something the memory names
    ("User's dog is a beagle." and "User has a dog."), not about someone else ("User's brother …")."""
    subject = _subject(fact)
    return subject == _subject(memory) or (subject is not None and subject in _stems(memory))


def same_frame(a: str, b: str) -> bool:
    """The same sentence with another value: "User lives in Lyon." / "User lives in Montreal."."""
    x, y = words(a), words(b)
    prefix = 0
    while prefix < min(len(x), len(y)) and x[prefix] == y[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(x), len(y)) - prefix and x[-1 - suffix] == y[-1 - suffix]:
        suffix += 1
    x_span, y_span = len(x) - prefix - suffix, len(y) - prefix - suffix
    shared = x[:prefix] + x[len(x) - suffix:]
    return (0 < x_span <= FRAME_MAX_SPAN and 0 < y_span <= FRAME_MAX_SPAN
            and len([w for w in shared if w not in ("user", "user's")]) >= 2)


def related(a: str, b: str) -> bool:
    return bool(_stems(a) & _stems(b)) or same_frame(a, b)


def _same_thing(a: str, b: str) -> bool:
    """Related by more than a common verb: a shared noun, name or other content word."""
    return bool((_stems(a) & _stems(b)) - _COMMON_VERBS) or bool(set(names(a)) & set(names(b)))


def _home_elsewhere(fact: str, memory: str) -> bool:
    """Both say where the same one lives (the user, or "User's sister"), in different places: one home at
    a time, so the newer statement wins without any change word ("I live in Montreal" after "Lyon")."""
    new_places, old_places = set(names(fact)), set(names(memory))
    return (_subject(fact) == _subject(memory) and bool(_HOME.search(fact)) and bool(_HOME.search(memory))
            and bool(new_places) and bool(old_places) and not new_places & old_places)


def _redundant(fact: str, memory: str) -> bool:
    return (_same_subject(fact, memory) and _stems(fact) <= _stems(memory)
            and set(names(fact)) <= set(names(memory)))


def _richer(fact: str, memory: str) -> bool:
    old = _stems(memory)
    return (_same_subject(fact, memory) and bool(old) and old < _stems(fact)
            and set(names(memory)) <= set(names(fact)))


def _pointer_holds(fact: str, memory: str, said: Evidence, statements: str) -> bool:
    """The model's `replaces` counts when the two facts are related, when the user's words name
    everything the old one says ("My dog is a beagle called Max" for "User has a dog"), when they are
    about the same kind of thing (home, job), or when the new fact itself says something changed ("User
    switched to a Pixel 8": two signals agree); never for an unrelated memory ("User has a cat" does not
    replace "User lives in Berlin")."""
    old = _stems(memory)
    return (related(fact, memory) or (bool(old) and old <= said.stems) or bool(_CHANGED.search(fact))
            or any(kind.search(memory) and kind.search(statements) for kind in _KINDS.values()))


def _contradicted(fact: str, memory: str, said: Evidence) -> str | None:
    """Why `memory` no longer holds once the user said `fact` with a change word, or None."""
    if not related(fact, memory):
        return None
    old_values = _stems(memory) - _stems(fact)
    if old_values & said.stems:
        return f"the user changed it: {', '.join(sorted(old_values & said.stems))} is no longer so"
    if same_frame(fact, memory):
        return "the same statement with a new value"
    if _CHANGED.search(fact) and _same_thing(fact, memory):
        return "the new fact says it changed"
    if negated(fact) != negated(memory) and _same_thing(fact, memory):
        return "the new fact negates it"
    old_names, new_names = set(names(memory)), set(names(fact))
    if old_names and old_names < new_names:
        return "the new fact says where it went from here"
    return None


def decide(fact: str, *, known: list[Memory], neighbors: list[Memory], replaces: int,
           said: OwnWords) -> tuple[Action, Memory | None, str]:
    """The action for one new fact, the memory it acts on, and why (the module docstring's rules)."""
    candidates = list({m.id: m for m in [*known, *neighbors]}.values())
    evidence = Evidence.of([said.statements])
    for memory in candidates:
        if _redundant(fact, memory.content):
            return "ignore", memory, "already known"
    target = known[replaces - 1] if 1 <= replaces <= len(known) else None
    if target and _pointer_holds(fact, target.content, evidence, said.statements):
        action: Action = "refine" if _stems(target.content) <= _stems(fact) else "replace"
        return action, target, "the model said the new fact replaces it"
    richer = [m for m in candidates if _richer(fact, m.content)]
    if richer:
        return "refine", max(richer, key=lambda m: len(_stems(m.content))), "the new fact says more"
    for memory in candidates:
        if _home_elsewhere(fact, memory.content):
            return "replace", memory, "a new home"
    if _CHANGE.search(said.statements):
        for memory in candidates:
            why = _contradicted(fact, memory.content, evidence)
            if why:
                return "replace", memory, why
    return "add", None, "new information"
