"""Users' memories held in the proxy between turns, so that a chat turn searches without the database.

PostgreSQL stays the source of truth. The first turn of a user is searched there (store/search.py) while
the user's active memories are read whole in the background (store/snapshot.py) into a `UserIndex`
(retrieval/user_index.py), which later turns search in memory with the SQL statement's rules.

Staying true to the database:
- every change to a user's memories notifies `memory_changed` with md5(user id) at commit (0008); the
  listener (`Indexes.run`, one connection per process) stops serving that user's index and, REFRESH_DELAY_S
  later, reads again only the rows whose version changed. A turn that comes first is searched in SQL. Until
  a notification arrives, what a search here found is confirmed still active before it is injected
  (retrieval/retrieve.py `_still_active`): a change only ever delays a new memory, never lets a deleted one in;
- while the listener is not connected or fails its heartbeat (a notification to itself every HEARTBEAT_S),
  no index is used, and every index is read again (by version) once it listens: a notification missed is
  an index never trusted; a read that a notification overtook is thrown away, never stored;
- expiry is checked at search time; use counts are the database's at the last read plus this process's
  own (`used`), since the per-second use-count writes do not notify.
Memory is bounded: RETRIEVAL_INDEX_MB for all users, least recently searched dropped first; a user bigger
than an eighth of it, or over MAX_MEMORIES, is searched in SQL, as one with fewer than COLD_START_THRESHOLD
memories (the global memories are searched with theirs). A team's memories are held the same way, under
the principal "team:<id>" (every member's turns search the one index), up to a quarter of the budget and
whatever their number.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg_pool

from ..observability import INDEX_LOOKUPS, INDEX_USERS, log
from ..store import snapshot
from ..store.scoring import COLD_START_THRESHOLD
from ..store.teams import Holder, TeamRef
from .late_interaction import Tokens
from .user_index import UserIndex

__all__ = ["Indexes", "UserIndex"]

MAX_MEMORIES = 50_000  # users with more are searched in SQL (a load would take seconds)
USER_SHARE, TEAM_SHARE = 8, 4  # one index holds at most this fraction of the budget; a team's serves every member
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
        self._teams: OrderedDict[str, tuple[TeamRef, ...]] = OrderedDict()  # by user: their teams last seen
        self.listening = False

    def teams_of(self, user_id: str) -> tuple[TeamRef, ...] | None:
        """The user's teams when their last turn was searched here (None: not seen yet). A hint only: it
        says which teams to search, and every search reads the memberships again (retrieval/retrieve.py)."""
        return self._teams.get(user_id)

    def saw_teams(self, user_id: str, teams: tuple[TeamRef, ...]) -> None:
        self._teams[user_id] = teams
        self._teams.move_to_end(user_id)
        if len(self._teams) > MAX_USERS:
            self._teams.popitem(last=False)

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
        """Count a turn's injections in the user's index too (retrieval/use_counts.py writes them to the database)."""
        entry = self._held.get(snapshot.user_key(user_id))
        if entry is not None and entry.user_id == user_id and entry.index is not None:
            entry.index.used(memory_ids, datetime.now(UTC))

    def changed(self, key: str) -> None:
        """A user's memories changed (their md5 key): their index is not served until read again; a load in flight
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
            # A user with fewer memories is searched in SQL, with the global memories; a team never is.
            team = Holder(user_id).is_team
            if rows is not None and (len(rows) >= COLD_START_THRESHOLD or team):
                cap = self._budget / (TEAM_SHARE if team else USER_SHARE)
                index = await asyncio.to_thread(UserIndex.of, rows, self._model, self._tokenize, base)
                if index.nbytes > cap and self._tokenize is not None:  # word states are most of it
                    index = await asyncio.to_thread(UserIndex.of, rows, self._model)
                if index.nbytes > cap:
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
