"""One user's active memories, read whole for the in-process index (memory/index.py), and the
notifications that say a user's memories changed (db/migrations/0008).

`read_user` reads, in the user's scope and one transaction, every active link with its fact, vector and
words (`users_vectors.search_text`, as PostgreSQL analyzed them), unless the user has more than
`max_memories` (then None: too big to hold, searched in SQL). `changes` LISTENs on CHANNEL and yields the
payloads: md5 of the user id (`user_key`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from .scope import in_user_scope
from .search import MEMORY_COLUMNS

CHANNEL = "memory_changed"

_COUNT = "SELECT coalesce(max(memories), 0) FROM memory_term_stats WHERE user_id = %s"
_READ = ("SELECT " + MEMORY_COLUMNS + ", uv.identity, uv.created_at, v.expires_at, uv.access_count,"
         " uv.last_accessed_at, v.embedding_model, v.embedding, uv.search_text::text"
         " FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
         " WHERE uv.user_id = %s AND uv.superseded_at IS NULL ORDER BY v.id")
# A tsvector's text form: 'lexeme':1,4B 'other':2 (quotes doubled inside a lexeme; positions optional)
_TSVECTOR_ENTRY = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


@dataclass(frozen=True, slots=True)
class LinkRow:
    """An active link of the user, with its fact."""

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


def user_key(user_id: str) -> str:
    """The notification payload for `user_id`: md5 of its UTF-8, as the trigger's md5(user_id)."""
    return hashlib.md5(user_id.encode(), usedforsecurity=False).hexdigest()


def terms(tsvector_text: str) -> dict[str, int]:
    """lexeme → tf, from a tsvector's text form (tf: its positions, at least 1)."""
    return {lexeme.replace("''", "'"): positions.count(",") + 1 if positions else 1
            for lexeme, positions in _TSVECTOR_ENTRY.findall(tsvector_text)}


async def read_user(conn: AsyncConnection[Any], user_id: str, max_memories: int) -> list[LinkRow] | None:
    """Every active link of `user_id` with its fact, by vector id; None past `max_memories` links."""
    async with in_user_scope(conn, user_id):
        count = await (await conn.execute(_COUNT, [user_id])).fetchone()
        if count is None or count[0] > max_memories:
            return None
        cur = await conn.execute(_READ, [user_id], binary=True)
        rows = await cur.fetchall()
    return [LinkRow(id=r[0], content=r[1], created_at=r[2], stated_at=r[3], memory_type=r[4], pinned=bool(r[5]),
                    identity=r[6], linked_at=r[7], expires_at=r[8], access_count=r[9], last_accessed_at=r[10],
                    embedding_model=r[11], embedding=r[12].to_numpy(), terms=terms(r[13])) for r in rows]


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
