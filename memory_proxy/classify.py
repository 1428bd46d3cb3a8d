"""Is this request a real chat turn of a known user, a client task, or anonymous? Pure functions.

OpenWebUI sends its background tasks (titles, tags, follow-ups, search queries, autocomplete…)
through the same endpoint. Their replies must stay parseable JSON, so they get no memory work.
1. Reliable: the connection's custom header `X-OpenWebUI-Task: {{TASK}}` is non-empty on tasks and
   empty on real turns — when present, it decides.
2. Fallback heuristic (no header configured): tasks are non-streaming, carry no tools, and their
   last user message starts with OpenWebUI's task template marker `### Task:`. The RAG template also
   starts with `### Task:` on real turns with files attached; it wraps the question in `<user_query>`
   and the documents in `<context>`, which task templates never contain.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

TASK_HEADER = "x-openwebui-task"
_TASK_MARKER = "### Task:"
_RAG_MARKERS = ("<user_query>", "<context>")
# What UTF-8 text in PostgreSQL cannot hold: NUL, and lone surrogates (valid JSON escapes such as
# "\ud800" that no UTF-8 can encode). The memory side gets U+FFFD instead; the upstream, the original.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class TurnKind(StrEnum):
    CHAT = "chat"            # a real turn of an identified user: retrieve, inject, (later) form
    TASK = "task"            # a client task: relay only
    ANONYMOUS = "anonymous"  # no user id: relay only


def storable(text: str) -> str:
    return _UNSTORABLE.sub("\ufffd", text)


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or the text parts of a multimodal array, images and
    other parts left out), safe to embed and store; anything else has no text."""
    if isinstance(content, list):
        content = "\n".join(part["text"] for part in content if isinstance(part, dict)
                            and part.get("type") == "text" and isinstance(part.get("text"), str))
    return storable(content) if isinstance(content, str) else ""


def latest_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def looks_like_task(body: dict[str, Any]) -> bool:
    if body.get("stream") or body.get("tools"):
        return False
    text = latest_user_text(body.get("messages") or []).lstrip()
    return text.startswith(_TASK_MARKER) and not any(marker in text for marker in _RAG_MARKERS)


def classify(user_id: str | None, task_header: str | None, body: dict[str, Any]) -> TurnKind:
    if not user_id:
        return TurnKind.ANONYMOUS
    if task_header is not None:
        return TurnKind.TASK if task_header.strip() else TurnKind.CHAT
    return TurnKind.TASK if looks_like_task(body) else TurnKind.CHAT
