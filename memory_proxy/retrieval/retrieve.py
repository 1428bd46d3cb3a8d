"""Retrieval for one chat turn: two tiers of memories, within a time budget, in one database round trip.

- always-on tier: the user's pinned and identity memories, read without any search (a
  pre-fetch): the assistant always knows who it talks to;
- query tier: the user's memories for this message, by hybrid search (store/search.py) and ranking
  (retrieval/rank.py). Skipped for contentless messages ("ok", "thanks": selective retrieval). A question about
  the user as a whole ("what do you know about me?", retrieval/about_user.py) begins with their newest facts. When the
  user has five or fewer memories, all of them, newest first (no search can beat "all"); when
  the embedder fails or is slow, the most recent memories instead (the fallback tier) — and, once it has
  failed repeatedly, without asking it for a while (the embedder's breaker, memory_proxy/breaker.py: a hung
  embedder then costs a turn milliseconds, not its embedding share of the budget).

The query is embedded first, then both tiers and the search candidates are read at once: from the user's
in-process index when this process holds it (retrieval/indexes.py; then one primary-key read confirms that what
the turn injects is still active: `_still_active`), else by one statement in PostgreSQL
(store/search.py: one statement after the embedding, rather than the tiers read on a second connection beside
it, because one round trip and one transaction less per turn save more CPU than the overlap would save time).

`retrieve_memories` raises only `MemoryUnavailable`, whose reason names the phase that failed and how
(`embedder_error`, `embedder_timeout`, `database_error`, `database_timeout`); `memories_for_turn`
falls back on embedder failures and raises for database ones (the caller then relays without memory).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import numpy as np
import psycopg
import psycopg_pool
from psycopg import AsyncConnection

from ..breaker import Breaker
from ..embedding.embedders import Embedder, embed_query
from ..errors import MemoryUnavailable
from ..observability import FAIL_OPEN, INDEX_STALE, RETRIEVAL_LATENCY, log
from ..records import Memory
from ..settings import EPISODE, RetrievalSettings
from ..store import search, snapshot, teams
from ..store.scoring import RECENT_LIMIT
from ..store.teams import Holder
from .about_user import AboutUser
from .contentless import contentless
from .indexes import Indexes
from .rank import rank
from .user_index import Query

EMBED_SHARE = 0.7  # share of the time budget the embedder may use, so that the fallback still has time
CANDIDATES_PER_RESULT = 3  # hits fetched per memory wanted, for MMR and the minimum score to choose from
PROFILE_READ = 20  # the newest facts a question about the user as a whole begins with (within the token budget)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TurnMemories:
    always_on: list[Memory]
    query: list[Memory]
    fallback: str = ""  # why the most recent memories stood in for a search (the embedder's fail-open reason)
    team: list[Memory] = field(default_factory=list)  # the user's teams' memories for this message
    about_user: bool = False  # the message asks about the user as a whole: the query tier begins with their profile

    @property
    def all(self) -> list[Memory]:
        """Every tier, always-on first, the teams' last, each memory once."""
        return _unique([*self.always_on, *self.query, *self.team])

    def keeping(self, kept: Callable[[Memory], bool]) -> TurnMemories:
        return replace(self, always_on=[m for m in self.always_on if kept(m)], query=[m for m in self.query if kept(m)],
                       team=[m for m in self.team if kept(m)])


@asynccontextmanager
async def _phase(name: str, budget_s: float) -> AsyncIterator[None]:
    """Translate failures of one phase (embedder, database) into MemoryUnavailable(`{name}_{how}`)."""
    try:
        # anyio's deadline, not asyncio's: it cancels again at every await until the block is left, so that
        # psycopg, interrupted while it cancels the timed-out query, closes the connection at once; under
        # asyncio.timeout's single cancellation it waited up to 10 s for a hung server (5 s to cancel, 5 s
        # for the query to end) before the turn could go on.
        with anyio.fail_after(budget_s):
            yield
    except TimeoutError as exc:
        raise MemoryUnavailable(f"{name}_timeout", f"{name} exceeded {budget_s:.3f}s") from exc
    except MemoryUnavailable as exc:
        raise MemoryUnavailable(f"{name}_error", str(exc)) from exc
    except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
        raise MemoryUnavailable(f"{name}_error", f"memory {name} failed: {exc!r}") from exc


