"""Retrieval cases from the formation-quality users: each probe, the memories it needs, and distractors.

A user's memories are its ideal answers applied in order (as `scenarios.simulate` applies them: seeds,
then each turn's forgets and ideal facts, a fact's `replaces` retiring what it matches), each kept with the
day it was said. The memories the probe **needs** are what score.py judges the probe by: for each regex of
the user's `expect.inject` (the probe's injected block must match it), the active memories matching it.
An inject regex no active memory matches is dropped; a user with no inject regex left is not a case (counted).

Two memory stores, one question (the probe, in the user's language):
- `facts`: the formed memories, English "User …" sentences as formation writes them (names kept as typed);
- `turns`: the raw user messages, in the user's language (plus any English seeds), as a store of raw turns
  would hold them; a turn is needed when a needed fact came from it.
Each is embedded as the proxy embeds a memory, `embedding_text(text, stated_at)` ("[2 March 2026] …"), or
as the bare text with `bare=True`.

Candidates for a user: its own memories, `POOL` from other users of the SAME language and `POOL` from users
of OTHER languages (round-robin over those languages), drawn once per split, language and store from a
seeded shuffle of every user of the split (users without a probe case included), so every user of a
language faces the same pool (less its own memories).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from benchmarks.formation_quality.scenarios import User, dated, load_users, split_files
from memory_proxy.embedding.memory_document import embedding_text as dated_text

PROBE_DAY = date(2026, 11, 24)  # the day every probe is said (a fixed date: dates resolve the same every run)
POOL = 20
STORES = ("facts", "turns")


@dataclass(frozen=True)
class Memory:
    text: str  # as embedded: embedding_text(content, stated_at)
    user: str
    lang: str
    origin: int  # -1 for a seed, else the turn's index


@dataclass
class Case:
    user: str
    lang: str
    category: str
    probe: str
    memories: list[Memory]  # the user's own
    needs: list[list[int]]  # per kept inject regex: indexes into `memories` that satisfy it
    distractors: list[Memory] = field(default_factory=list)


@dataclass
class Split:
    name: str
    users: int
    cases: dict[str, list[Case]]  # store -> cases
    skipped: dict[str, int]  # store -> users with an inject regex but no case (no memory matches it)
    without_inject: int


def _when(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


def formed(user: User) -> list[tuple[str, date, int]]:
    """The active memories a perfect formation leaves before the probe: (fact, day said, origin turn or -1)."""
    start = PROBE_DAY - timedelta(days=int(user.probe.day))
    active = [(s.text, start - timedelta(days=1), -1) for s in user.seeds]
    for index, turn in enumerate(user.turns):
        said = start + timedelta(days=int(turn.day))
        for pattern in turn.forgets:
            active = [m for m in active if not re.search(pattern, m[0], re.I)]
        for fact in turn.ideal:
            text = dated(fact.fact, said)
            if fact.replaces:
                active = [m for m in active if not re.search(fact.replaces, m[0], re.I)]
            if text.lower() not in {m[0].lower() for m in active}:
                active.append((text, said, index))
    return active


def user_memories(user: User, store: str, bare: bool = False) -> tuple[list[Memory], list[list[int]]]:
    """A user's memories in `store` and, per inject regex that any of them answers, the needed ones."""
    def embedding_text(text: str, when: datetime) -> str:
        return text if bare else dated_text(text, when)

    active = formed(user)
    fact_needs = [[i for i, (text, _, _) in enumerate(active) if re.search(p, text, re.I)]
                  for p in user.expect.inject]
    if store == "facts":
        memories = [Memory(embedding_text(t, _when(d)), user.id, user.lang, o) for t, d, o in active]
        return memories, [n for n in fact_needs if n]
    start = PROBE_DAY - timedelta(days=int(user.probe.day))
    seeds = [Memory(embedding_text(s.text, _when(start - timedelta(days=1))), user.id, user.lang, -1)
             for s in user.seeds]
    turns = [Memory(embedding_text(t.user, _when(start + timedelta(days=int(t.day)))), user.id, user.lang, i)
             for i, t in enumerate(user.turns)]
    memories = seeds + turns
    needs = []
    for need in fact_needs:  # a needed seed is that seed; a needed fact from a turn is that turn's message
        origins = {active[i][2] for i in need}
        seed_texts = {active[i][0] for i in need if active[i][2] == -1}
        found = [j for j, s in enumerate(user.seeds) if s.text in seed_texts]
        found += [len(seeds) + o for o in sorted(origins) if o >= 0]
        if found:
            needs.append(found)
    return memories, needs


def _pools(users: list[User], store: str, split: str, bare: bool
           ) -> dict[str, tuple[list[Memory], list[Memory]]]:
    """Per language: a shuffled list of same-language memories and a round-robin list of other languages'."""
    by_lang: dict[str, list[Memory]] = {}
    for user in users:
        by_lang.setdefault(user.lang, []).extend(user_memories(user, store, bare)[0])
    for lang, memories in by_lang.items():
        random.Random(f"{split}-{store}-{lang}").shuffle(memories)
    pools = {}
    for lang in by_lang:
        others = [by_lang[o] for o in sorted(by_lang) if o != lang]
        mixed = [o[i] for i in range(max(map(len, others), default=0)) for o in others if i < len(o)]
        pools[lang] = (by_lang[lang], mixed)
    return pools


def load_split(split: str, bare: bool = False) -> Split:
    """The cases of a split ("dev" or "test") for both stores."""
    users = load_users(split_files(split))
    cases: dict[str, list[Case]] = {}
    skipped: dict[str, int] = {}
    for store in STORES:
        pools = _pools(users, store, split, bare)
        cases[store], skipped[store] = [], 0
        for user in users:
            if not user.expect.inject:
                continue
            memories, needs = user_memories(user, store, bare)
            if not needs:
                skipped[store] += 1
                continue
            same, other = pools[user.lang]
            distractors = [m for m in same if m.user != user.id][:POOL] + other[:POOL]
            cases[store].append(Case(user.id, user.lang, user.category, user.probe.user, memories, needs,
                                     distractors))
    return Split(split, len(users), cases, skipped, sum(not u.expect.inject for u in users))
