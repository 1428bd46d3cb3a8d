"""What the management API (memory_proxy/api/memory_routes.py) accepts: bodies, parameters, cursors, and their sizes.

Everything is bounded before anything costly reads it: a body over MAX_BODY_BYTES is refused (413) before it
is read, a path or query value over MAX_PARAMETER_CHARS and a reason over MAX_REASON_CHARS are a 400, and a
memory's size is checked before its secret scan, which runs off the event loop (memory_proxy/redact/scan_pool.py).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from litestar import Request

from ..errors import BadRequest
from ..formation.memory_text import MAX_MEMORY_BYTES, UNSTORABLE, scanned_content
from ..services import Services
from ..settings import MEMORY_TYPES
from ..store.memories import MAX_REASON_CHARS

BODY_METHODS = frozenset({"POST", "PATCH", "PUT"})
# A body holds at most a memory (2 KB of UTF-8, up to 6 bytes each when JSON-escaped) and a reason: a
# larger one is refused (413) before anything reads it. Chat keeps MAX_REQUEST_BYTES (images).
MAX_BODY_BYTES = 64 * 1024
MAX_PARAMETER_CHARS = 2048  # any path or query value (q, cursor, ?user=, ids): ours are far shorter


@dataclass
class MemoryIn:
    content: str
    memory_type: str = "preference"
    pinned: bool = False


@dataclass
class MemoryPatch:
    content: str | None = None
    memory_type: str | None = None
    pinned: bool | None = None
    reason: str | None = None


async def clean_content(services: Services, raw: str) -> str:
    """The memory text as stored: its size checked before the secret scan (off the event loop)."""
    content = await scanned_content(raw, services.scanner)
    if content.oversized or len(content.text.encode("utf-8", "surrogatepass")) > MAX_MEMORY_BYTES:
        raise BadRequest(f"content is over {MAX_MEMORY_BYTES} bytes", param="content", code="content_too_long")
    if not content.text:
        raise BadRequest("content is empty", param="content", code="empty_content")
    if content.problem:
        raise BadRequest(content.problem, param="content", code="unstorable_text")
    return content.text


def reason_text(raw: str | None, default: str, param: str = "reason") -> str:
    """An audit reason the user wrote: at most MAX_REASON_CHARS (a longer one is a 400, never stored)."""
    reason = (raw or "").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise BadRequest(f"{param} is over {MAX_REASON_CHARS} characters", param=param, code="reason_too_long")
    return reason or default


async def checked_request(request: Request[Any, Any, Any]) -> None:
    """Every path and query parameter of the API must be text PostgreSQL can hold, of at most
    MAX_PARAMETER_CHARS, and a body must not nest deeper than the decoder's recursion limit: a clear 400
    here, not a database error or a 500 later."""
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        if isinstance(value, str) and len(value) > MAX_PARAMETER_CHARS:
            raise BadRequest(f"{name} is over {MAX_PARAMETER_CHARS} characters", param=name, code="too_long")
        if isinstance(value, str) and UNSTORABLE.search(value):
            raise BadRequest(f"{name} holds NUL or a lone surrogate", param=name, code="unstorable_text")
    if request.method in BODY_METHODS:
        try:  # the API's bodies are small: decoding one twice costs little
            json.loads(await request.body())
        except RecursionError as exc:
            raise BadRequest("the request body nests too deep", code="nested_too_deep") from exc
        except ValueError:
            pass  # not JSON: the route's own decoding answers it with a 400


def check_type(memory_type: str, kinds: tuple[str, ...] = MEMORY_TYPES) -> str:
    """A kind of fact (what a memory may be created or retyped as), or with `kinds=STORED_TYPES` any stored kind,
    episodes too (what a list may be filtered by)."""
    if memory_type not in kinds:
        raise BadRequest(f"unknown memory type {memory_type!r} (types: {', '.join(kinds)})",
                         param="memory_type", code="bad_type")
    return memory_type


class BadCursor(ValueError):
    """A pagination cursor this API did not write."""


def encode_cursor(memory: dict[str, Any]) -> str:
    """The page's last memory, (created_at, id), as an opaque cursor."""
    raw = json.dumps([memory["created_at"].isoformat(), memory["id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, vector_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(created), str(vector_id)
    except (ValueError, TypeError) as exc:
        raise BadCursor("the cursor is not one this API returned") from exc
