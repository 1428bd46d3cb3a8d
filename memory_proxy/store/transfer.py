"""A user's memories listed and imported, for the operator CLI (`memories list | import`; the export
format is memory_proxy/api/export_format.py, the export's query store/manage.py).

Reads and writes run in the user's row-level security scope (scope.py). Importing is idempotent: the
exact-duplicate guard (users_vectors unique (user_id, content_key) among active links) skips a memory the
user already holds; a pinned one is pinned through memories.set_pinned (audited).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from ..records import FactAttributes
from .memories import add_memory, set_pinned
from .scope import in_user_scope
from .search import LIVE

_ACTIVE = f"""
SELECT v.id, v.memory_type, uv.pinned, v.stated_at, v.content, v.expires_at, uv.created_at
FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
WHERE uv.user_id = %(user_id)s AND uv.superseded_at IS NULL
  AND {LIVE}
ORDER BY v.stated_at DESC, v.id
LIMIT %(limit)s
"""
_COLUMNS = ("id", "memory_type", "pinned", "stated_at", "content", "expires_at", "created_at")


async def active_memories(conn: AsyncConnection[Any], user_id: str, *,
                          limit: int | None = None) -> list[dict[str, Any]]:
    """The user's active memories (not expired, or pinned), newest statement first."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_ACTIVE, {"user_id": user_id, "limit": limit})
    return [dict(zip(_COLUMNS, row, strict=True)) for row in await cur.fetchall()]


async def import_memory(conn: AsyncConnection[Any], *, user_id: str, memory: dict[str, Any],
                        embedding: Sequence[float], model: str) -> str | None:
    """Store one exported memory for `user_id` in one transaction (pinned as it was); None when the user
    already holds the same text (skipped, left as it is)."""
    attributes = FactAttributes(memory_type=memory["memory_type"], expires_at=memory["expires_at"])
    async with in_user_scope(conn, user_id):
        vector_id = await add_memory(conn, user_id=user_id, content=memory["content"], embedding=embedding,
                                     model=model, stated_at=memory["stated_at"], attributes=attributes)
        if vector_id and memory["pinned"]:
            await set_pinned(conn, user_id, vector_id, True, reason="pinned in the imported export")
    return vector_id