async def _in_database(pool: psycopg_pool.AsyncConnectionPool, budget_s: float,
                       work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
    async with _phase("database", budget_s), pool.connection() as conn:
        return await work(conn)


async def retrieve_memories(*, pool: psycopg_pool.AsyncConnectionPool, embedder: Embedder, user_id: str,
                            query: str, settings: RetrievalSettings, vector: list[float] | None = None,
                            indexes: Indexes | None = None, with_teams: bool = False) -> list[Memory]:
    """The query tier: the user's best memories for `query`, ranked (the search API, the search tool and
    benchmarks); `with_teams`: then those of the user's teams, as a chat turn has them."""
    words = None
    if vector is None:
        async with _phase("embedder", settings.timeout_s):
            vector, words = await embed_query(embedder, query, settings.ranking.late_weight > 0)
    def choose(found: search.Scoped) -> TurnMemories:
        mine = _ranked(found.personal, settings)
        return TurnMemories([], mine, team=_team_tier(found, mine, settings) if with_teams else [])

    chosen = await _search(pool, indexes, embedder, user_id, query, vector, settings, choose, tiers=False,
                           words=words, with_teams=with_teams)
    return [*chosen.query, *chosen.team]


async def memories_for_turn(*, pool: psycopg_pool.AsyncConnectionPool, embedder: Embedder, user_id: str,
                            query: str, settings: RetrievalSettings, indexes: Indexes | None = None,
                            embedder_breaker: Breaker | None = None,
                            mirror: Callable[[AsyncConnection[Any]], Awaitable[Any]] | None = None,
                            about_user: AboutUser | None = None) -> TurnMemories:
    """Both tiers for a chat turn (see the module docstring), within RETRIEVAL_TIMEOUT_MS; with `mirror` (the
    user's OpenWebUI groups a header named, TEAM_MIRROR=header), the user's mirrored memberships are made those
    first: a failure there fails the whole retrieval, so that a removed member never reads on by accident. When
    `about_user` finds that the message asks about the user as a whole ("what do you know about me?"), the query
    tier begins with the user's profile: their PROFILE_READ newest facts (episodes left out), then what search found."""
    started = time.perf_counter()
    try:
        if mirror is not None:
            await _in_database(pool, _left(started, settings.timeout_s), mirror)
        vector, words = None, None
        if not contentless(query):
            try:
                vector, words = await _embedded(embedder, query, settings, embedder_breaker)
            except MemoryUnavailable as exc:  # no search possible: the most recent memories instead
                FAIL_OPEN.labels(exc.reason).inc()
                log.warning("retrieval_fallback_recent", reason=exc.reason, error=str(exc))
                reason = exc.reason
                return await _search(pool, indexes, embedder, user_id, query, None, settings,
                                     lambda found: TurnMemories(found.personal.always_on,
                                                                found.personal.recent[:RECENT_LIMIT], reason),
                                     tiers=True, started=started, with_teams=False)

        whole = vector is not None and about_user is not None and await about_user.asks(vector)

        def choose(found: search.Scoped) -> TurnMemories:
            mine = found.personal
            if vector is None:
                return TurnMemories(mine.always_on, [])
            ranked = _ranked(mine, settings)
            if whole or len(mine.recent) <= settings.inject_all_below:  # the profile, or all of the user's own
                ranked = _unique([*mine.recent, *ranked])  # then what search adds
            return TurnMemories(mine.always_on, ranked, team=_team_tier(found, [*mine.always_on, *ranked], settings),
                                about_user=whole)

        return await _search(pool, indexes, embedder, user_id, query, vector, settings, choose, tiers=True,
                             started=started, words=words, with_teams=vector is not None, profile=whole)
    finally:
        RETRIEVAL_LATENCY.observe(time.perf_counter() - started)


async def _embedded(embedder: Embedder, query: str, settings: RetrievalSettings,
                    breaker: Breaker | None) -> tuple[list[float], np.ndarray | None]:
    """The query's vector (and word states) within the embedder's share of the budget; MemoryUnavailable when
    the embedder fails, or without asking it while its breaker is open."""
    if breaker is not None and not breaker.allow():
        raise MemoryUnavailable("embedder_breaker_open", "the embedder failed repeatedly: not asked for a while")
    try:
        async with _phase("embedder", settings.timeout_s * EMBED_SHARE):
            embedded = await embed_query(embedder, query, settings.ranking.late_weight > 0)
    except MemoryUnavailable:
        if breaker is not None:
            breaker.failure()
        raise
    if breaker is not None:
        breaker.success()
    return embedded


async def _search(pool: psycopg_pool.AsyncConnectionPool, indexes: Indexes | None, embedder: Embedder,
                  user_id: str, query: str, vector: list[float] | None, settings: RetrievalSettings,
                  choose: Callable[[search.Scoped], TurnMemories], *, tiers: bool, with_teams: bool,
                  started: float | None = None, words: np.ndarray | None = None, profile: bool = False) -> TurnMemories:
    """What `choose` picks of the user's scopes searched: their own, and with `with_teams` each team's they
    belong to; in the in-process indexes when all of them are held (retrieval/indexes.py; with the late-interaction
    arm when the query's `words` states came with its vector: retrieval/late_interaction.py; then what is picked is confirmed,
    `_still_active`), else in PostgreSQL. Which teams to search is the memberships this process saw last
    (`Indexes.teams_of`); the search reads them again, and a team the user joined since is searched in
    PostgreSQL at once (one more round trip, once per new membership). With `profile`, the newest tier read is the
    PROFILE_READ newest facts."""
    if not settings.episodes:
        choose = _facts_only(choose)
    options: dict[str, Any] = {
        "limit": settings.top_k * CANDIDATES_PER_RESULT, "mode": settings.mode, "rrf_k": settings.ranking.rrf_k,
        "weights": (1.0, settings.ranking.text_weight), "tiers": tiers,
        **({"recent": PROFILE_READ, "recent_facts": True} if profile else {})}
    team_limit = settings.team_top_k * CANDIDATES_PER_RESULT
    known = indexes.teams_of(user_id) if indexes is not None and with_teams else ()
    searched = [t.id for t in known or ()]
    budget = settings.timeout_s if started is None else _left(started, settings.timeout_s)
    if indexes is not None:  # (each lookup starts a load of an index not held yet)
        held = [indexes.get(user_id), *(indexes.get(Holder.team(t).principal) for t in searched)]
        if known is not None and all(index is not None for index in held):
            now, prepared = datetime.now(UTC), Query.of(vector, query)
            founds = [index.search(prepared, now=now, word_states=words, late_weight=settings.ranking.late_weight,
                                   **{**options, **({"limit": team_limit} if i else {})})
                      for i, index in enumerate(held) if index is not None]
            scoped = search.Scoped(founds[0], {t.id: f for t, f in zip(known, founds[1:], strict=True)}, known)
            chosen = await _still_active(pool, indexes, user_id, known if with_teams else None, choose(scoped), budget)
            if chosen is not None:
                return chosen

    def in_database(team_ids: list[str]) -> Awaitable[search.Scoped]:
        return _in_database(pool, budget, lambda conn: search.search_scopes(
            conn, user_id=user_id, teams=team_ids, model=embedder.model, embedding=vector, text=query,
            team_limit=team_limit, **options))

    found = await in_database(searched)
    if with_teams and any(t.id not in searched for t in found.memberships):  # joined since: searched at once
        found = await in_database([t.id for t in found.memberships])
    if indexes is not None and with_teams:
        indexes.saw_teams(user_id, found.memberships)
    return choose(found)


async def _still_active(pool: psycopg_pool.AsyncConnectionPool, indexes: Indexes, user_id: str,
                        known: tuple[teams.TeamRef, ...] | None, chosen: TurnMemories,
                        budget_s: float) -> TurnMemories | None:
    """What was chosen of the indexes' finds (the user's, then each of `known` teams') without what PostgreSQL
    no longer has active with that text, nor what the user may no longer read; None when the user joined a
    team since (the caller then searches in PostgreSQL). The indexes hear of a change by notification, which
    may reach this process after a turn that begins once another replica (or this one) answered an erase, a
    delete or a member's removal: the check makes "gone once answered" hold across processes
    (benchmarks/cluster), for one primary-key read of exactly what the turn injects, with the memberships read
    beside it. A memory found gone is left out, not replaced by the next best. `known` None: the user's own
    memories only."""
    def holder(m: Memory) -> str:
        return Holder.of_memory(user_id, m.team).principal

    wanted = {(holder(m), m.id) for m in chosen.all}
    if not wanted and known is None:
        return chosen
    current, memberships = await _in_database(pool, budget_s, lambda conn: search.confirm(conn, user_id, wanted))
    if known is not None:
        if not {t.id for t in memberships} <= {t.id for t in known}:
            return None
        indexes.saw_teams(user_id, memberships)
    now_in = {t.id for t in memberships}
    gone = {holder(m) for m in chosen.all if current.get((holder(m), m.id)) != m.content}
    for principal in gone:
        INDEX_STALE.inc()
        indexes.changed(snapshot.user_key(principal))  # as the notification on its way will: read again
    return chosen.keeping(lambda m: current.get((holder(m), m.id)) == m.content and (not m.team or m.team in now_in))


def _facts_only(choose: Callable[[search.Scoped], TurnMemories]) -> Callable[[search.Scoped], TurnMemories]:
    """`choose` over the facts found (EPISODES=false: the episodes kept before are neither shown nor ranked)."""
    def facts(found: search.Scoped) -> TurnMemories:
        mine = found.personal
        kept = search.Found([m for m in mine.always_on if m.memory_type != EPISODE],
                            [m for m in mine.recent if m.memory_type != EPISODE],
                            [h for h in mine.hits if h.memory.memory_type != EPISODE], mine.late_weight)
        return choose(replace(found, personal=kept))
    return facts


def _ranked(found: search.Found, settings: RetrievalSettings, top_k: int | None = None) -> list[Memory]:
    return rank(found.hits, top_k=settings.top_k if top_k is None else top_k, min_score=settings.min_score,
                mode=settings.mode, late_weight=found.late_weight, now=datetime.now(UTC), settings=settings.ranking)


def _team_tier(found: search.Scoped, personal: list[Memory], settings: RetrievalSettings) -> list[Memory]:
    """The memories of the user's teams for this turn, none when RETRIEVAL_TEAM_TOP_K is 0: each team's pinned
    ones; then the best RETRIEVAL_TEAM_TOP_K found by search, each team ranked within it, best score first;
    then every other memory of a team small enough to hold at most RETRIEVAL_INJECT_ALL_BELOW, newest first
    (as for a user: no search beats "all", in any language). A team memory saying what one of the user's own
    says is left out (the narrower scope first)."""
    if settings.team_top_k == 0:
        return []
    shown = [(team, found.teams[team.id].shown(settings.inject_all_below)) for team in found.memberships
             if team.id in found.teams]
    pinned = [(team, m) for team, held in shown for m in held.always_on]
    searched = sorted(((team, m) for team, held in shown for m in _ranked(held, settings, settings.team_top_k)),
                      key=lambda tm: -tm[1].score)  # (a team's best few: the first of its longer ranking)
    small = [(team, m) for team, held in shown for m in held.recent]
    mine = {m.content.casefold() for m in personal}
    return _unique([replace(m, team=team.id, team_name=team.name)  # marked as the team's: only what is shown
                    for team, m in [*pinned, *searched[:settings.team_top_k], *small] if m.content.casefold() not in mine])


def _left(started: float, budget_s: float) -> float:
    return max(started + budget_s - time.perf_counter(), 0.001)


def _unique(found: list[Memory]) -> list[Memory]:
    seen: set[tuple[str, str]] = set()
    return [m for m in found if not ((m.team, m.id) in seen or seen.add((m.team, m.id)))]  # type: ignore[func-returns-value]
