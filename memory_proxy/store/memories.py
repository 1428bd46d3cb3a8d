"""Memories in SQL: insert + link (with the exact-duplicate guard), use counts, history (search: search.py).

Each function that reads or writes a user's links runs in that user's row-level security scope
(scope.py): its own transaction on an idle connection, else the caller's transaction as scoped.
`vectors` and `global_vectors` have no owner column and no policy (see memory_proxy/store/migrations/0004).

A user's *active* memories are their links with `superseded_at IS NULL` whose vector has not expired
(or is pinned). A superseded link stays for the history (memory_proxy/store/migrations/0005).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from ..records import FactAttributes
from ..redact.scan_pool import SMALL_TEXT_CHARS, redact_small
from .scope import in_all_users, in_user_scope
from .search import as_vector

MAX_REASON_CHARS = 500  # of an audit row's reason: the API refuses a longer one, other writers are cut


async def insert_vector(conn: AsyncConnection[Any], *, content: str, embedding: Sequence[float], model: str,
                        stated_at: datetime | None = None, metadata: dict[str, Any] | None = None,
                        attributes: FactAttributes | None = None) -> str:
    """Store one text and its vector. Every stored memory passes here: secrets are redacted as the last
    line of defence (callers redact before embedding, so this normally changes nothing)."""
    vector_id = str(uuid.uuid4())
    if len(content) <= SMALL_TEXT_CHARS:  # a longer one is over the database's 2 KB check: refused, unread
        content = (await redact_small(content)).text
    facts = attributes or FactAttributes()
    await conn.execute(
        "INSERT INTO vectors (id, embedding, embedding_model, content, metadata, stated_at, memory_type,"
        " expires_at) VALUES (%s, %s, %s, %s, %s, coalesce(%s, now()), %s, %s)",
        [vector_id, as_vector(embedding), model, content, Jsonb(metadata or {"type": "memory"}), stated_at,
         facts.memory_type, facts.expires_at],
    )
    return vector_id


async def link_vector(conn: AsyncConnection[Any], user_id: str, vector_id: str, pinned: bool = False) -> bool:
    """Link a vector to a user; False when the user already holds the same text (unique guard)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "INSERT INTO users_vectors"
            " (user_id, vector_id, content_key, embedding_model, embedding_bq, search_text, pinned)"
            " SELECT %s, id, content_key, embedding_model, binary_quantize(embedding), search_text, %s"
            " FROM vectors WHERE id = %s"
            " ON CONFLICT (user_id, content_key) WHERE superseded_at IS NULL DO NOTHING RETURNING vector_id",
            [user_id, pinned, vector_id],
        )
        return await cur.fetchone() is not None


async def add_memory(conn: AsyncConnection[Any], *, user_id: str, content: str, embedding: Sequence[float],
                     model: str, stated_at: datetime | None = None, metadata: dict[str, Any] | None = None,
                     attributes: FactAttributes | None = None, pinned: bool = False) -> str | None:
    """Store a new memory for `user_id` in the caller's transaction (or a scope of its own); None if the
    user already has it. `pinned` only carries a pin over to a new version (an edit): pinning a memory
    is `set_pinned`, which audits it."""
    async with in_user_scope(conn, user_id):
        vector_id = await insert_vector(conn, content=content, embedding=embedding, model=model,
                                        stated_at=stated_at, metadata=metadata, attributes=attributes)
        if await link_vector(conn, user_id, vector_id, pinned):
            return vector_id
        await conn.execute("DELETE FROM vectors WHERE id = %s", [vector_id])
        return None


async def add_or_find_memory(conn: AsyncConnection[Any], *, user_id: str, content: str,
                             embedding: Sequence[float], model: str, stated_at: datetime | None = None,
                             metadata: dict[str, Any] | None = None, attributes: FactAttributes | None = None) -> str:
    """`add_memory` in a transaction of its own; the id of the memory, the existing one when the user
    already holds the same text."""
    async with in_user_scope(conn, user_id):
        new_id = await add_memory(conn, user_id=user_id, content=content, embedding=embedding, model=model,
                                  stated_at=stated_at, metadata=metadata, attributes=attributes)
    return new_id or await find_same_text(conn, user_id, content) or ""


async def add_global_memory(conn: AsyncConnection[Any], *, content: str, embedding: Sequence[float],
                            model: str) -> str:
    """A global (cold-start) memory; the same text is stored once."""
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT g.vector_id FROM global_vectors g JOIN vectors v ON v.id = g.vector_id"
            " WHERE v.content_key = memory_key(%s) AND v.embedding_model = %s", [content, model])
        if row := await cur.fetchone():
            return str(row[0])
        vector_id = await insert_vector(conn, content=content, embedding=embedding, model=model,
                                        metadata={"type": "global"})
        await conn.execute("INSERT INTO global_vectors (vector_id) VALUES (%s)", [vector_id])
    return vector_id


