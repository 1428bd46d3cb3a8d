"""How a chat turn becomes memories: every step of formation, in order, in one place.

The memory LLM judges what the user's words mean; deterministic code only guards what no model may be
trusted with (provenance, secrets, grounding, size, duplicates, the flip-flop rule, audit).

1. Provenance (formation/evidence.own_words): only the user's own words reach the model; pasted documents,
   RAG context, code, quotes and lines addressed to a machine are left out (and kept apart: no fact may
   come from them). A turn with no words left, or only "ok thanks" (FORMATION_SKIP_TRIVIAL), stops here.
   Then the provenance call (formation/provenance.py; FORMATION_PROVENANCE_CHECK, off by default) may leave
   out more: the parts the model reads as pasted text, someone else's words or lines addressed to an AI,
   in any language; a failed call falls back to the rules' result (noted in `malformed`). The words left are
   kept as the turn's episodes (formation/episodes.py, EPISODES), whatever the model makes of them.
2. The extraction call (formation/extract.py) reads the own words (and the assistant's message before, for
   reference): the new lasting facts, each typed, and what the user asks to forget, if anything.
3. A forget request: the user's memories nearest to what it names are shown to the model, which picks
   the ones the request names (formation/resolve.forgotten); each is retired (audited as `forget`).
4. Each fact is kept only if it is about the user ("User …"), holds no secret (formation/memory_text.py), fits
   the size limits, and is grounded (formation/evidence.grounding): its names and numbers come from the
   user's words (this message or their earlier ones in the chat) or the turn's date, not from the
   assistant's words or the prompt's examples. Each one left out is logged with its reason. These checks
   run in a worker process with a deadline (memory_proxy/redact/scan_pool.py), never on the event loop.
   For a user in a team (TEAM_FACTS review or auto), the extraction call is shown the user's teams and writes a
   team's fact about the team it names ("Team platform's …", formation/team_facts.py): it passes the same guards about
   the team ("Team …"), then the model confirms the user stated it (formation/team_facts.stated, a yes/no call each).
5. Each kept fact that is not an exact duplicate is compared with its nearest memories by the model
   (formation/resolve.relate); a replace, refine or ignore is acted on only once the model confirms it for
   that pair (formation/resolve.confirmed), else the fact is added. The memories the chat model stored with
   the `remember` tool in this turn (the payload's `remembered`) are always among those compared, and are
   protected: a fact the model relates to one of them (confirmed) is not stored, whether it says the same,
   more or something else, and neither that fact nor a forget request of the same turn retires it (the
   chat model read the same words; a second reading does not correct it). Facts that expire sooner never
   retire longer-lived memories (`_settle`). The write step (formation/write.py) stores the outcome in one transaction
   with the job's completion: the flip-flop rule, the caps, a team's proposals, the audit.

A reply that cannot be read (formation/memory_llm.MalformedReply) is an empty answer, logged in `malformed`: no
facts, nothing related (the fact is added), nothing forgotten. Only a failure to reach the model fails
the job (it is retried).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ..embedding.embedders import Embedder
from ..embedding.memory_document import embedding_text
from ..job_payload import FormationPayload
from ..prompts import load_prompt
from ..records import FactAttributes, Memory
from ..redact.scan_pool import Scanner
from ..retrieval.contentless import contentless
from ..settings import FormationSettings
from ..store import memories, search, teams
from ..store.scope import user_scope
from ..store.teams import Holder, Team
from .drops import Drop
from .episodes import episode_texts, episodes
from .evidence import OwnWords, grounding, names, own_words
from .extract import SECRET, ExtractedFact, Extraction, extract_facts
from .memory_llm import MalformedReply, MemoryLLM
from .memory_text import MAX_FACTS_PER_TURN, Content, memory_content, same_text_key
from .provenance import checked
from .resolve import Action, Relation, Resolution, confirmed, forget_candidates, forgotten, proposals, relate
from .team_facts import is_teams, stated, team_of, teams_block

BEFORE_CHARS = 300  # of the assistant's previous message, shown for reference (answers to its question)
MAX_MESSAGE_CHARS = 4000  # of the user's own words, shown to the model (the prompt stays bounded)
MAX_FACT_WORDS = 24  # a longer "fact" is a paraphrased passage, not one fact
MAX_FACTS_READ = 2 * MAX_FACTS_PER_TURN  # of one reply: the rest cannot be kept anyway, and each costs a scan
MAX_CONFIRMATIONS = 2  # destructive proposals checked per fact; past them the fact is added
REMEMBERED = "the chat model remembered it in this turn"  # why a protected memory is left as it is

_ABOUT_USER = re.compile(r"^(the\s+)?user\b", re.I)
_ABOUT_TEAM = re.compile(r"^(the\s+)?team\b", re.I)
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


@dataclass
class Formation:
    """What one turn does: the decisions to write, and what was seen on the way (for the log)."""

    resolutions: list[Resolution] = field(default_factory=list)
    extracted: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)  # {"fact", "why", "type"}
    skipped: str | None = None  # why no LLM call was made, if none was
    malformed: list[str] = field(default_factory=list)  # the calls whose reply could not be read
    # for a user in a team, in counts: the teams the extraction call was shown, the facts it wrote about a team,
    # of them those naming none of the user's teams, and those that passed the guards
    scope: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    user_id: str
    said_at: datetime
    payload: FormationPayload


def users_words(payload: FormationPayload) -> tuple[OwnWords, bool, list[str]]:
    """A turn's own words (formation/evidence.own_words), whether they say nothing worth a model call
    (FORMATION_SKIP_TRIVIAL), and the user's own words of the earlier messages the job holds."""
    said = own_words(payload.user_message)
    earlier = [own_words(text).text for text in payload.earlier("user")]
    return said, contentless(said.text), earlier


