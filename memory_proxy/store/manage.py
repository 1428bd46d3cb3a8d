"""Management SQL: list, get, edit, pin, delete, history, export and erase one user's memories.

Every function acts for ONE holder (a user, or a team's principal) inside its row-level security scope
(scope.py), so PostgreSQL itself keeps a caller to that holder's links and audit rows. The exceptions see
every holder's rows, for what a user wrote in teams (`export`, `erase_user`: by `author` and `actor`,
memory_proxy/store/migrations/0014, in teams the user may have left since), and for the last step of `erase_user`: deleting
vectors no longer linked by anyone.

Audit actions written here (memory_updates.action): edit (old → new version) and delete (old only); pin
and unpin (old = new = the memory) by memories.set_pinned. A deleted memory is a retired link
(`superseded_at` set, `superseded_by` NULL): no longer retrieved, kept for the history, restorable;
`erase_user` removes it all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from ..records import FactAttributes
from . import memories
from .scope import all_users, in_all_users, user_scope
from .search import LIVE as _LIVE

_COLUMNS = (f"v.id, v.content, v.memory_type, uv.pinned, uv.created_at, v.stated_at, v.expires_at, uv.access_count,"
            f" uv.last_accessed_at, uv.superseded_at, uv.superseded_by, uv.superseded_at IS NULL AND {_LIVE}")
_NAMES = ("id", "content", "memory_type", "pinned", "created_at", "stated_at", "expires_at", "access_count",
          "last_accessed_at", "superseded_at", "superseded_by", "active")
_FROM = "FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id WHERE uv.user_id = %(user)s"
_UPDATE_COLUMNS = "id::text, action, reason, old_vector_id, new_vector_id, created_at, actor"
_UPDATE_NAMES = ("id", "action", "reason", "old_id", "new_id", "created_at", "actor")


class EditConflict(Exception):
    """The edited text is already another active memory of this user."""


def _rows(rows: Sequence[Sequence[Any]], names: Sequence[str] = _NAMES) -> list[dict[str, Any]]:
    return [dict(zip(names, row, strict=True)) for row in rows]


async def list_memories(conn: AsyncConnection[Any], user_id: str, *, memory_type: str | None = None,
                        pinned: bool | None = None, text: str | None = None,
                        after: tuple[datetime, str] | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Active memories, newest first; `text` matches words (stemmed) or any substring; `after` is the
    (created_at, id) of the last memory of the previous page."""
    sql = f"SELECT {_COLUMNS} {_FROM} AND uv.superseded_at IS NULL AND {_LIVE}"
    params: dict[str, Any] = {"user": user_id, "limit": limit}
    if memory_type:
        sql += " AND v.memory_type = %(type)s"
        params["type"] = memory_type
    if pinned is not None:
        sql += " AND uv.pinned = %(pinned)s"
        params["pinned"] = pinned
    if text:
        sql += (" AND (v.search_text @@ websearch_to_tsquery('english', %(text)s)"
                " OR v.content ILIKE '%%' || %(like)s || '%%')")
        params["text"] = text
        params["like"] = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    if after:
        sql += " AND (uv.created_at, v.id) < (%(after_at)s, %(after_id)s)"
        params["after_at"], params["after_id"] = after
    sql += " ORDER BY uv.created_at DESC, v.id DESC LIMIT %(limit)s"
    async with user_scope(conn, user_id):
        cur = await conn.execute(sql, params)
    return _rows(await cur.fetchall())


