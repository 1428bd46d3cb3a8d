"""One chat turn: parse → classify → retrieve → inject → relay (→ enqueue formation, later).

The request body is forwarded byte for byte unless memories were injected; only then is it
re-encoded (unknown fields, tools and parameters survive either way). Replies are relayed as they
arrive. Memory failures never reach the client: the turn is relayed without memories and counted.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from litestar import Response
from litestar.response import Stream

from .classify import TASK_HEADER, TurnKind, classify, latest_user_text
from .errors import BadRequest, MemoryUnavailable, UpstreamError, openai_error
from .inject import has_client_memory, inject_memories
from .memory.retrieve import retrieve_memories
from .observability import (
    ADDED_LATENCY,
    FAIL_OPEN,
    MEMORIES_INJECTED,
    REQUESTS,
    RETRIEVAL_OUTCOMES,
    UPSTREAM_ERRORS,
    UPSTREAM_FIRST_BYTE,
    log,
)
from .schemas import Memory
from .services import Services
from .upstream import iter_upstream, read_body, relayed_headers

MEMORY_IDS_HEADER = "x-memory-proxy-memories"
MAX_USER_ID_LENGTH = 255


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """The request JSON, checked just enough to find the messages; the upstream validates the rest."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    return body


def read_user_id(headers: Mapping[str, str], header_name: str) -> str | None:
    user_id = (headers.get(header_name) or "").strip()
    if len(user_id) > MAX_USER_ID_LENGTH:
        raise BadRequest(f"the {header_name} header is longer than {MAX_USER_ID_LENGTH} characters")
    return user_id or None


async def memories_for_turn(services: Services, user_id: str, body: dict[str, Any]) -> list[Memory]:
    """The user's memories relevant to this turn, or none if the memory side fails (fail open)."""
    messages = body["messages"]
    if has_client_memory(messages):
        RETRIEVAL_OUTCOMES.labels("skipped").inc()
        return []
    query = latest_user_text(messages).strip()
    if not query:
        RETRIEVAL_OUTCOMES.labels("miss").inc()
        return []
    try:
        memories = await retrieve_memories(
            pool=services.pool, embedder=services.embedder, user_id=user_id,
            query=query, settings=services.settings.retrieval,
        )
    except MemoryUnavailable as exc:
        FAIL_OPEN.labels(exc.reason).inc()
        RETRIEVAL_OUTCOMES.labels("failed").inc()
        log.warning("retrieval_failed", reason=exc.reason, error=str(exc))
        return []
    RETRIEVAL_OUTCOMES.labels("hit" if memories else "miss").inc()
    MEMORIES_INJECTED.observe(len(memories))
    return memories


def upstream_error_response(status: int, body: bytes, headers: dict[str, str]) -> Response[bytes]:
    """An upstream error reply, in OpenAI error format: passed through as-is when it already is."""
    UPSTREAM_ERRORS.labels("status_4xx" if status < 500 else "status_5xx").inc()
    try:
        parsed: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return Response(body, status_code=status, headers=headers, media_type="application/json")
    message = ""
    if isinstance(parsed, dict):
        for key in ("message", "detail", "error"):
            if isinstance(parsed.get(key), str):
                message = parsed[key]
                break
    if not message:
        message = body.decode("utf-8", "replace").strip()[:2000] or f"upstream returned HTTP {status}"
    error_type = "invalid_request_error" if status < 500 else "upstream_error"
    wrapped = openai_error(message, error_type, code=str(parsed.get("code")) if isinstance(parsed, dict)
                           and parsed.get("code") is not None else None)
    return Response(json.dumps(wrapped).encode(), status_code=status, headers=headers,
                    media_type="application/json")


async def relay_stream(response: httpx.Response) -> AsyncIterator[bytes]:
    """SSE bytes as they arrive; an upstream failure mid-stream ends with an SSE `error` event."""
    try:
        async for chunk in iter_upstream(response):
            yield chunk
    except UpstreamError as exc:
        UPSTREAM_ERRORS.labels("dropped").inc()
        log.warning("upstream_stream_dropped", error=exc.message)
        yield b"data: " + json.dumps(exc.to_body()).encode() + b"\n\n"


async def chat_turn(services: Services, headers: Mapping[str, str], raw: bytes) -> Response[Any]:
    started = time.perf_counter()
    body = parse_chat_body(raw)
    user_id = read_user_id(headers, services.settings.server.user_id_header)
    kind = classify(user_id, headers.get(TASK_HEADER), body)

    memories: list[Memory] = []
    if kind is TurnKind.CHAT and user_id:
        memories = await memories_for_turn(services, user_id, body)
    content = raw
    if memories:
        content = json.dumps({**body, "messages": inject_memories(body["messages"], memories)},
                             ensure_ascii=False).encode()
    ADDED_LATENCY.labels(kind.value).observe(time.perf_counter() - started)

    forwarded = time.perf_counter()
    response = await services.upstream.open("POST", "/chat/completions", headers, content)
    UPSTREAM_FIRST_BYTE.labels("chat").observe(time.perf_counter() - forwarded)
    reply_headers = relayed_headers(response)
    media_type = reply_headers.pop("content-type", "application/json")
    reply_headers[MEMORY_IDS_HEADER] = ",".join(m.id for m in memories)
    REQUESTS.labels("chat", kind.value, f"{response.status_code // 100}xx").inc()

    if response.status_code >= 400:
        return upstream_error_response(response.status_code, await read_body(response), reply_headers)
    if "text/event-stream" in media_type:
        return Stream(relay_stream(response), status_code=response.status_code,
                      headers=reply_headers, media_type=media_type)

    reply = await read_body(response)
    if kind is TurnKind.CHAT:
        reply = with_memory_ids(reply, memories)
    return Response(reply, status_code=response.status_code, headers=reply_headers, media_type=media_type)


def with_memory_ids(reply: bytes, memories: list[Memory]) -> bytes:
    """A non-streaming reply with the injected memory ids as a top-level `memories` array."""
    try:
        parsed = json.loads(reply)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return reply
    if not isinstance(parsed, dict):
        return reply
    parsed["memories"] = [m.id for m in memories]
    return json.dumps(parsed, ensure_ascii=False).encode()


async def relay_models(services: Services, headers: Mapping[str, str]) -> Response[bytes]:
    """`GET /v1/models`, relayed with the upstream's key."""
    response = await services.upstream.open("GET", "/models", headers)
    reply_headers = relayed_headers(response)
    media_type = reply_headers.pop("content-type", "application/json")
    body = await read_body(response)
    REQUESTS.labels("models", "other", f"{response.status_code // 100}xx").inc()
    if response.status_code >= 400:
        return upstream_error_response(response.status_code, body, reply_headers)
    return Response(body, status_code=response.status_code, headers=reply_headers, media_type=media_type)