async def form(turn: Turn, *, pool: AsyncConnectionPool, embedder: Embedder, llm: MemoryLLM, scanner: Scanner,
               settings: FormationSettings) -> Formation:
    # In a worker process (memory_proxy/redact/scan_pool.py), as all the pure work that grows with what the user wrote.
    said, trivial, earlier = await scanner.run(users_words, turn.payload)
    formation = Formation()
    if not said.text or (settings.skip_trivial and trivial):
        formation.skipped = "trivial turn"
        return formation
    if settings.provenance_check:
        said = await _provenance(llm, said, formation)
        if not said.text:
            formation.skipped = "no words of the user's"
            return formation
    if settings.episodes:  # the user's own words, kept beside the facts (EPISODES)
        formation.resolutions += await episodes(await scanner.run(episode_texts, said.text), turn.said_at, embedder, settings)

    before = (turn.payload.earlier("assistant") or [""])[-1][:BEFORE_CHARS]  # the assistant's message before
    mine = await _teams(turn, pool) if settings.team_facts != "off" else []  # whose a fact may be
    try:
        extraction = await extract_facts(llm, today=turn.said_at.date().isoformat(), before=before,
                                         message=said.text[:MAX_MESSAGE_CHARS], teams=teams_block(mine))
    except MalformedReply as exc:
        formation.malformed.append(str(exc))
        extraction = Extraction()
    protected = {m.id for m in turn.payload.remembered}
    if extraction.forget:
        named = await _forgotten(turn, said, extraction.forget, pool=pool, embedder=embedder, llm=llm,
                                 malformed=formation.malformed)
        formation.resolutions += [_spared(r) if r.target_id in protected else r for r in named]
    formation.extracted = len(extraction.facts)
    elsewhere = "\n".join([*(m.line() for m in turn.payload.context if m.role != "user"), _example_facts()])
    known = [m.content for m in turn.payload.retrieved] + [m.content for m in turn.payload.remembered]
    # In a worker process with a deadline (memory_proxy/redact/scan_pool.py; ScanFailed: retried): a reply's facts are sorted
    # by whose they are, scanned for secrets and checked against the user's words, work that grows with the reply.
    kept, teams_kept, dropped = await scanner.run(kept_by_holder, extraction.facts, mine, said, earlier, elsewhere,
                                                  turn.said_at, known)
    if teams_kept:  # the model confirms each, on its own: a team's memory is shown to every member
        teams_kept, unstated = await stated(llm, said.text[:MAX_MESSAGE_CHARS], teams_kept, formation.malformed)
        dropped += unstated
    formation.dropped += dropped
    scoped: list[tuple[str, ExtractedFact, Holder | None]] = [(text, fact, None) for text, fact in kept]  # None: the user's
    if mine:
        team_drops = [d["why"] for d in dropped if Drop(d["why"]).about_team]
        formation.scope = {"teams": len(mine), "written": len(teams_kept) + len(team_drops),
                           "unknown": team_drops.count(Drop.TEAM_UNKNOWN), "kept": len(teams_kept)}
        scoped += [(text, fact, Holder.team(team.id)) for text, fact, team in teams_kept]
    if not scoped:
        return formation
    vectors = await embedder.embed([embedding_text(text, turn.said_at) for text, _, _ in scoped])
    compared: list[tuple[str, ExtractedFact, list[float], list[Memory], Holder | None]] = []
    async with pool.connection() as conn, user_scope(conn, turn.user_id):  # a team's rows: a member's scope
        remembered = await _remembered(conn, turn)
        for (text, fact, holder), vector in zip(scoped, vectors, strict=True):
            attributes = FactAttributes(memory_type=fact.type, expires_at=settings.expiry(fact.type, turn.said_at))
            whose = (holder or Holder(turn.user_id)).principal
            same = await memories.find_same_text(conn, whose, text)
            if same:
                formation.resolutions.append(Resolution(text, vector, "ignore", same, "exact duplicate", attributes,
                                                        holder))
                continue
            neighbors = await search.neighbour_facts(conn, user_id=whose, model=embedder.model, embedding=vector,
                                                     top_k=settings.neighbors)
            # a team's fact is compared with the team's memories only: it never changes the user's own
            compared.append((text, fact, vector, neighbors if holder else _beside(neighbors, remembered), holder))
    forgotten_ids = {r.target_id for r in formation.resolutions if r.action == "forget"}
    targets: dict[str, Memory] = {}
    for text, fact, vector, neighbors, holder in compared:  # the model's calls hold no database connection
        candidates = [m for m in neighbors if m.id not in forgotten_ids]
        relations: dict[int, Relation] = {}
        try:
            relations = await relate(llm, text, candidates) if candidates else {}
        except MalformedReply as exc:
            formation.malformed.append(str(exc))
        action, target, why = await _chosen(llm, text, candidates, relations, formation, protected)
        attributes = FactAttributes(memory_type=fact.type, expires_at=settings.expiry(fact.type, turn.said_at))
        proposed = bool(holder) and settings.team_facts == "review"  # for the team's editors to accept
        formation.resolutions.append(Resolution(text, vector, action, target.id if target else None, why,
                                                attributes, holder, proposed))
        targets.update({m.id: m for m in candidates})
    _settle(formation.resolutions, targets, settings)
    return formation


