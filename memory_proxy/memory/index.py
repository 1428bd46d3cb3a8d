"""A user's memories held in the proxy between turns, so that a chat turn searches without the database.

PostgreSQL stays the source of truth. The first turn of a user is searched there (store/search.py) while
the user's active memories are read whole in the background (store/snapshot.py) into a `UserIndex`:
vectors as a float32 matrix, words as per-word postings, and what ranking and the tiers read. Later turns
search it in memory, with the same rules as the SQL statement (tests/test_index.py runs both on one
user): exact cosine over all the user's vectors (the SQL's binary codes only pick whom to re-rank), BM25
over the user's own words with words most memories hold dropped, weighted reciprocal rank fusion, and
the candidates' similarities to each other for MMR (exact cosines instead of the SQL's code estimates).

Staying true to the database:
- every change to a user's memories notifies `memory_changed` with md5(user id) at commit (0008), and the
  listener (`Indexes.run`, one connection per process) stops serving that user's index and reads again,
  REFRESH_DELAY_S later, only the rows whose version changed (the rest are kept): formation changes a
  user's memories seconds after a turn, so the next turn finds the index fresh. A turn that comes first
  is searched in SQL. A change is seen as soon as its notification arrives (a turn already running may
  still use the older memories, as a turn that started before the commit would in SQL); until then, what
  a search here found is confirmed still active before it is injected (memory/retrieve.py `_still_active`):
  a change only ever delays a new memory, never lets a deleted one back in;
- while the listener is not connected (starting, database down) or fails its heartbeat (a notification
  to itself every HEARTBEAT_S), no index is used at all, and every index is read again (by version)
  when it listens again: a notification missed is an index never trusted;
- a read that a notification overtook is thrown away, never stored;
- expiry is checked at search time; use counts are the database's at the last read plus this process's
  own (`used`), since the per-second use-count writes do not notify.
Memory is bounded: RETRIEVAL_INDEX_MB for all users, least recently searched dropped first; a user
bigger than an eighth of it, or over MAX_MEMORIES, is searched in SQL, as one with fewer than
COLD_START_THRESHOLD memories (the global memories are searched with theirs).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import psycopg_pool

from ..observability import INDEX_LOOKUPS, INDEX_USERS, log
from ..schemas import Memory, SearchHit
from ..store import snapshot
from ..store.search import (
    ALWAYS_ON_LIMIT,
    BM25_B,
    BM25_K1,
    COLD_START_THRESHOLD,
    COMMON_TERM_SHARE,
    RECENT_LIMIT,
    Found,
)
from . import late
from .document import embedding_text
from .late import Tokens
from .lexemes import query_lexemes

MAX_MEMORIES = 50_000  # users with more are searched in SQL (a load would take seconds)
# Users with more are ranked without late interaction: their words' states would take the local model
# ~3 ms a memory to compute (once per process, in the load), and 5–16 KB a memory to hold (memory/late.py).
LATE_MAX_MEMORIES = 2_000
ROW_OVERHEAD_BYTES = 600  # per memory beside its vector: text, postings, Python objects (approximate)
LOAD_TIMEOUT_S = 30.0
CONCURRENT_LOADS = 2
LISTEN_RETRY_MAX_S = 30.0
HEARTBEAT_S, HEARTBEAT_TIMEOUT_S = 10.0, 5.0  # the listener proves it hears, or is replaced
MAX_USERS = 100_000  # entries held, indexes and "searched in SQL" marks together
REFRESH_DELAY_S = 0.2  # a held index is read again this long after a change is heard: a burst is read once
# A listener over TCP that never hears anything cannot tell a quiet database from a dead link: keepalives
# make a dead link an error within ~25 s (ignored on the embedded database's unix socket).
LISTENER_OPTIONS: dict[str, Any] = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                                    "keepalives_interval": 5, "keepalives_count": 3}
_NEVER = math.inf


@dataclass(frozen=True, slots=True)
class UserIndex:
    """One user's active memories, by vector id (the SQL's tie order), ready to search."""

    memories: list[Memory]
    vectors: np.ndarray  # (n, dims) float32, unit length; zero rows for another model or dimension
    has_vector: np.ndarray  # bool (n,)
    always_on: np.ndarray  # bool (n,): pinned or identity
    pinned: np.ndarray  # bool (n,)
    expires: np.ndarray  # float64 (n,): POSIX time, inf for never
    recent_order: np.ndarray  # indexes, newest link first
    always_order: np.ndarray  # indexes, pinned first, then newest statement first
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # lexeme → (indexes, tf)
    dl: np.ndarray  # float64 (n,): distinct words of each memory
    access_count: np.ndarray  # int64 (n,), this process's uses added
    last_accessed: list[datetime | None]
    tokens: list[Tokens | None]  # the states of each memory's words, for late interaction (memory/late.py)
    position: dict[str, int] = field(repr=False)  # vector id → index
    rows: tuple[snapshot.LinkRow, ...] = field(default=(), repr=False)  # what it was built from (embeddings
    #                                                    as views of `vectors`): the base of the next read
    nbytes: int = 0

    @classmethod
    def of(cls, rows: Sequence[snapshot.LinkRow], model: str,
           tokenize: Callable[[list[str]], list[Tokens]] | None = None, base: UserIndex | None = None) -> UserIndex:
        """The index of `rows`; with `tokenize`, the states of each memory's words too (kept from `base`, the
        index read before, for the memories whose text did not change)."""
        n = len(rows)
        tokens: list[Tokens | None] = [None] * n
        if tokenize is not None and n <= LATE_MAX_MEMORIES:
            tokens = _word_states(rows, tokenize, base)
        dims = max((len(r.embedding) for r in rows if r.embedding_model == model), default=0)
        has_vector = np.array([r.embedding_model == model and len(r.embedding) == dims for r in rows], dtype=bool)
        vectors = np.zeros((n, dims), dtype=np.float32)
        if has_vector.any():
            vectors[has_vector] = np.stack([r.embedding for r, ok in zip(rows, has_vector, strict=True) if ok])
        norms = np.linalg.norm(vectors, axis=1)
        has_vector &= norms > 0
        vectors[has_vector] /= norms[has_vector, None]
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, r in enumerate(rows):
            for lexeme, tf in r.terms.items():
                entry = postings.setdefault(lexeme, ([], []))
                entry[0].append(i)
                entry[1].append(tf)
        pinned = np.array([r.pinned for r in rows], dtype=bool)
        stated = np.array([r.stated_at.timestamp() for r in rows])
        linked = np.array([r.linked_at.timestamp() for r in rows])
        return cls(
            memories=[Memory(id=r.id, content=r.content, created_at=r.created_at, stated_at=r.stated_at,
                             memory_type=r.memory_type, pinned=r.pinned) for r in rows],
            vectors=vectors, has_vector=has_vector, pinned=pinned,
            always_on=pinned | np.array([r.identity for r in rows], dtype=bool),
            expires=np.array([r.expires_at.timestamp() if r.expires_at else _NEVER for r in rows]),
            recent_order=np.lexsort((np.arange(n), -linked)) if n else np.zeros(0, dtype=np.int64),
            always_order=np.lexsort((np.arange(n), -stated, ~pinned)) if n else np.zeros(0, dtype=np.int64),
            postings={w: (np.array(ix, dtype=np.int64), np.array(tf, dtype=np.float64))
                      for w, (ix, tf) in postings.items()},
            dl=np.array([len(r.terms) for r in rows], dtype=np.float64),
            access_count=np.array([r.access_count for r in rows], dtype=np.int64),
            last_accessed=[r.last_accessed_at for r in rows],
            tokens=tokens,
            position={r.id: i for i, r in enumerate(rows)},
            rows=_sharing(rows, vectors, has_vector),
            nbytes=vectors.nbytes + n * ROW_OVERHEAD_BYTES + sum(t.nbytes for t in tokens if t is not None))

    def search(self, embedding: Sequence[float] | None, text: str, *, limit: int, mode: str, rrf_k: int,
               weights: tuple[float, float], tiers: bool, now: datetime, word_states: np.ndarray | None = None,
               late_weight: float = 0.0) -> Found:
        """What store.search.search returns for this user (see the module docstring for the differences);
        with the states of the query's words and a `late_weight`, the candidates' fused scores also hold
        the late-interaction arm (memory/late.py), when this index holds the states of their words."""
        live = self.pinned | (self.expires > now.timestamp())
        found = Found()
        if tiers:
            always = self.always_order[(self.always_on & live)[self.always_order]][:ALWAYS_ON_LIMIT]
            found.always_on.extend(self.memories[i] for i in always)
            found.recent.extend(self.memories[i] for i in self.recent_order[live[self.recent_order]][:RECENT_LIMIT])
        if embedding is None or not self.memories:
            return found
        n = max(limit, 50)
        query = np.asarray(embedding, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        comparable = self.has_vector & (len(query) == self.vectors.shape[1] and norm > 0)  # as the SQL's dims check
        cosine = np.full(len(self.memories), -1.0)
        if comparable.any():
            cosine = np.where(comparable, self.vectors @ (query / norm), -1.0)
        fused = np.zeros(len(self.memories))
        if mode != "text":
            fused += _rrf(np.where(comparable & live, cosine, -np.inf), n, weights[0], rrf_k)
        words = query_lexemes(text) if text else []
        bm25, matched = self._bm25(words if mode != "vector" else [])
        if mode != "vector":
            fused += _rrf(np.where(live & (matched > 0), bm25, -np.inf), n, weights[1], rrf_k)
        top = _best(np.where(fused > 0, fused, -np.inf), limit)
        if (word_states is not None and len(word_states) and late_weight > 0  # a query of stop words has none
                and any(self.tokens[i] is not None for i in top)):
            late_scores = late.maxsim(word_states, [self.tokens[i] for i in top])
            fused[top] += _rrf(late_scores, len(top), late_weight, rrf_k)
            found = replace(found, late_weight=late_weight)
        picked, has_vector = self.vectors[top], self.has_vector[top]
        similar = np.where(has_vector[:, None] & has_vector[None, :], picked @ picked.T, 0.0).tolist()
        found.hits.extend(  # columns as Python lists first: a numpy scalar per field cost more than the search
            SearchHit(memory=self.memories[i], fused=f, cosine=c, matched_terms=m, query_terms=len(words),
                      access_count=a, last_accessed_at=self.last_accessed[i], similar=tuple(s))
            for i, f, c, m, a, s in zip(top.tolist(), fused[top].tolist(), cosine[top].tolist(), matched[top].tolist(),
                                        self.access_count[top].tolist(), similar, strict=True))
        return found

    def used(self, memory_ids: Sequence[str], at: datetime) -> None:
        """Count one use of each memory (what memory/uses.py writes to the database in its next batch)."""
        for memory_id in memory_ids:
            i = self.position.get(memory_id)
            if i is not None:
                self.access_count[i] += 1
                self.last_accessed[i] = at

    def _bm25(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of every memory for the query's words (store/search.py's formula), and the words it holds."""
        total, matched = np.zeros(len(self.memories)), np.zeros(len(self.memories), dtype=np.int64)
        n = len(self.memories)
        avgdl = float(self.dl.mean()) or 1.0
        for word in words:
            posted = self.postings.get(word)
            if posted is None or len(posted[0]) > max(COMMON_TERM_SHARE * n, 1):
                continue
            ix, tf = posted
            idf = math.log(1 + (n - len(ix) + 0.5) / (len(ix) + 0.5))
            total[ix] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * self.dl[ix] / avgdl))
            matched[ix] += 1
        return total, matched


