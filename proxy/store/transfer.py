"""A user's memories out and in, for the operator CLI (`memories list | export | import`).

Reads and writes run in the user's row-level security scope (scope.py). An export holds what a memory is
(text, kind, pin, when it was stated, importance, confidence, expiry), never its vector: an import
re-embeds with the configured embedder, so an export moves between models and installations. Importing
is idempotent: the exact-duplicate guard (users_vectors unique (user_id, content_key) among active links)
skips a memory the user already holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from ..schemas import FactAttributes
from .memories import add_memory, set_pinned
from .scope import in_user_scope

EXPORT_FORMAT = "memory-proxy/memories"
EXPORT_VERSION = 1

_ACTIVE = """
SELECT v.id, v.memory_type, uv.pinned, v.stated_at, v.content, v.importance, v.confidence, v.expires_at,
       uv.created_at
FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
WHERE uv.user_id = %(user_id)s AND uv.superseded_at IS NULL
  AND (%(with_expired)s OR v.expires_at IS NULL OR v.expires_at > now() OR uv.pinned)
ORDER BY v.stated_at DESC, v.id
LIMIT %(limit)s
"""
_COLUMNS = ("id", "memory_type", "pinned", "stated_at", "content", "importance", "confidence", "expires_at",
            "created_at")


async def active_memories(conn: AsyncConnection[Any], user_id: str, *, limit: int | None = None,
                          with_expired: bool = False) -> list[dict[str, Any]]:
    """The user's active memories, newest statement first. `with_expired`: also those past their expiry
    that maintenance has not retired yet (an export keeps them, with their expiry)."""
    async with in_user_scope(conn, user_id):
        cur = await conn.execute(_ACTIVE, {"user_id": user_id, "limit": limit, "with_expired": with_expired})
    return [dict(zip(_COLUMNS, row, strict=True)) for row in await cur.fetchall()]


def export_document(user_id: str, rows: Sequence[dict[str, Any]], exported_at: datetime) -> dict[str, Any]:
    """The JSON export (dates as ISO 8601)."""
    def item(row: dict[str, Any]) -> dict[str, Any]:
        return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in row.items()}

    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "user_id": user_id,
            "exported_at": exported_at.isoformat(), "memories": [item(r) for r in rows]}


def export_markdown(user_id: str, rows: Sequence[dict[str, Any]]) -> str:
    lines = [f"# Memories of {user_id}", ""]
    for r in rows:
        tags = ", ".join([r["memory_type"], *(["pinned"] if r["pinned"] else [])])
        lines.append(f"- {r['stated_at']:%Y-%m-%d} ({tags}) {r['content']}")
    return "\n".join(lines) + "\n"


def parse_export(document: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """The user id and the memories of a JSON export (dates parsed); ValueError when it is not one."""
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise ValueError(f"not a memory-proxy export (expected \"format\": \"{EXPORT_FORMAT}\")")
    if document.get("version") != EXPORT_VERSION:
        raise ValueError(f"unsupported export version {document.get('version')!r}")
    memories = []
    for i, m in enumerate(document.get("memories") or []):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not m["content"].strip():
            raise ValueError(f"memory #{i}: no content")
        memories.append({
            "content": m["content"].strip(),
            "memory_type": m.get("memory_type") or "preference",
            "pinned": bool(m.get("pinned")),
            "stated_at": datetime.fromisoformat(m["stated_at"]) if m.get("stated_at") else None,
            "importance": m.get("importance"),
            "confidence": m.get("confidence"),
            "expires_at": datetime.fromisoformat(m["expires_at"]) if m.get("expires_at") else None,
        })
    user_id = document.get("user_id")
    return (user_id if isinstance(user_id, str) and user_id else None), memories


async def import_memory(conn: AsyncConnection[Any], *, user_id: str, memory: dict[str, Any],
                        embedding: Sequence[float], model: str) -> str | None:
    """Store one exported memory for `user_id` in one transaction (pinned as it was); None when the user
    already holds the same text (skipped, left as it is)."""
    attributes = FactAttributes(memory_type=memory["memory_type"], importance=memory["importance"],
                                confidence=memory["confidence"], expires_at=memory["expires_at"])
    async with in_user_scope(conn, user_id):
        vector_id = await add_memory(conn, user_id=user_id, content=memory["content"], embedding=embedding,
                                     model=model, stated_at=memory["stated_at"], attributes=attributes)
        if vector_id and memory["pinned"]:
            await set_pinned(conn, user_id, vector_id, True, reason="pinned in the imported export")
    return vector_id