async def get_memory(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> dict[str, Any] | None:
    """The user's memory (active or not); None when the user holds no link to it."""
    async with user_scope(conn, user_id):
        cur = await conn.execute(f"SELECT {_COLUMNS} {_FROM} AND uv.vector_id = %(id)s",
                                 {"user": user_id, "id": vector_id})
    rows = _rows(await cur.fetchall())
    return rows[0] if rows else None


async def edit_memory(conn: AsyncConnection[Any], user_id: str, vector_id: str, *, content: str,
                      embedding: Sequence[float] | None, model: str, attributes: FactAttributes,
                      reason: str, max_versions: int) -> str | None:
    """Replace an active memory by a new version (new vector; `embedding` None: the old one's), keeping
    its pin and statement time; the old link is superseded by the new one and audited as `edit`; then at
    most `max_versions` versions of it are kept (`keep_versions`).
    Returns the new id; None when the user has no such active memory. Raises EditConflict."""
    async with user_scope(conn, user_id):
        old = await memories.lock_active_link(conn, user_id, vector_id)
        if old is None:
            return None
        # Retire the old link first: the new text may differ from the old only in case or spacing
        # (same content_key), and only one active link per key is allowed.
        await conn.execute("UPDATE users_vectors SET superseded_at = now() WHERE user_id = %s AND vector_id = %s",
                           [user_id, vector_id])
        new_id = await memories.add_memory(
            conn, user_id=user_id, content=content, model=model, stated_at=old.stated_at, attributes=attributes,
            embedding=old.embedding.to_numpy() if embedding is None else embedding, pinned=old.pinned)
        if new_id is None:
            raise EditConflict("the same text is already another active memory of this user")
        await conn.execute("UPDATE users_vectors SET superseded_by = %s WHERE user_id = %s AND vector_id = %s",
                           [new_id, user_id, vector_id])
        await memories.audit(conn, user_id=user_id, old_id=vector_id, new_id=new_id, reason=reason, action="edit")
    await keep_versions(conn, user_id, new_id, max_versions)
    return new_id


_OLDER_VERSIONS = """
WITH RECURSIVE older(id) AS (
    SELECT %(id)s::text
    UNION
    SELECT uv.vector_id FROM older o JOIN users_vectors uv ON uv.user_id = %(user)s AND uv.superseded_by = o.id
)
SELECT uv.vector_id FROM users_vectors uv JOIN older o ON o.id = uv.vector_id
WHERE uv.user_id = %(user)s AND uv.superseded_at IS NOT NULL
ORDER BY uv.created_at DESC, uv.vector_id DESC OFFSET %(keep)s
"""


async def keep_versions(conn: AsyncConnection[Any], user_id: str, vector_id: str, max_versions: int) -> int:
    """MAX_VERSIONS_PER_MEMORY: of the retired versions that `vector_id` replaced (through its link's chain of
    `superseded_by`, edits and replacements), the oldest beyond `max_versions - 1` are deleted with their audit
    rows, then their vectors if nobody links them. The newest stay restorable; a change is never refused for
    its history. Returns how many were deleted."""
    async with user_scope(conn, user_id):
        found = await conn.execute(_OLDER_VERSIONS, {"user": user_id, "id": vector_id, "keep": max_versions - 1})
        dropped = [row[0] for row in await found.fetchall()]
        if dropped:
            await conn.execute("DELETE FROM memory_updates WHERE user_id = %s AND (old_vector_id = ANY(%s)"
                               " OR new_vector_id = ANY(%s))", [user_id, dropped, dropped])
            await conn.execute("DELETE FROM users_vectors WHERE user_id = %s AND vector_id = ANY(%s)",
                               [user_id, dropped])
    await delete_orphan_vectors(conn, dropped)
    return len(dropped)


async def delete_memory(conn: AsyncConnection[Any], user_id: str, vector_id: str, reason: str) -> bool:
    """Retire the user's active memory (the vector stays for other users and the history); audited as
    `delete`. False when the user has no such active memory."""
    return await memories.retire_memory(conn, user_id=user_id, vector_id=vector_id, reason=reason, action="delete")


_CHAIN = """
WITH RECURSIVE chain(id) AS (
    SELECT %(id)s::text
    UNION
    SELECT x.id FROM chain c, LATERAL (
        SELECT u.old_vector_id AS id FROM memory_updates u WHERE u.user_id = %(user)s AND u.new_vector_id = c.id
        UNION ALL
        SELECT u.new_vector_id FROM memory_updates u WHERE u.user_id = %(user)s AND u.old_vector_id = c.id
    ) x WHERE x.id IS NOT NULL
)
SELECT id FROM chain
"""


async def history(conn: AsyncConnection[Any], user_id: str, vector_id: str) -> dict[str, Any]:
    """Every version linked to this memory through the user's audit rows (oldest first) and those rows."""
    params: dict[str, Any] = {"user": user_id, "id": vector_id}
    async with user_scope(conn, user_id):
        ids = [r[0] for r in await (await conn.execute(_CHAIN, params)).fetchall()]
        params["ids"] = ids
        versions = await conn.execute(f"SELECT {_COLUMNS} {_FROM} AND uv.vector_id = ANY(%(ids)s)"
                                      " ORDER BY uv.created_at, v.id", params)
        updates = await conn.execute(
            f"SELECT {_UPDATE_COLUMNS} FROM memory_updates WHERE user_id = %(user)s"
            " AND (old_vector_id = ANY(%(ids)s) OR new_vector_id = ANY(%(ids)s)) ORDER BY created_at, id", params)
        return {"versions": _rows(await versions.fetchall()),
                "updates": _rows(await updates.fetchall(), _UPDATE_NAMES)}


_AUTHORED = (f"SELECT {_COLUMNS}, substr(uv.user_id, length('team:') + 1) FROM users_vectors uv"
             " JOIN vectors v ON v.id = uv.vector_id WHERE uv.author = %(user)s AND uv.user_id LIKE 'team:%%'"
             " AND uv.superseded_at IS NULL"
             " ORDER BY uv.created_at, v.id")


_PROPOSED_NAMES = ("id", "team", "content", "memory_type", "action", "stated_at", "created_at")
_PROPOSED = ("SELECT id, substr(user_id, length('team:') + 1), content, memory_type, action, stated_at, created_at"
             " FROM team_proposals WHERE proposed_by = %(user)s ORDER BY id")


async def export(conn: AsyncConnection[Any], user_id: str) -> dict[str, Any]:
    """Everything held for the user: active memories, retired versions, audit rows, pending jobs' count, the
    active team memories they wrote (in any team, also one they have left) and the team proposals made from
    their words, still pending."""
    async with user_scope(conn, user_id):
        links = await conn.execute(f"SELECT {_COLUMNS} {_FROM} ORDER BY uv.created_at, v.id", {"user": user_id})
        updates = await conn.execute(f"SELECT {_UPDATE_COLUMNS} FROM memory_updates WHERE user_id = %s"
                                     " ORDER BY created_at, id", [user_id])
        jobs = await conn.execute("SELECT count(*) FROM memory_jobs WHERE user_id = %s", [user_id])
        every = _rows(await links.fetchall())
        audit_rows = _rows(await updates.fetchall(), _UPDATE_NAMES)
        pending = (await jobs.fetchone() or [0])[0]
    async with in_all_users(conn):
        authored = _rows(await (await conn.execute(_AUTHORED, {"user": user_id})).fetchall(), (*_NAMES, "team"))
        proposed = _rows(await (await conn.execute(_PROPOSED, {"user": user_id})).fetchall(), _PROPOSED_NAMES)
    return {"memories": [m for m in every if m["active"]], "history": [m for m in every if not m["active"]],
            "updates": audit_rows, "jobs": int(pending), "team_memories": authored, "team_proposals": proposed}


async def counts(conn: AsyncConnection[Any], user_id: str) -> dict[str, int]:
    """How many links (active or not), audit rows and formation jobs the user has."""
    async with user_scope(conn, user_id):
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM users_vectors WHERE user_id = %(u)s),"
            " (SELECT count(*) FROM memory_updates WHERE user_id = %(u)s),"
            " (SELECT count(*) FROM memory_jobs WHERE user_id = %(u)s)", {"u": user_id})
        row = await cur.fetchone()
    assert row is not None
    return {"memories": int(row[0]), "updates": int(row[1]), "jobs": int(row[2])}


