"""The one export format: what `GET /api/v1/export` and `memory-proxy memories export` write, and what
`memory-proxy memories import` reads back (docs/MANAGEMENT.md).

JSON: `{"format": "memory-proxy/memories", "version": 1, "user_id", "exported_at", "memories"` (active),
`"history"` (superseded, deleted and expired versions), `"updates"` (the user's audit rows), `"jobs"`
(pending formation jobs), `"team_memories"` (active memories the user wrote in teams, each with its `team`),
`"team_proposals"` (facts of the user's words proposed to a team, pending: TEAM_FACTS=review)},
dates in ISO 8601. A memory holds what it is (text, type, pin, dates, expiry,
use counts), never its vector: an import re-embeds with the configured embedder, so an export moves
between models and installations. An import reads `memories` only, and of each only the fields above
(fields it does not know, such as an older export's `importance` and `confidence`, are ignored).
Markdown: the same document for people to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

FORMAT = "memory-proxy/memories"
VERSION = 1


def document(user_id: str, everything: Mapping[str, Any], exported_at: datetime) -> dict[str, Any]:
    """The JSON export of what store.manage.export returned for the user."""
    return {"format": FORMAT, "version": VERSION, "user_id": user_id, "exported_at": exported_at.isoformat(),
            "memories": _dated(everything["memories"]), "history": _dated(everything["history"]),
            "updates": _dated(everything["updates"]), "jobs": everything["jobs"],
            "team_memories": _dated(everything.get("team_memories", [])),
            "team_proposals": _dated(everything.get("team_proposals", []))}


def markdown(export: Mapping[str, Any]) -> str:
    """A JSON export as a human-readable Markdown document."""
    lines = [f"# Memories of {export['user_id']}", "", f"Exported {_when(export['exported_at'])}.", "",
             "## Active memories", ""]
    for m in export["memories"]:
        pin = " (pinned)" if m["pinned"] else ""
        lines.append(f"- **{m['memory_type']}**{pin}: {m['content']} — stated {_when(m['stated_at'])},"
                     f" id `{m['id']}`")
    lines += ["", "## Earlier versions and deleted memories", ""]
    for m in export["history"]:
        lines.append(f"- {m['content']} — retired {_when(m['superseded_at'])}, id `{m['id']}`")
    lines += ["", "## Written in teams", ""]
    for m in export.get("team_memories", []):
        lines.append(f"- team **{m['team']}**: {m['content']} — stated {_when(m['stated_at'])}, id `{m['id']}`")
    lines += ["", "## Proposed to teams, pending", ""]
    for p in export.get("team_proposals", []):
        lines.append(f"- team **{p['team']}**: {p['content']} — proposed {_when(p['created_at'])}")
    lines += ["", "## History", ""]
    for u in export["updates"]:
        lines.append(f"- {_when(u['created_at'])} **{u['action']}** {u['old_id'] or '—'} →"
                     f" {u['new_id'] or '—'}: {u['reason']}")
    return "\n".join(lines) + "\n"


def read(export: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """The user id and the memories to import from a JSON export (dates parsed); ValueError when it is
    not one."""
    if not isinstance(export, dict) or export.get("format") != FORMAT:
        raise ValueError(f"not a memory-proxy export (expected \"format\": \"{FORMAT}\")")
    if export.get("version") != VERSION:
        raise ValueError(f"unsupported export version {export.get('version')!r}")
    memories = []
    for i, m in enumerate(export.get("memories") or []):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not m["content"].strip():
            raise ValueError(f"memory #{i}: no content")
        memories.append({
            "content": m["content"].strip(),
            "memory_type": m.get("memory_type") or "preference",
            "pinned": bool(m.get("pinned")),
            "stated_at": datetime.fromisoformat(m["stated_at"]) if m.get("stated_at") else None,
            "expires_at": datetime.fromisoformat(m["expires_at"]) if m.get("expires_at") else None,
        })
    user_id = export.get("user_id")
    return (user_id if isinstance(user_id, str) and user_id else None), memories


def _dated(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()} for row in rows]


def _when(moment: str | None) -> str:
    """An ISO 8601 time of the document, for people."""
    return datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else "—"