async def _teams(turn: Turn, pool: AsyncConnectionPool) -> list[Team]:
    """The user's teams a fact of theirs may be given to: those a turn reads (store/teams.MAX_TEAMS_READ)."""
    async with pool.connection() as conn:
        return [m.team for m in await teams.teams_of(conn, turn.user_id, newest=teams.MAX_TEAMS_READ)]


def kept_by_holder(facts: list[ExtractedFact], mine: list[Team], said: OwnWords, earlier: list[str],
                   elsewhere: str, said_at: datetime, known: Sequence[str] = ()
                   ) -> tuple[list[tuple[str, ExtractedFact]], list[tuple[str, ExtractedFact, Team]],
                              list[dict[str, str]]]:
    """The facts worth storing, by whose they are: those about the user (`kept_facts`), those written about one
    of the user's teams `mine` ("Team platform's …", `_kept_team_facts`), and each one left out with its
    reason. Past MAX_FACTS_READ facts the rest are dropped unread (`over_cap`). What the extraction call was told
    of the teams (their names and what each works on) is not the user's words for a fact about the user (an echo
    of the prompt: "User works on the Halvorsen wing."), but is what the operator says of the team, and a fact
    about the team may name it."""
    read = facts[:MAX_FACTS_READ]
    about_team = [bool(mine) and is_teams(fact.fact, mine) for fact in read]
    kept, dropped = kept_facts([f for f, team in zip(read, about_team, strict=True) if not team], said, earlier,
                               "\n".join([elsewhere, teams_block(mine)]), said_at, known)
    team_kept, team_dropped = _kept_team_facts([f for f, team in zip(read, about_team, strict=True) if team], mine,
                                               said, earlier, elsewhere, said_at, known)
    return kept, team_kept, dropped + team_dropped + [{"fact": "", "why": Drop.OVER_CAP} for _ in facts[MAX_FACTS_READ:]]


def _kept_team_facts(facts: list[ExtractedFact], mine: list[Team], said: OwnWords, earlier: list[str],
                     elsewhere: str, said_at: datetime, known: Sequence[str]
                     ) -> tuple[list[tuple[str, ExtractedFact, Team]], list[dict[str, str]]]:
    """The facts written about a team worth storing, each as its team's sentence ("Team's …",
    team_facts.team_of) with the team, and each one left out with its reason's team form: naming none of the
    user's teams (`TEAM_UNKNOWN`), or failing a guard of `kept_facts` (about the team instead of the user)."""
    kept: list[tuple[str, ExtractedFact, Team]] = []
    dropped: list[dict[str, str]] = []
    for fact in facts:
        named = team_of(fact.fact.strip(), mine)
        if named is None:
            dropped.append({"fact": memory_content(fact.fact.strip()).text[:200], "why": Drop.TEAM_UNKNOWN,
                            "type": fact.type})
            continue
        content = memory_content(named.text)
        why = Drop.SECRET if fact.type == SECRET else _why_not(
            content, [text for text, _, _ in kept], _ABOUT_TEAM, Drop.NOT_ABOUT_TEAM) or _ungrounded(
            content.text, said, earlier, elsewhere, said_at, known)
        if why:
            dropped.append({"fact": content.text[:200], "why": why.for_team(), "type": fact.type})
        else:
            kept.append((content.text, fact, named.team))
    return kept, dropped


