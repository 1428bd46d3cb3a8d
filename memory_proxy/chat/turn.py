"""One chat turn: parse → classify → retrieve → inject → relay → enqueue formation.

The request body is forwarded byte for byte unless memories were injected or the memory tools are offered
(MEMORY_TOOLS: memory_proxy/tools/rounds.py, streamed memory_proxy/tools/streamed_rounds.py); only then is it re-encoded (unknown
fields, tools and parameters survive either way). Replies are relayed as they
arrive; a stream is teed so the formation job sees the assistant's text, and the job is written to
PostgreSQL when the reply ends (or the client leaves), after the last byte went out and before the
request ends. Memory failures never reach the client: they are counted and the chat goes on.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

import anyio
from litestar import Response
from litestar.response import Stream

from ..errors import UpstreamError, openai_error
from ..formation.memory_text import storable
from ..http.auth import bearer_token, read_user_id
from ..job_payload import FormationPayload, Message, Retrieved
from ..limits.limiter import Tab, describe, key_id, paced
from ..limits.meter import Meter
from ..observability import (
    ADDED_LATENCY,
    JOB_EVENTS,
    REQUESTS,
    UPSTREAM_ERRORS,
    UPSTREAM_FIRST_BYTE,
    log,
)
from ..records import Memory
from ..redact.betterleaks import ScanFailed
from ..services import Services
from ..store.limits import Refusal
from ..tokens import SPENT
from ..tools.calls import ToolTurn
from ..tools.rounds import offers_tools, open_with_tools
from ..tools.streamed_rounds import open_streamed_with_tools
from .inject import inject_memories
from .model_list import ModelList
from .outbox import PendingJob
from .reply_reader import ReplyTee, parse_json, reply_text
from .request import (
    TASK_HEADER,
    TurnKind,
    classify,
    encode_json,
    message_text,
    parse_chat_body,
    users_message,
)
from .turn_memories import TurnRetrieval, turn_memories
from .upstream import read_body, relayed_headers

MEMORY_IDS_HEADER = "x-memory-proxy-memories"
MODELS_CACHED_HEADER = "x-memory-proxy-models"
CONTEXT_MESSAGES = 4  # earlier messages the formation job sees, for reference
CONTEXT_CHARS = 1000
MAX_USER_MESSAGE_CHARS = 16000  # of the user's part of the message, kept with the formation job
MAX_MODEL_CHARS = 200  # of the turn's model name kept with the job

OnReplyEnd = Callable[[str], Awaitable[None]]


def upstream_error_response(status: int, body: bytes, headers: dict[str, str]) -> Response[bytes]:
    """An upstream error reply, in OpenAI error format: passed through as-is when it already is."""
    UPSTREAM_ERRORS.labels("status_4xx" if status < 500 else "status_5xx").inc()
    parsed = parse_json(body)
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


async def relay_stream(body: AsyncIterator[bytes], on_end: OnReplyEnd | None = None,
                       meter: Meter | None = None) -> AsyncIterator[bytes]:
    """SSE bytes as they arrive; an upstream failure mid-stream (dropped connection, silence past
    UPSTREAM_READ_TIMEOUT) ends the stream with an SSE event `data: {"error": {...}}` and no `[DONE]`:
    the chunks already relayed stay, and OpenWebUI and the OpenAI SDKs show it as an error.
    With `on_end`, the assistant's text is teed off the relayed bytes and handed over at the end —
    also when the client disconnects (shielded from that cancellation, bounded in time); the same reading of the
    events feeds the limits' `meter`.
    Backpressure: the next chunk is read from the upstream only once the server took this one, so a
    slow client slows the upstream down instead of making us buffer (uvicorn pauses at 64 KiB)."""
    tee = ReplyTee(meter.event if meter else None) if on_end or meter else None
    try:
        async for chunk in body:
            yield chunk
            if tee:
                tee.feed(chunk)
    except UpstreamError as exc:
        UPSTREAM_ERRORS.labels("dropped").inc()
        log.warning("upstream_stream_dropped", error=exc.message)
        yield b"data: " + json.dumps(exc.to_body()).encode() + b"\n\n"
    finally:
        if tee:
            tee.end()
        if on_end and tee:
            with anyio.CancelScope(shield=True):
                await on_end(tee.text)


def formation_payload(body: dict[str, Any], memories: list[Memory]) -> FormationPayload:
    """What the formation job needs from the request: the user's message, a little context, the
    memories already injected (so extraction does not re-learn them) and the turn's model (formation's
    when the memory LLM follows the upstream)."""
    messages = body["messages"]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
    context = tuple(Message(m["role"], message_text(m.get("content"))[:CONTEXT_CHARS])
                    for m in messages[max(0, last_user - CONTEXT_MESSAGES):last_user]
                    if m.get("role") in ("user", "assistant"))
    model = body.get("model")
    return FormationPayload(user_message=users_message(messages)[:MAX_USER_MESSAGE_CHARS], context=context,
                            retrieved=tuple(Retrieved(m.id, m.content) for m in memories),
                            model=storable(model)[:MAX_MODEL_CHARS] if isinstance(model, str) else "")


async def enqueue_formation(services: Services, user_id: str, payload: FormationPayload, said_at: datetime,
                            assistant_reply: str, *, tools: ToolTurn | None = None) -> None:
    """Hand the formation job to the outbox: written now, or held until the database is back. `tools`: the
    turn's tool work, read at the reply's end for what `remember` stored (formation leaves those alone)."""
    # Redacted here, so that neither the job table nor the memory LLM ever sees a secret; off the event loop
    # (a long turn in a worker process: memory_proxy/redact/scan_pool.py). A text that could not be scanned in time is not
    # kept: the turn's job is dropped (counted), never stored unchecked. The memories it holds (`retrieved`,
    # `remembered`) are not scanned again: every stored text was redacted when written (store/memories.py).
    try:
        written = (payload.retrieved, tuple(tools.remembered) if tools else ())
        unread = replace(payload, assistant_reply=assistant_reply, retrieved=(), remembered=())
        redacted = replace(FormationPayload.from_json(await services.scanner.redact_strings(unread.to_json())),
                           retrieved=written[0], remembered=written[1])
    except ScanFailed as exc:  # the engine failed or the scan took too long: fail closed
        JOB_EVENTS.labels("unscanned").inc()
        log.error("job_unscanned", user_id=user_id, error=type(exc).__name__)  # its message may quote the text
        return
    job = PendingJob(user_id, said_at, redacted)
    # When this turn's retrieval (or the one before) found the database failing, the job is held and spooled
    # at once: the write would wait out its timeout before the reply could end.
    await services.outbox.put(job, hold=services.breaker.failing)


async def chat_turn(services: Services, headers: Mapping[str, str], raw: bytes) -> Response[Any]:
    """A chat request: refused with 429 when a limit of its key, user or model says so (memory_proxy/limits/),
    else relayed (`_relayed`), on the tab of the limits that apply."""
    started = time.perf_counter()
    said_at = services.clock()
    body = parse_chat_body(raw)
    user_id = read_user_id(headers, services.settings.server)
    model = body.get("model")
    token = bearer_token(headers.get("authorization"))
    admitted = await services.limiter.admit(key=key_id(token) if token else None, user=user_id,
                                            model=model if isinstance(model, str) else None)
    if isinstance(admitted, Refusal):
        return rate_limited(await paced(admitted), services.limiter.limit_of(admitted))
    if not admitted.subjects:
        return await _relayed(services, headers, raw, body, user_id, started, said_at)
    tab = Tab(services.limiter, admitted, raw)
    counting = SPENT.set(tab.meter.besides)  # its query's embedding, when a remote embedder says what it cost
    try:
        response = await _relayed(services, headers, raw, body, user_id, started, said_at, tab)
    except BaseException:
        await tab.settle()
        raise
    finally:
        SPENT.reset(counting)
    if not isinstance(response, Stream):
        await tab.settle()
    return response


def rate_limited(refusal: Refusal, value: int | None) -> Response[bytes]:
    """429 in OpenAI's shape (its type `requests` or `tokens`, code `rate_limit_exceeded`), with Retry-After,
    which the openai SDKs wait for before they retry and OpenWebUI shows."""
    kind = "tokens" if refusal.which in ("tpm", "daily_tokens") else "requests"
    body = openai_error(describe(refusal, value), kind, code="rate_limit_exceeded")
    return Response(json.dumps(body).encode(), status_code=429, media_type="application/json",
                    headers={"retry-after": str(max(1, math.ceil(refusal.retry_after)))})


async def _relayed(services: Services, headers: Mapping[str, str], raw: bytes, body: dict[str, Any],
                   user_id: str | None, started: float, said_at: datetime, tab: Tab | None = None) -> Response[Any]:
    """The turn itself (module docstring); `tab` meters what it spends."""
    kind = classify(user_id, headers.get(TASK_HEADER), body)

    identified = user_id if kind is TurnKind.CHAT else None  # the user whose memories this turn reads and forms
    with_tools = bool(identified) and offers_tools(services, body)
    retrieval: TurnRetrieval | None = None
    if identified:
        retrieval = await turn_memories(services, identified, body,
                                            always_on_only=with_tools and services.settings.retrieval.tools_inject
                                            == "always_on",
                                            groups=services.mirror.groups_for_turn(headers, identified))
    memories = retrieval.memories if retrieval else []  # injected into the request sent
    content, sent = raw, body  # the request as it goes without tools (and a retry without them)
    if retrieval and retrieval.plain:
        sent = {**body, "messages": inject_memories(body["messages"], retrieval.plain)}
        content = encode_json(sent)
    on_end: OnReplyEnd | None = None
    tools: ToolTurn | None = None
    if identified and (services.settings.formation.enabled or with_tools):
        payload = formation_payload(body, memories)
        if with_tools:
            tools = ToolTurn(services, identified, services.settings.retrieval.tools, payload, said_at,
                             answer_base=inject_memories(body["messages"], memories),
                             meter=tab.meter if tab else None)
        if services.settings.formation.enabled:
            on_end = partial(enqueue_formation, services, identified, payload, said_at, tools=tools)
    if retrieval and tools:  # logged with the rounds, when they end
        tools.on_done = partial(retrieval.log_with_rounds, tools.mode)
    elif retrieval:
        retrieval.log()
    ADDED_LATENCY.labels(kind.value).observe(time.perf_counter() - started)

    forwarded = time.perf_counter()
    if tools:  # the rounds' requests say that the model may search; a retry without tools sends `content`
        offering = {**body, "messages": inject_memories(body["messages"], memories, tools_note=True)}
        opener = open_streamed_with_tools if sent.get("stream") else open_with_tools
        response, reply_body = await opener(services, headers, offering, content, tools)
    else:
        response, reply_body = await services.upstream.open("POST", "/chat/completions", headers, content)
    UPSTREAM_FIRST_BYTE.labels("chat").observe(time.perf_counter() - forwarded)
    reply_headers = relayed_headers(response)
    media_type = reply_headers.pop("content-type", "application/json")
    reply_headers[MEMORY_IDS_HEADER] = ",".join(m.id for m in memories)
    REQUESTS.labels("chat", kind.value, f"{response.status_code // 100}xx").inc()

    if response.status_code >= 400:
        return upstream_error_response(response.status_code, await read_body(reply_body), reply_headers)
    if "text/event-stream" in media_type:
        relayed = relay_stream(reply_body, on_end, tab.meter if tab else None)
        return Stream(tab.settled_after(relayed) if tab else relayed, status_code=response.status_code,
                      headers=reply_headers, media_type=media_type)

    reply = await read_body(reply_body)
    parsed = parse_json(reply) if tab or kind is TurnKind.CHAT else None
    if tab:
        tab.meter.completion(parsed)
    if kind is TurnKind.CHAT:
        if on_end:
            await on_end(reply_text(parsed))
        if isinstance(parsed, dict):  # the injected memory ids as a top-level `memories` array
            reply = encode_json({**parsed, "memories": [m.id for m in memories]})
    return Response(reply, status_code=response.status_code, headers=reply_headers, media_type=media_type)


async def relay_models(services: Services, headers: Mapping[str, str]) -> Response[bytes]:
    """`GET /v1/models`, relayed with the upstream's key; the last good list when the upstream is late or down
    (memory_proxy/chat/model_list.py)."""
    async def fetch() -> ModelList:
        response, reply_body = await services.upstream.open("GET", "/models", headers)
        reply_headers = relayed_headers(response)
        media_type = reply_headers.pop("content-type", "application/json")
        return ModelList(response.status_code, await read_body(reply_body), reply_headers, media_type)

    models, cached = await services.models.get(fetch, services.settings.upstream.models_timeout)
    REQUESTS.labels("models", "cached" if cached else "other", f"{models.status // 100}xx").inc()
    if cached:
        log.warning("models_served_cached", reason="the upstream did not answer in time or failed")
        return Response(models.body, status_code=models.status, media_type=models.media_type,
                        headers={**models.headers, MODELS_CACHED_HEADER: "cached"})
    if models.status >= 400:
        return upstream_error_response(models.status, models.body, models.headers)
    return Response(models.body, status_code=models.status, headers=models.headers, media_type=models.media_type)