def _word_states(rows: Sequence[snapshot.LinkRow], tokenize: Callable[[list[str]], list[Tokens]],
                 base: UserIndex | None) -> list[Tokens | None]:
    """Each row's word states: `base`'s for a memory whose text it already read (a use count or a pin gives
    a row a new version, not new words), the local model's for the others (~3 ms a memory)."""
    known = {(r.content, r.stated_at): t for r, t in zip(base.rows, base.tokens, strict=True)} if base else {}
    states = [known.get((r.content, r.stated_at)) for r in rows]
    missing = [i for i, t in enumerate(states) if t is None]
    if missing:
        for i, computed in zip(missing, tokenize([embedding_text(rows[i].content, rows[i].stated_at)
                                                  for i in missing]), strict=True):
            states[i] = computed
    return states


def _sharing(rows: Sequence[snapshot.LinkRow], vectors: np.ndarray,
             has_vector: np.ndarray) -> tuple[snapshot.LinkRow, ...]:
    """`rows` whose embeddings are now views of `vectors` (unit length): each vector is held once. (A
    dataclasses.replace per row was a third of the build: 10 ms at 1,000 memories.)"""
    for i in np.flatnonzero(has_vector):
        rows[int(i)].embedding = vectors[i]
    return tuple(rows)


def _rrf(scores: np.ndarray, n: int, weight: float, rrf_k: int) -> np.ndarray:
    """weight / (k + rank) for the `n` best scores (-inf: not in this arm), 0 for the rest."""
    contribution = np.zeros(len(scores))
    ranked = _best(scores, n)
    contribution[ranked] = weight / (rrf_k + np.arange(1, len(ranked) + 1))
    return contribution