async def _provenance(llm: MemoryLLM, said: OwnWords, formation: Formation) -> OwnWords:
    result = await checked(llm, said)
    if result.outcome == "fallback":
        formation.malformed.append(f"provenance (the rules' result kept): {result.error}")
    return result.said


async def _remembered(conn: AsyncConnection[Any], turn: Turn) -> list[Memory]:
    """The memories `remember` stored in this turn that are still active (one round trip; none: no query)."""
    ids = [m.id for m in turn.payload.remembered]
    texts = await search.active_texts(conn, turn.user_id, ids) if ids else {}
    return [Memory(id=i, content=texts[i], created_at=turn.said_at, stated_at=turn.said_at) for i in ids if i in texts]


def _beside(neighbors: list[Memory], remembered: list[Memory]) -> list[Memory]:
    """A fact's nearest memories and, after them, the turn's remembered ones that are not among them: each
    fact is compared with what the chat model stored, however many memories lie nearer."""
    near = {m.id for m in neighbors}
    return [*neighbors, *(m for m in remembered if m.id not in near)]


def _spared(resolution: Resolution) -> Resolution:
    """A forget that named a memory the chat model remembered in this turn: not acted on, logged."""
    return Resolution(resolution.fact, [], "ignore", resolution.target_id, f"{REMEMBERED}: not forgotten")


async def _chosen(llm: MemoryLLM, fact: str, candidates: list[Memory], relations: dict[int, Relation],
                  formation: Formation, protected: set[str]) -> tuple[Action, Memory | None, str]:
    """The first of the model's proposals that holds: a replace, refine or ignore only once the model
    confirms it for that pair (at most MAX_CONFIRMATIONS asked); else add (never lose a fact). One that
    holds for a `protected` memory (stored by `remember` in this turn) ignores the fact and leaves the
    memory as it is."""
    refused: list[str] = []
    for relation, action, memory, why in proposals(candidates, relations):
        if len(refused) == MAX_CONFIRMATIONS:
            continue
        try:
            if await confirmed(llm, fact, memory, relation):
                if memory.id in protected:
                    return "ignore", memory, f"{REMEMBERED}; {why} (confirmed)"
                return action, memory, f"{why} (confirmed)"
        except MalformedReply as exc:
            formation.malformed.append(str(exc))
        refused.append(f"{action} {memory.id}")
    return "add", None, f"new information ({', '.join(refused)}: not confirmed)" if refused else "new information"


def _lifetime(settings: FormationSettings, memory_type: str) -> float:
    return settings.ttl_days.get(memory_type) or float("inf")


def _settle(resolutions: list[Resolution], targets: dict[str, Memory], settings: FormationSettings) -> None:
    """Bookkeeping on the model's relations, by the types it gave: a fact that expires sooner never retires
    a memory that lasts longer (a week in Paris does not end a home in Lyon: it is added beside it), and
    when several facts of one turn change the same memory, the longest-lived takes its place (the move is
    audited against "User lives in Quito.", not against "User moved to Quito last month.") and the others
    are added."""
    winners: dict[str, Resolution] = {}
    for r in resolutions:
        if r.action not in ("replace", "refine") or not r.target_id or r.target_id not in targets:
            continue
        lifetime = _lifetime(settings, r.attributes.memory_type)
        if lifetime < _lifetime(settings, targets[r.target_id].memory_type):
            r.action, r.target_id, r.reason = "add", None, f"{r.reason}; kept beside it: a {r.attributes.memory_type} fact"
        elif r.target_id not in winners or lifetime > _lifetime(settings, winners[r.target_id].attributes.memory_type):
            winners[r.target_id] = r
    for r in resolutions:
        if r.action in ("replace", "refine") and r.target_id in winners and winners[r.target_id] is not r:
            r.action, r.target_id, r.reason = "add", None, f"{r.reason}; another fact of this turn replaces it"


