"""One user's active memories, read whole for the in-process index (retrieval/indexes.py), and the
notifications that say a user's memories changed (memory_proxy/store/migrations/0008).

`read_user` reads, in the user's scope and one transaction, every active link with its fact, vector and
words (`users_vectors.search_text`, as PostgreSQL analyzed them), unless the user has more than
`max_memories` (then None: too big to hold, searched in SQL). `changes` LISTENs on CHANNEL and yields the
payloads: md5 of the user id (`user_key`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from .scope import in_user_scope
from .search import MEMORY_COLUMNS

CHANNEL = "memory_changed"

_COUNT = "SELECT coalesce(max(memories), 0) FROM memory_term_stats WHERE user_id = %s"
# A row's version: the transactions that last wrote its link and its fact. Any change to either (a pin,
# a use count, a re-embedding) gives a new one, so a reader holding older rows re-reads just those.
_VERSION = "uv.xmin::text || '.' || v.xmin::text"
_ACTIVE = (" FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
           " WHERE uv.user_id = %s AND uv.superseded_at IS NULL")
_READ = ("SELECT " + MEMORY_COLUMNS + ", uv.identity, uv.created_at, v.expires_at, uv.access_count,"
         " uv.last_accessed_at, v.embedding_model, v.embedding, uv.search_text::text, " + _VERSION + _ACTIVE)
# By id in bytes order ("C"): under the database's default collation this sort cost several times the read
# itself (docs/BENCHMARKS.md#retrieval-latency); C.UTF-8 sorts by code point, as C does.
_BY_ID = ' ORDER BY v.id COLLATE "C"'
_VERSIONS = "SELECT v.id, " + _VERSION + _ACTIVE + _BY_ID
# A tsvector's text form: 'lexeme':1,4B 'other':2 (quotes doubled inside a lexeme; positions optional)
_TSVECTOR_ENTRY = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


@dataclass(slots=True)
class LinkRow:
    """An active link of the user, with its fact (mutable only so that an index can point `embedding` into
    its own matrix instead of holding each vector twice)."""

    id: str
    content: str
    created_at: datetime
    stated_at: datetime
    memory_type: str
    pinned: bool
    identity: bool
    linked_at: datetime
    expires_at: datetime | None
    access_count: int
    last_accessed_at: datetime | None
    embedding_model: str
    embedding: np.ndarray
    terms: dict[str, int]  # lexeme → its count in the memory (tf)
    version: str  # changes with any write to the link or the fact


def user_key(user_id: str) -> str:
    """The notification payload for `user_id`: md5 of its UTF-8, as the trigger's md5(user_id)."""
    return hashlib.md5(user_id.encode(), usedforsecurity=False).hexdigest()


def terms(tsvector_text: str) -> dict[str, int]:
    """lexeme → tf, from a tsvector's text form (tf: its positions, at least 1; quotes and backslashes
    inside a lexeme come doubled)."""
    return {lexeme.replace("''", "'").replace("\\\\", "\\"): positions.count(",") + 1 if positions else 1
            for lexeme, positions in _TSVECTOR_ENTRY.findall(tsvector_text)}


async def read_user(conn: AsyncConnection[Any], user_id: str, max_memories: int,
                    held: Mapping[str, LinkRow] | None = None) -> list[LinkRow] | None:
    """Every active link of `user_id` with its fact, by vector id; None past `max_memories` links. With
    `held` (rows read before, by id), only the rows whose version changed, or new ones, are read whole."""
    async with in_user_scope(conn, user_id):
        count = await (await conn.execute(_COUNT, [user_id])).fetchone()
        if count is None or count[0] > max_memories:
            return None
        if held is None:
            cur = await conn.execute(_READ + _BY_ID, [user_id], binary=True)
            return [_link_row(row) for row in await cur.fetchall()]
        versions = await (await conn.execute(_VERSIONS, [user_id])).fetchall()
        stale = [vector_id for vector_id, version in versions
                 if vector_id not in held or held[vector_id].version != version]
        fresh: dict[str, LinkRow] = {}
        if stale:
            cur = await conn.execute(_READ + " AND uv.vector_id = ANY(%s)", [user_id, stale], binary=True)
            fresh = {row.id: row for row in map(_link_row, await cur.fetchall())}
    # A row written between the two reads notifies: the caller throws this read away when it hears it.
    return [fresh.get(vector_id) or held[vector_id] for vector_id, _ in versions
            if vector_id in fresh or vector_id in held]


def _link_row(r: Sequence[Any]) -> LinkRow:
    return LinkRow(id=r[0], content=r[1], created_at=r[2], stated_at=r[3], memory_type=r[4], pinned=bool(r[5]),
                   identity=r[6], linked_at=r[7], expires_at=r[8], access_count=r[9], last_accessed_at=r[10],
                   embedding_model=r[11], embedding=r[12].to_numpy(), terms=terms(r[13]), version=r[14])


async def listen(conn: AsyncConnection[Any]) -> None:
    """From now on, `conn` (autocommit, given over to it) hears every change committed anywhere."""
    await conn.execute(f"LISTEN {CHANNEL}")


async def notify(conn: AsyncConnection[Any], key: str) -> None:
    """Send `key` on CHANNEL (the listener's heartbeat: it proves the listener still hears)."""
    await conn.execute("SELECT pg_notify(%s, %s)", [CHANNEL, key])


async def changes(conn: AsyncConnection[Any]) -> AsyncIterator[str]:
    """The user keys of the changes `conn` hears, as they come (after `listen`)."""
    async for notification in conn.notifies():
        yield notification.payload
