"""How a chat turn becomes memories: every rule of formation, in order, in one place.

1. Only the user's own words count (memory/evidence.py): pasted documents, RAG context, code, quotes,
   lines addressed to a machine, hypotheticals and jokes are left out before any model sees the turn.
2. A request to forget ("please forget that I live in Lyon") retires the memories it names (audited as
   `forget`); that sentence is not a source of facts. "I'm back to tabs" brings back the memory that a
   later one replaced, when the user's words restate it (audited as `restore`).
3. A turn that cannot state a fact about the user (memory/heuristics.py) stops here: no LLM call.
4. One LLM call (memory/extract.py) reads the own words with the user's nearest memories, numbered.
5. A fact is kept only if it is about the user ("User …"), held no secret (memory/content.py), fits the
   size limit, and rests on the user's own words (evidence.supported): a copied example, an invented
   detail, a fact from the assistant or from a pasted document is dropped, and logged as such.
6. Each kept fact is resolved against the user's memories (memory/resolve.py): add, replace, refine or
   ignore. The worker writes the outcome in one transaction with the job's completion.

Step 1–3 and 5–6 are deterministic, so they hold whatever model the user runs; the model only proposes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from ..schemas import FactAttributes, Memory
from ..settings import FormationSettings
from ..store import memories, search
from ..store.scope import user_scope
from .content import MAX_FACTS_PER_TURN, Content, memory_content, same_text_key
from .document import embedding_text
from .embed import Embedder, embed_one
from .evidence import OwnWords, content_stems, forget_target, own_words, supported, words
from .extract import ExtractedFact, extract_facts
from .heuristics import in_first_person, trivial_turn
from .llm import MemoryLLM
from .resolve import Resolution, decide

BEFORE_CHARS = 300  # of the assistant's previous message, shown for reference (answers to its question)
LONG_MESSAGE_CHARS = 400  # past this, the model reads only the sentences in the first person
MAX_FACT_WORDS = 24  # a longer "fact" is a paraphrased passage, not one fact
FORGET_CANDIDATES = 10

_ABOUT_USER = re.compile(r"^(the\s+)?user\b", re.I)
# What the user asked for, not what they are: "User asks how to…", "User should pack…".
_REQUEST_FACT = re.compile(r"(?i)^user\s+(asks|asked|is\s+asking|wants\s+to\s+know|wonders|requests|should|"
                           r"needs\s+(help|to\s+know)|would\s+like\s+(help|to\s+know))\b")
# A state of the moment: kept as `temporary` (one day), whatever type the model gave it. A time word, or
# a passing condition ("has a cold", "is tired"; "has migraines" or "likes cold weather" are not).
_NOW = re.compile(r"""(?ix)\b(today|tonight|right\s+now|at\s+the\s+moment|this\s+(morning|afternoon|evening)|delayed
  |(has|have|caught|got)\s+(a\s+)?(cold|flu|fever|headache|migraine|hangover|jet\s?lag)
  |is\s+(sick|ill|tired|exhausted|sleepy|hungry|bored|in\s+bed|stuck|waiting|on\s+(the|their|his|her)\s+way))\b""")
_BACK_TO = re.compile(r"(?i)\bback\s+to\b")
_SINGULAR_SELF = frozenset({"i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"})


@dataclass
class Formation:
    """What one turn does: the decisions to write, and what was seen on the way (for the log)."""

    resolutions: list[Resolution] = field(default_factory=list)
    extracted: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)  # {"fact", "why"}
    skipped: str | None = None  # why no LLM call was made, if none was


@dataclass(frozen=True)
class Turn:
    user_id: str
    said_at: datetime
    payload: dict[str, Any]


async def form(turn: Turn, *, pool: AsyncConnectionPool, embedder: Embedder, llm: MemoryLLM,
               settings: FormationSettings) -> Formation:
    said = own_words(turn.payload.get("user_message", ""))
    formation = Formation()
    forget = forget_target(said)
    if forget:
        sentence, what = forget
        formation.resolutions += await _forgotten(turn, what, pool=pool, embedder=embedder)
        said = OwnWords(tuple(s for s in said.sentences if s != sentence), said.english)
    formation.resolutions += await _brought_back(turn, said, pool=pool)
    if not said.text or (settings.skip_trivial and trivial_turn(said.text)):
        formation.skipped = "no statement" if forget else "trivial turn"
        return formation

    known = await _nearest(turn.user_id, said.text, pool=pool, embedder=embedder, top_k=settings.neighbors)
    facts = await extract_facts(llm, today=turn.said_at.date().isoformat(), known=[m.content for m in known],
                                before=_assistant_before(turn.payload), message=_focused(said))
    formation.extracted = len(facts)
    kept = _kept(facts, said, known, formation.dropped)
    if not kept:
        return formation
    vectors = await embedder.embed([embedding_text(text, turn.said_at) for text, _ in kept])
    async with pool.connection() as conn, user_scope(conn, turn.user_id):
        for (text, fact), vector in zip(kept, vectors, strict=True):
            memory_type = "temporary" if _NOW.search(text) else fact.type  # "…tired today" is gone tomorrow
            attributes = FactAttributes(memory_type=memory_type,
                                        expires_at=settings.expiry(memory_type, turn.said_at))
            same = await memories.find_same_text(conn, turn.user_id, text)
            if same:
                formation.resolutions.append(Resolution(text, vector, "ignore", same, "exact duplicate", attributes))
                continue
            neighbors = await search.neighbours(conn, user_id=turn.user_id, model=embedder.model,
                                                embedding=vector, top_k=settings.neighbors, min_score=-1.0,
                                                include_global=False)
            action, target, why = decide(text, known=known, neighbors=neighbors, replaces=fact.replaces, said=said)
            formation.resolutions.append(Resolution(text, vector, action, target.id if target else None, why,
                                                    attributes))
    return formation


def _kept(facts: list[ExtractedFact], said: OwnWords, known: list[Memory],
          dropped: list[dict[str, str]]) -> list[tuple[str, ExtractedFact]]:
    """The facts worth storing, cleaned; each one left out is added to `dropped` with its reason."""
    kept: list[tuple[str, ExtractedFact]] = []
    known_texts = [m.content for m in known]
    for fact in facts:
        content = memory_content(_ABOUT_USER.sub("User", fact.fact.strip(), count=1))
        why = _why_not(content, said, known_texts, [text for text, _ in kept])
        if why:
            dropped.append({"fact": content.text[:200], "why": why})  # redacted: it is logged
        else:
            kept.append((content.text, fact))
    return kept


def _why_not(content: Content, said: OwnWords, known: list[str], kept: list[str]) -> str | None:
    """Why a fact is not stored (memory_proxy_facts_dropped_total{reason}), or None to keep it."""
    if not content.text:
        return "empty"
    if not _ABOUT_USER.match(content.text):
        return "not_about_user"
    if _REQUEST_FACT.match(content.text):
        return "request"
    if content.secrets:
        return "secret"
    if content.problem:
        return "too_long"
    if len(content.text.split()) > MAX_FACT_WORDS:
        return "not_one_fact"
    if not supported(content.text, said, known):
        return "unsupported"
    if same_text_key(content.text) in {same_text_key(k) for k in kept}:
        return "repeated"
    return "over_cap" if len(kept) >= MAX_FACTS_PER_TURN else None


async def _nearest(user_id: str, text: str, *, pool: AsyncConnectionPool, embedder: Embedder,
                   top_k: int) -> list[Memory]:
    """The user's active memories nearest to `text` (their own only, never the global ones)."""
    vector = await embed_one(embedder, text)
    async with pool.connection() as conn:
        return await search.neighbours(conn, user_id=user_id, model=embedder.model, embedding=vector,
                                       top_k=top_k, min_score=-1.0, include_global=False)


