"""Reading a chat request, pure functions: its body checked as far as we read it, whether it is a real chat turn
of a known user, a client task or anonymous, and the user's own words in it.

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

import json
from enum import StrEnum
from typing import Any

from ..errors import BadRequest
from ..formation.evidence import users_part
from ..formation.memory_text import storable

TASK_HEADER = "x-openwebui-task"
_TASK_MARKER = "### Task:"
_RAG_MARKERS = ("<user_query>", "<context>")
MAX_READ_CHARS = 1 << 17  # of a longer message, its head and tail are read for the user's part (a RAG
# template's documents stand between: its opening tag near the start, the user's words at the end)
MAX_QUERY_CHARS = 4000  # of the user's part, searched by (its head and tail): embedders read ~500 tokens and
# a paste's every word would only cost the full-text arm time


class TurnKind(StrEnum):
    CHAT = "chat"            # a real turn of an identified user: retrieve, inject, (later) form
    TASK = "task"            # a client task: relay only
    ANONYMOUS = "anonymous"  # no user id: relay only


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or the text parts of a multimodal array, images and
    other parts left out), safe to embed and store (`storable`: the upstream still gets the original);
    anything else has no text."""
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


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """The request JSON, checked just enough for our own work; the upstream validates the rest.

    We stay a transparent proxy and check only what retrieval, classification and injection read:
    a JSON object whose `messages` is a non-empty array of objects with a string `role`, and
    `stream`, when set, a boolean (the task heuristic reads it; null means unset, as for OpenAI).
    `model`, message contents (any type: only text parts are read), unknown roles and every other
    field are the upstream's to judge: its 4xx is relayed unchanged.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, a 5000-digit int, deep nesting
        raise BadRequest(f"the request body is not valid JSON: {str(exc)[:200]}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    return body


def users_message(messages: list[Any]) -> str:
    """The user's part of the latest user message (formation/evidence.users_part: without OpenWebUI's RAG template
    and its documents, which are never the user's), read from a bounded head and tail of a long message."""
    text = latest_user_text(messages)
    if len(text) > MAX_READ_CHARS:
        text = f"{text[:MAX_READ_CHARS // 2]}\n{text[-MAX_READ_CHARS // 2:]}"
    return users_part(text).strip()


def search_query(text: str) -> str:
    """What a turn is searched by: the user's words, a long message's head and tail."""
    if len(text) <= MAX_QUERY_CHARS:
        return text
    return f"{text[:MAX_QUERY_CHARS // 2]}\n{text[-MAX_QUERY_CHARS // 2:]}"


def encode_json(value: Any) -> bytes:
    """UTF-8 JSON; text holding lone surrogates (valid JSON escapes such as "\\ud800", which no UTF-8
    can carry) is sent escaped, as the client wrote it."""
    try:
        return json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(value).encode()