async def erase_user(conn: AsyncConnection[Any], user_id: str) -> dict[str, int]:
    """GDPR erasure: the user's links, audit rows, formation jobs and team memberships (one transaction, user
    scope), then the vectors nobody links any more and that are not global (every user's links must be seen).
    The team memories the user wrote stay the team's, written by nobody: `author` and the audit rows' `actor`
    set to NULL in every team (`team_memories`: how many memories); the team proposals made from their words
    (TEAM_FACTS=review) are deleted (`team_proposals`), and so is their fair use's record (`usage`: the windows
    of their requests and tokens; an operator's limits for them stay, as the operator's)."""
    async with user_scope(conn, user_id):
        memberships = await conn.execute("DELETE FROM team_members WHERE user_id = %s", [user_id])
        jobs = await conn.execute("DELETE FROM memory_jobs WHERE user_id = %s", [user_id])
        updates = await conn.execute("DELETE FROM memory_updates WHERE user_id = %s", [user_id])
        links = await conn.execute("DELETE FROM users_vectors WHERE user_id = %s RETURNING vector_id", [user_id])
        vector_ids = [r[0] for r in await links.fetchall()]
    async with all_users(conn):
        authored = await conn.execute("UPDATE users_vectors SET author = NULL WHERE author = %s", [user_id])
        await conn.execute("UPDATE memory_updates SET actor = NULL WHERE actor = %s", [user_id])
        proposed = await conn.execute("DELETE FROM team_proposals WHERE proposed_by = %s", [user_id])
        usage = await conn.execute("DELETE FROM limit_usage WHERE kind = 'user' AND subject = %s", [user_id])
    counts = {"memories": len(vector_ids), "updates": updates.rowcount, "jobs": jobs.rowcount,
              "memberships": memberships.rowcount, "team_memories": authored.rowcount,
              "team_proposals": proposed.rowcount, "usage": usage.rowcount}
    counts["vectors"] = await delete_orphan_vectors(conn, vector_ids)
    return counts


async def purge_history(conn: AsyncConnection[Any], user_id: str, older_than_days: float) -> int:
    """HISTORY_RETENTION_DAYS: the user's retired memories (replaced, deleted, forgotten, expired…) retired
    longer ago than that, with their audit rows, and then their vectors if nobody links them any more."""
    async with user_scope(conn, user_id):
        links = await conn.execute(
            "DELETE FROM users_vectors WHERE user_id = %s AND superseded_at < now() - %s * interval '1 day'"
            " RETURNING vector_id", [user_id, older_than_days])
        vector_ids = [r[0] for r in await links.fetchall()]
        await conn.execute("DELETE FROM memory_updates WHERE user_id = %s AND old_vector_id = ANY(%s)",
                           [user_id, vector_ids])
    await delete_orphan_vectors(conn, vector_ids)
    return len(vector_ids)


async def delete_orphan_vectors(conn: AsyncConnection[Any], vector_ids: list[str]) -> int:
    """Of `vector_ids`, delete those no user links and that are not global (every user's links seen)."""
    if not vector_ids:
        return 0
    async with all_users(conn):
        orphans = await conn.execute(
            "DELETE FROM vectors v WHERE v.id = ANY(%s)"
            " AND NOT EXISTS (SELECT 1 FROM users_vectors o WHERE o.vector_id = v.id)"
            " AND NOT EXISTS (SELECT 1 FROM global_vectors g WHERE g.vector_id = v.id)", [vector_ids])
    return orphans.rowcount