async def find_same_text(conn: AsyncConnection[Any], user_id: str, content: str) -> str | None:
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT vector_id FROM users_vectors WHERE user_id = %s AND content_key = memory_key(%s)"
            " AND superseded_at IS NULL", [user_id, content])
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def record_uses(conn: AsyncConnection[Any], uses: Sequence[tuple[str, str, int, datetime]]) -> None:
    """Add (user, memory, uses, last used) counts to the users' links in one statement: a batch of many
    users' counts is cross-user by nature (retrieval/use_counts.py); each row still names its own user."""
    users, ids, counts, times = (list(column) for column in zip(*uses, strict=True))
    async with in_all_users(conn):
        await conn.execute(
            "UPDATE users_vectors uv SET access_count = uv.access_count + u.n,"
            " last_accessed_at = greatest(uv.last_accessed_at, u.at)"
            " FROM unnest(%s::text[], %s::text[], %s::int[], %s::timestamptz[]) AS u(user_id, vector_id, n, at)"
            " WHERE uv.user_id = u.user_id AND uv.vector_id = u.vector_id", [users, ids, counts, times])


async def supersede_memory(conn: AsyncConnection[Any], *, user_id: str, old_id: str, new_id: str,
                           reason: str, action: str = "replace") -> None:
    """Retire `old_id` for this user only (the vector stays: others may share it, and the link stays for
    the history, pointing at its replacement) and audit it."""
    async with in_user_scope(conn, user_id):
        await conn.execute(
            "UPDATE users_vectors SET superseded_by = %s, superseded_at = now()"
            " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL", [new_id, user_id, old_id])
        await audit(conn, user_id=user_id, old_id=old_id, new_id=new_id, reason=reason, action=action)


async def retire_memory(conn: AsyncConnection[Any], *, user_id: str, vector_id: str, reason: str,
                        action: str) -> bool:
    """Retire the user's active memory without a replacement (the vector stays for other users and the
    history) and audit it as `action` (delete, forget). False when the user has no such active memory."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "UPDATE users_vectors SET superseded_at = now(), superseded_by = NULL"
            " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL RETURNING vector_id",
            [user_id, vector_id])
        found = await cur.fetchone() is not None
        if found:
            await audit(conn, user_id=user_id, old_id=vector_id, new_id=None, reason=reason, action=action)
    return found


async def set_pinned(conn: AsyncConnection[Any], user_id: str, vector_id: str, pinned: bool,
                     reason: str | None = None) -> bool:
    """Pin or unpin an active memory, audited as pin / unpin when it changes (the one place a pin is set);
    False when the user has no such active memory."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute("SELECT pinned FROM users_vectors WHERE user_id = %s AND vector_id = %s"
                                 " AND superseded_at IS NULL FOR UPDATE", [user_id, vector_id])
        row = await cur.fetchone()
        if row is None:
            return False
        if row[0] != pinned:
            await conn.execute("UPDATE users_vectors SET pinned = %s WHERE user_id = %s AND vector_id = %s",
                               [pinned, user_id, vector_id])
            await audit(conn, user_id=user_id, old_id=vector_id, new_id=vector_id,
                        reason=reason or ("pinned by the user" if pinned else "unpinned by the user"),
                        action="pin" if pinned else "unpin")
    return True


async def audit(conn: AsyncConnection[Any], *, user_id: str, old_id: str | None, new_id: str | None,
                reason: str, action: str) -> None:
    """Record a change. `reason` may be a user's free text (management API, which refuses a longer one) or a
    model's: cut to MAX_REASON_CHARS, then redacted like a memory."""
    reason = (await redact_small(reason[:MAX_REASON_CHARS])).text
    async with in_user_scope(conn, user_id):
        await conn.execute(
            "INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason, action)"
            " VALUES (%s, %s, %s, %s, %s)", [user_id, old_id, new_id, reason, action])


class RestoreConflict(Exception):
    """The memory cannot be restored: it is not a superseded memory of this user, or the same text is active."""


class MemoryCapReached(Exception):
    """The user holds MAX_MEMORIES_PER_USER active memories: no memory is added or brought back."""