def kept_facts(facts: list[ExtractedFact], said: OwnWords, earlier: list[str], elsewhere: str, said_at: datetime,
               known: Sequence[str] = ()) -> tuple[list[tuple[str, ExtractedFact]], list[dict[str, str]]]:
    """The facts worth storing, cleaned, and each one left out with its reason. `known`: the memories
    injected into this turn; an ungrounded fact that only restates one (all its words in it) is dropped as
    `known`, not `unsupported`; one whose names and numbers the user's words and those memories hold (an
    update that names the old value) is kept. Past MAX_FACTS_READ facts the rest are dropped unread
    (`over_cap`)."""
    kept: list[tuple[str, ExtractedFact]] = []
    dropped: list[dict[str, str]] = []
    for fact in facts[:MAX_FACTS_READ]:
        content = memory_content(_ABOUT_USER.sub("User", fact.fact.strip(), count=1))
        why = Drop.SECRET if fact.type == SECRET else _why_not(content, [text for text, _ in kept]) or _ungrounded(
            content.text, said, earlier, elsewhere, said_at, known)
        if why:
            dropped.append({"fact": content.text[:200], "why": why, "type": fact.type})  # redacted: it is logged
        else:
            kept.append((content.text, fact))
    return kept, dropped + [{"fact": "", "why": Drop.OVER_CAP} for _ in facts[MAX_FACTS_READ:]]


def _ungrounded(text: str, said: OwnWords, earlier: list[str], elsewhere: str, said_at: datetime,
                known: Sequence[str]) -> Drop | None:
    """Why a fact is not grounded (formation/evidence.grounding), "known" when it only restates one of the turn's
    memories (`known`: all its words in it; a restatement in the user's own words is grounded and goes on to
    be matched with the memory it repeats), or None; also None when the user's words and those memories
    hold its names and numbers: an update that names the old value ("moved from port 5432 to 5433")."""
    why = grounding(text, said=said, earlier=earlier, elsewhere=elsewhere, said_on=said_at.date())
    if why is None or not known:
        return why
    words = set(_WORD.findall(text.lower()))
    if words and any(words <= set(_WORD.findall(memory.lower())) for memory in known):
        return Drop.KNOWN  # not invented: the model restated what the turn was told
    return None if grounding(text, said=said, earlier=[*earlier, *known], elsewhere=elsewhere,
                             said_on=said_at.date()) is None else why


def _why_not(content: Content, kept: list[str], about: re.Pattern[str] = _ABOUT_USER,
             off_subject: Drop = Drop.NOT_ABOUT_USER) -> Drop | None:
    """Why a fact is not stored whatever it says (memory_proxy_facts_dropped_total{reason}), or None; `about`:
    the subject it must start with (the user's, by default)."""
    if content.oversized:
        return Drop.TOO_LONG
    if not content.text or not _WORD.search(about.sub("", content.text, count=1)):  # "" or a bare "Team."
        return Drop.EMPTY
    if not about.match(content.text):
        return off_subject
    if content.secrets:
        return Drop.SECRET
    if content.problem:
        return Drop.TOO_LONG
    if len(content.text.split()) > MAX_FACT_WORDS:
        return Drop.NOT_ONE_FACT
    if same_text_key(content.text) in {same_text_key(k) for k in kept}:
        return Drop.REPEATED
    return Drop.OVER_CAP if len(kept) >= MAX_FACTS_PER_TURN else None


async def _forgotten(turn: Turn, said: OwnWords, what: str, *, pool: AsyncConnectionPool, embedder: Embedder,
                     llm: MemoryLLM, malformed: list[str]) -> list[Resolution]:
    """The user's memories that a request to forget `what` names: the model picks them among the nearest."""
    candidates = await forget_candidates(pool, embedder, turn.user_id, what)
    if not candidates:
        return []
    try:
        named = await forgotten(llm, request=said.text[:MAX_MESSAGE_CHARS], what=what, candidates=candidates)
    except MalformedReply as exc:
        malformed.append(str(exc))
        return []
    return [Resolution(m.content, [], "forget", m.id, "the user asked to forget it") for m in named]


@cache
def _example_facts() -> str:
    """The names and numbers the memory prompt's examples quote (their made-up people, places and numbers): a
    fact holding one the user did not say copied it. Names and numbers only: the examples' other words are
    everyone's ("years"), and a fact may well say "Year"."""
    quoted = load_prompt("memory.md").split('"')  # the example facts, and the example messages
    examples = [q for q in quoted if q.startswith("User") or (len(q) > 24 and q[0].isalpha() and "\n" not in q)]
    return "\n".join(filter(None, (" ".join([*names(q), *_NUMBER.findall(q)]) for q in examples)))