def _best(scores: np.ndarray, n: int) -> np.ndarray:
    """Indexes of the `n` highest finite scores, best first, ties by position (vector id order)."""
    order = np.argsort(-scores, kind="stable")[:max(n, 0)]
    return order[np.isfinite(scores[order])]


@dataclass(slots=True)
class _Load:
    task: asyncio.Task[None]
    stale: bool = False  # a change was heard while it read: what it read is not stored


@dataclass(slots=True)
class _Entry:
    user_id: str
    index: UserIndex | None  # None: searched in SQL by size (too few memories, or too many)
    stale: bool = False  # a change was heard since: not served; its rows are the base of the next read

    @property
    def nbytes(self) -> int:
        return self.index.nbytes if self.index is not None else 0


class Indexes:
    """The per-user indexes of one process: bounded, loaded in the background, kept true by LISTEN."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, *, model: str, budget_bytes: int,
                 tokenize: Callable[[list[str]], list[Tokens]] | None = None) -> None:
        self._pool, self._model, self._budget, self._tokenize = pool, model, budget_bytes, tokenize
        self._held: OrderedDict[str, _Entry] = OrderedDict()  # by user key, least recently searched first
        self._bytes = 0
        self._loading: dict[str, _Load] = {}
        self._loads = asyncio.Semaphore(CONCURRENT_LOADS)
        self._echoes: dict[str, asyncio.Event] = {}  # notifications sent to ourselves, set when heard
        self.listening = False

    def get(self, user_id: str) -> UserIndex | None:
        """The user's index, or None (then search in SQL; a load starts in the background if none runs)."""
        if not self.listening or self._budget <= 0:
            INDEX_LOOKUPS.labels("bypass").inc()
            return None
        key = snapshot.user_key(user_id)
        entry = self._held.get(key)
        if entry is not None and entry.user_id == user_id and not entry.stale:
            self._held.move_to_end(key)
            INDEX_LOOKUPS.labels("hit" if entry.index is not None else "sql").inc()
            return entry.index
        INDEX_LOOKUPS.labels("miss").inc()
        if key not in self._loading:
            self._start(user_id, key, entry.index if entry is not None and entry.user_id == user_id else None)
        return None

    def fresh(self, user_id: str) -> UserIndex | None:
        """The user's index if it is held and no change was heard since it was read (no load, no count)."""
        entry = self._held.get(snapshot.user_key(user_id))
        return entry.index if entry is not None and entry.user_id == user_id and not entry.stale else None

    async def ready(self, user_id: str) -> UserIndex | None:
        """The user's index, waiting for a load (tests and benchmarks; a turn never waits)."""
        index = self.get(user_id)
        load = self._loading.get(snapshot.user_key(user_id))
        if index is None and load is not None:
            await asyncio.shield(load.task)
            return self.fresh(user_id)
        return index

    def used(self, user_id: str, memory_ids: Sequence[str]) -> None:
        """Count a turn's injections in the user's index too (memory/uses.py writes them to the database)."""
        entry = self._held.get(snapshot.user_key(user_id))
        if entry is not None and entry.user_id == user_id and entry.index is not None:
            entry.index.used(memory_ids, datetime.now(UTC))

    def changed(self, key: str) -> None:
        """A user's memories changed (their md5 key): their index is no longer served; a load in flight
        read too early."""
        if key in self._echoes:
            self._echoes[key].set()
            return
        if key in self._loading:
            self._loading[key].stale = True
        if key in self._held:
            self._held[key].stale = True
            self._refresh(key)

    def _refresh(self, key: str) -> None:
        """Read a held index again soon after a change, without waiting for the user's next turn (users
        searched in SQL by size wait for it: a read of a user too big to hold can cost seconds)."""
        entry = self._held.get(key)
        if (self.listening and key not in self._loading and entry is not None and entry.stale
                and entry.index is not None):
            self._start(entry.user_id, key, entry.index, delay=REFRESH_DELAY_S)

    def _start(self, user_id: str, key: str, base: UserIndex | None, delay: float = 0.0) -> None:
        self._loading[key] = _Load(asyncio.create_task(self._load(user_id, key, base, delay)))

    def drop_all(self) -> None:
        """Trust nothing held (the listener may have missed changes): every index is read again before use,
        row versions deciding which rows."""
        for load in self._loading.values():
            load.stale = True
        for entry in self._held.values():
            entry.stale = True

    def _drop(self, key: str) -> None:
        entry = self._held.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
        INDEX_USERS.set(len(self._held))

    async def _load(self, user_id: str, key: str, base: UserIndex | None, delay: float = 0.0) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
                self._loading[key].stale = False  # what was heard so far was committed before this read
            held = {row.id: row for row in base.rows} if base is not None else None
            async with self._loads, asyncio.timeout(LOAD_TIMEOUT_S), self._pool.connection() as conn:
                rows = await snapshot.read_user(conn, user_id, MAX_MEMORIES, held)
            index = None
            if rows is not None and len(rows) >= COLD_START_THRESHOLD:  # fewer: global memories are searched too
                index = await asyncio.to_thread(UserIndex.of, rows, self._model, self._tokenize, base)
                if index.nbytes > self._budget / 8 and self._tokenize is not None:  # word states are most of it
                    index = await asyncio.to_thread(UserIndex.of, rows, self._model)
                if index.nbytes > self._budget / 8:
                    index = None
            if not self._loading[key].stale and self.listening:
                self._store(key, _Entry(user_id, index))
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError, TimeoutError) as exc:
            log.warning("memory_index_load_failed", error=f"{type(exc).__name__}: {exc}"[:300])
        except Exception:  # noqa: BLE001 - a bug here must not break chat: the user is searched in SQL
            log.exception("memory_index_load_failed")
        finally:
            load = self._loading.pop(key)
        if load.stale:
            self._refresh(key)  # overtaken by a change: read again once the burst is over (not if cancelled)

    def _store(self, key: str, entry: _Entry) -> None:
        self._drop(key)
        self._held[key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self._budget or len(self._held) > MAX_USERS:
            self._drop(next(iter(self._held)))
        INDEX_USERS.set(len(self._held))

    async def run(self, conninfo: str, stop: asyncio.Event) -> None:
        """Listen for changes until `stop`; reconnect with backoff, trusting no index while not listening."""
        delay = 1.0
        while not stop.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **LISTENER_OPTIONS) as conn:
                    tasks = [asyncio.create_task(self._listen(conn)), asyncio.create_task(self._beat()),
                             asyncio.create_task(stop.wait())]
                    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                    for task in tasks:
                        task.cancel()
                    for task in tasks[:2]:
                        with suppress(asyncio.CancelledError):
                            await task  # an error of the listener or the heartbeat is raised here
                    delay = 1.0
            except (psycopg.Error, psycopg_pool.PoolTimeout, OSError, TimeoutError) as exc:
                log.warning("memory_index_listener_lost", error=f"{type(exc).__name__}: {exc}"[:300], retry_in_s=delay)
            finally:
                self.listening = False
                self.drop_all()
            if not stop.is_set():
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, LISTEN_RETRY_MAX_S)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await snapshot.listen(conn)
        self.drop_all()  # whatever changed before LISTEN was not heard: start from the database again
        self.listening = True
        async for key in snapshot.changes(conn):
            self.changed(key)

    async def caught_up(self) -> None:
        """Return once the listener heard every change committed before this call: a notification sent to
        ourselves now arrives after them (notifications arrive in commit order)."""
        key = f"echo-{uuid.uuid4().hex}"
        self._echoes[key] = heard = asyncio.Event()
        try:
            async with self._pool.connection() as conn:
                await snapshot.notify(conn, key)
            await heard.wait()
        finally:
            del self._echoes[key]

    async def _beat(self) -> None:
        """Every HEARTBEAT_S, prove the listener still hears within HEARTBEAT_TIMEOUT_S, or raise: a dead link,
        or LISTEN behind a transaction-mode pooler, would otherwise leave every index stale for good."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            async with asyncio.timeout(HEARTBEAT_TIMEOUT_S):
                await self.caught_up()