async def restore_memory(conn: AsyncConnection[Any], *, user_id: str, vector_id: str, max_memories: int,
                         reason: str = "") -> str | None:
    """Undo a replacement: `vector_id` (superseded) is active again and what replaced it, if still active,
    is superseded by it; both audited as `restore`. Returns the id it took the place of. A restore that
    adds an active memory (what replaced it is gone too: a deleted memory) needs room under `max_memories`
    (else MemoryCapReached), as a new memory does."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT superseded_by FROM users_vectors WHERE user_id = %s AND vector_id = %s"
            " AND superseded_at IS NOT NULL FOR UPDATE", [user_id, vector_id])
        row = await cur.fetchone()
        if row is None:
            raise RestoreConflict(f"{vector_id} is not a superseded memory of this user")
        replacement = row[0]
        swapped = None
        if replacement:
            swapped = await conn.execute(
                "UPDATE users_vectors SET superseded_by = %s, superseded_at = now()"
                " WHERE user_id = %s AND vector_id = %s AND superseded_at IS NULL RETURNING vector_id",
                [vector_id, user_id, replacement])
        if (swapped is None or await swapped.fetchone() is None) and (
                await count_memories(conn, user_id, lock=True) >= max_memories):
            raise MemoryCapReached(f"this user holds {max_memories} active memories (MAX_MEMORIES_PER_USER)")
        cur = await conn.execute(
            "UPDATE users_vectors uv SET superseded_by = NULL, superseded_at = NULL"
            " WHERE user_id = %s AND vector_id = %s AND NOT EXISTS (SELECT 1 FROM users_vectors o"
            "  WHERE o.user_id = uv.user_id AND o.content_key = uv.content_key AND o.superseded_at IS NULL)"
            " RETURNING vector_id", [user_id, vector_id])
        if await cur.fetchone() is None:  # (rowcount is unknown until a pipelined result is fetched)
            raise RestoreConflict("the same text is already an active memory of this user")
        await audit(conn, user_id=user_id, old_id=replacement, new_id=vector_id,
                    reason=reason or "restored by the user", action="restore")
    return str(replacement) if replacement else None


@dataclass(frozen=True, slots=True)
class LockedLink:
    """A user's active memory, its link locked until the transaction ends."""
    embedding: Any  # pgvector Vector
    stated_at: datetime
    pinned: bool


async def lock_active_link(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> LockedLink | None:
    """Lock the user's link to an active memory (until the transaction ends) and read it; None if the
    user no longer holds it (already superseded, e.g. by another job or edit)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT v.embedding, v.stated_at, uv.pinned FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            " WHERE uv.user_id = %s AND uv.vector_id = %s AND uv.superseded_at IS NULL FOR UPDATE OF uv",
            [user_id, vector_id])
    row = await cur.fetchone()
    return LockedLink(*row) if row else None


async def count_memories(conn: AsyncConnection[Any], user_id: str, *, lock: bool = False,
                         episodes: bool = False) -> int:
    """The user's active memories (superseded ones are history, not memories): their facts, or with `episodes`
    their episodes (each kind has its cap). With `lock`, inside the caller's transaction, first wait for the
    user's count lock and hold it to the transaction's end: two writers that each count before adding cannot
    both take the last place under the cap."""
    async with in_user_scope(conn, user_id):
        if lock:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('memory-proxy active ' || %s, 0))",
                               [user_id])
        cur = await conn.execute(
            "SELECT count(*) FROM users_vectors WHERE user_id = %s AND superseded_at IS NULL AND episode = %s",
            [user_id, episodes])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def retire_oldest_episodes(conn: AsyncConnection[Any], user_id: str, count: int) -> int:
    """Retire the user's `count` oldest unpinned episodes (MAX_EPISODES_PER_USER: room for newer ones), audited as
    `expire`; how many were."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(
            "WITH oldest AS (SELECT uv.vector_id FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
            "   WHERE uv.user_id = %(u)s AND uv.superseded_at IS NULL AND uv.episode AND NOT uv.pinned"
            "   ORDER BY v.stated_at, v.id LIMIT %(n)s FOR UPDATE OF uv),"
            " retired AS (UPDATE users_vectors uv SET superseded_at = now(), superseded_by = NULL FROM oldest o"
            "   WHERE uv.user_id = %(u)s AND uv.vector_id = o.vector_id RETURNING uv.vector_id)"
            " INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason, action)"
            " SELECT %(u)s, vector_id, NULL, 'over MAX_EPISODES_PER_USER: the oldest episode', 'expire' FROM retired"
            " RETURNING old_vector_id", {"u": user_id, "n": count})
        return len(await cur.fetchall())


async def add_within_cap(conn: AsyncConnection[Any], *, user_id: str, max_memories: int, content: str,
                         embedding: Sequence[float], model: str, stated_at: datetime | None = None,
                         metadata: dict[str, Any] | None = None, attributes: FactAttributes | None = None) -> str:
    """`add_or_find_memory` for a new memory that needs room under `max_memories` (MemoryCapReached
    otherwise), counted under the user's count lock in the transaction that adds it."""
    async with in_user_scope(conn, user_id):
        if await count_memories(conn, user_id, lock=True) >= max_memories:
            raise MemoryCapReached(f"this user holds {max_memories} active memories (MAX_MEMORIES_PER_USER)")
        new_id = await add_memory(conn, user_id=user_id, content=content, embedding=embedding, model=model,
                                  stated_at=stated_at, metadata=metadata, attributes=attributes)
    return new_id or await find_same_text(conn, user_id, content) or ""


async def memory_totals(conn: AsyncConnection[Any]) -> tuple[int, int]:
    """(active user-memory links, users holding any) — for the totals gauges (all users)."""
    async with in_all_users(conn):
        cur = await conn.execute(
            "SELECT count(*), count(DISTINCT user_id) FROM users_vectors WHERE superseded_at IS NULL")
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