async def _forgotten(turn: Turn, what: str, *, pool: AsyncConnectionPool,
                     embedder: Embedder) -> list[Resolution]:
    """The user's memories that a request to forget `what` names: among the nearest to it, those that
    hold at least half of its content words ("that I live in Lyon" → "User lives in Lyon.")."""
    wanted = set(content_stems(what))
    if not wanted:
        return []  # "forget it": nothing named
    candidates = await _nearest(turn.user_id, what, pool=pool, embedder=embedder, top_k=FORGET_CANDIDATES)
    return [Resolution(m.content, [], "forget", m.id, "the user asked to forget it") for m in candidates
            if 2 * len(wanted & set(content_stems(m.content))) >= len(wanted)]


async def _brought_back(turn: Turn, said: OwnWords, *, pool: AsyncConnectionPool) -> list[Resolution]:
    """ "I'm back to tabs": the newest of the user's replaced memories that their words restate (two thirds
    of its content words), brought back over what replaced it. "Back to work" restates no memory."""
    if not _BACK_TO.search(said.statements):
        return []
    stated = set(content_stems(said.statements))
    async with pool.connection() as conn:
        replaced = await memories.replaced_memories(conn, turn.user_id)
    for memory, replacement in replaced:
        held = set(content_stems(memory.content))
        if held and 3 * len(held & stated) >= 2 * len(held):
            return [Resolution(memory.content, [], "restore", replacement, "the user went back to it",
                               restored=memory.id)]
    return []


def _focused(said: OwnWords) -> str:
    """What the model reads: the user's own words; of a long message only the sentences in the first
    person (a fact about the user is stated so: "…since I'm diabetic…"), so that one buried fact is not
    lost among paragraphs and the prompt stays short."""
    if len(said.text) <= LONG_MESSAGE_CHARS:
        return said.text
    speaks_of_self = (lambda s: bool(_SINGULAR_SELF & set(words(s)))) if said.english else in_first_person
    return " ".join(s for s in said.sentences if speaks_of_self(s)) or said.text


def _assistant_before(payload: dict[str, Any]) -> str:
    """The assistant's message just before the user's, from the job's context lines ("assistant: …")."""
    for line in reversed(payload.get("context", [])):
        if line.startswith("assistant: "):
            return line.removeprefix("assistant: ")[:BEFORE_CHARS]
    return ""
