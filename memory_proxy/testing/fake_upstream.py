"""Fake OpenAI-compatible upstream (chat + embeddings + models) for load benchmarks, on loopback.

A raw ASGI app (no framework, so the fake itself costs as little as possible) served by uvicorn
with httptools + uvloop; a stdlib ``http.server`` cannot serve concurrency 64.

    python -m memory_proxy.testing.fake_upstream --port 9100 --chunks 6 --delay-ms 20 --dims 1024

Endpoints:

- ``POST /v1/chat/completions``: ``"stream": true`` → ``text/event-stream``: a first chunk with the
  role and the first word, then one word per chunk (``--chunks`` content chunks in all, ``--delay-ms``
  apart), a ``finish_reason`` chunk, a usage chunk when ``stream_options.include_usage``, then
  ``data: [DONE]``. Otherwise one JSON ``chat.completion``: no delay, except that a memory-LLM
  extraction call (``memory_llm_answer``) is answered after ``--llm-delay-ms`` (default 0), so that a
  formation job's model time is fixed and known (benchmarks.flood). A message holding ``MANY_FACTS``
  gets ``MANY_FACTS_COUNT`` facts full of names found nowhere (benchmarks.stall: the most costly reply
  for formation's checks).
- ``POST /v1/embeddings``: instant; vectors are a deterministic hashing-trick bag of words (lowercase
  word tokens hashed into ``--dims`` buckets, L2-normalised), so texts sharing words are more similar,
  plus a little dense noise seeded by the text: real embeddings are dense, and a sparse vector is
  compressed by PostgreSQL, so every distance to it would pay a decompression no real model causes.
- ``GET /v1/models``: one model, ``fake-model``.
- ``GET /seen?probe=ID`` (benchmarks.cluster): a chat request whose body carries ``"probe": "ID"`` (an
  unknown field, which the proxy forwards) is recorded with the markers (``MARKER``: ``mk`` and ten
  lowercase letters) its system messages held, i.e. which memories were injected into it; answers
  ``{"probe": ID, "markers": [...]}``, or 404 when no request carried that probe. ``POST /seen`` with
  ``{"probes": [...]}`` answers ``{"seen": {ID: [...] or null}}`` for many at once. Requests without a
  probe are not recorded.

``start_fake(port, ...)`` starts it in a subprocess (optionally pinned with ``taskset``) and returns
once it answers; ``stop_process`` ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import re
import subprocess
import sys
import time
import zlib
from typing import Any

import numpy as np

from .asgi import Receive, Scope, Send, error_body, lifespan, read_body, reply, stop_process, wait_http
from .prompt_reader import said_message

WORDS = ["Hello", " there", ",", " this", " is", " a", " fake", " streamed", " reply", " from", " the",
         " upstream", "."]
_TOKEN = re.compile(r"\w+")
MARKER = re.compile(r"\bmk[a-z]{10}\b")  # a memory's unique tag (benchmarks.cluster), seen in system prompts
SEEN_MAX = 500_000  # probes remembered for GET /seen (the oldest are forgotten first)


DENSE_NOISE = 0.1  # norm of the dense part (the relay benchmark's relevant memories stay above 0.8)


@functools.cache
def _projection(dims: int) -> np.ndarray:
    """A fixed random rotation-like matrix: it spreads each word's bucket over every dimension."""
    return (np.random.default_rng(dims).standard_normal((dims, dims)) / np.sqrt(dims)).astype(np.float32)


def embed(text: str, dims: int) -> list[float]:
    """Hashing-trick bag of words: crc32 of each lowercase word token picks a bucket; projected at random onto
    every dimension, as a real model's vectors are dense, so that their sign bits agree where the texts share
    words (store/search.py pre-selects by sign bits; cosines stay the bag of words' within ~0.03); L2-normalised;
    then DENSE_NOISE of text-seeded noise, normalised again."""
    tokens = _TOKEN.findall(text.lower())
    buckets = [zlib.crc32(t.encode()) % dims for t in tokens] or [0]  # empty text: a fixed vector, not NaNs
    vec = _projection(dims)[buckets].sum(axis=0)  # each word's bucket row: the sparse product with the matrix
    vec /= np.linalg.norm(vec)
    noise = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(dims).astype(np.float32)
    vec += DENSE_NOISE * noise / np.linalg.norm(noise)
    return (vec / np.linalg.norm(vec)).tolist()


MANY_FACTS = "[many-facts]"
MANY_FACTS_COUNT = 40


def many_facts() -> list[dict[str, Any]]:
    """MANY_FACTS_COUNT facts of 24 words, 20 of them capitalised names that no text of the turn holds."""
    return [{"fact": "User met " + " ".join(f"Qzx{i}v{j}ertunk" for j in range(20)) + " there",
             "type": "relationship", "replaces": 0} for i in range(MANY_FACTS_COUNT)]


def memory_llm_answer(body: dict[str, Any]) -> str | None:
    """An instant memory LLM (JSON mode) for formation benchmarks: the formation call (prompts/
    extract_turn.md) gets one fact made of the user's own words, so that it passes the evidence check
    (``many_facts()`` when the message holds MANY_FACTS)."""
    messages = body.get("messages") or [{}]
    message = said_message(str(messages[-1].get("content", "")))
    if message is None:
        return None
    if MANY_FACTS in message:
        return json.dumps({"facts": many_facts()})
    said = " ".join(message.split()[:12])
    return json.dumps({"facts": [{"fact": f"User said {said}", "type": "preference", "replaces": 0}] if said else []})


class FakeUpstream:
    """The ASGI app. Configuration is fixed at construction; nothing is computed per request beyond
    the reply itself."""

    def __init__(self, chunks: int = 6, delay_ms: float = 20.0, dims: int = 1024,
                 llm_delay_ms: float = 0.0) -> None:
        self.chunks = max(1, chunks)
        self.delay = delay_ms / 1000.0
        self.llm_delay = llm_delay_ms / 1000.0
        self.dims = dims
        self.models_body = json.dumps(
            {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0,
                                         "owned_by": "fake"}]}).encode()
        self.seen: dict[str, list[str]] = {}  # probe id → markers in its system messages (GET /seen)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path in ("/v1/models", "/models"):
            return await reply(send, 200, self.models_body)
        if method == "GET" and path in ("/", "/healthz"):
            return await reply(send, 200, b'{"status":"ok"}')
        if method == "GET" and path == "/seen":
            return await self.seen_reply(send, scope.get("query_string", b"").decode())
        if method != "POST":
            return await reply(send, 404, error_body("not found"))
        raw = await read_body(receive)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return await reply(send, 400, error_body("body is not JSON"))
        if path in ("/v1/chat/completions", "/chat/completions"):
            return await self.chat(send, body)
        if path in ("/v1/embeddings", "/embeddings"):
            return await self.embeddings(send, body)
        if path == "/seen":
            probes = body.get("probes") or []
            return await reply(send, 200, json.dumps({"seen": {p: self.seen.get(p) for p in probes}}).encode())
        return await reply(send, 404, error_body("not found"))

    def record(self, body: dict[str, Any]) -> None:
        """Remember which markers the system messages of a probed request held (GET /seen)."""
        probe = body.get("probe")
        if not isinstance(probe, str):
            return
        system = " ".join(str(m.get("content")) for m in body.get("messages") or ()
                          if isinstance(m, dict) and m.get("role") == "system")
        self.seen[probe] = MARKER.findall(system)
        if len(self.seen) > SEEN_MAX:
            del self.seen[next(iter(self.seen))]

    async def seen_reply(self, send: Send, query: str) -> None:
        probe = dict(part.partition("=")[::2] for part in query.split("&")).get("probe", "")
        if probe not in self.seen:
            return await reply(send, 404, error_body(f"no request carried probe {probe!r}"))
        await reply(send, 200, json.dumps({"probe": probe, "markers": self.seen[probe]}).encode())

    async def chat(self, send: Send, body: dict[str, Any]) -> None:
        model = body.get("model") or "fake-model"
        created = int(time.time())
        cid = f"chatcmpl-fake{time.monotonic_ns()}"
        words = [WORDS[i % len(WORDS)] for i in range(self.chunks)]
        self.record(body)
        usage = {"prompt_tokens": 10, "completion_tokens": len(words), "total_tokens": 10 + len(words)}
        if not body.get("stream"):
            extracted = memory_llm_answer(body)
            if extracted is not None and self.llm_delay:
                await asyncio.sleep(self.llm_delay)  # a memory-LLM extraction call of known duration
            content = extracted or "".join(words)
            answer = {"id": cid, "object": "chat.completion", "created": created, "model": model,
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": content}}],
                      "usage": usage}
            return await reply(send, 200, json.dumps(answer).encode())

        def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        for i, word in enumerate(words):
            if i and self.delay:
                await asyncio.sleep(self.delay)
            delta = {"role": "assistant", "content": word} if i == 0 else {"content": word}
            await send({"type": "http.response.body", "body": event(delta), "more_body": True})
        tail = event({}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            tail += (b"data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                             "model": model, "choices": [], "usage": usage}).encode()
                     + b"\n\n")
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n", "more_body": False})

    async def embeddings(self, send: Send, body: dict[str, Any]) -> None:
        inputs = body.get("input", "")
        if isinstance(inputs, str):
            inputs = [inputs]
        base64_asked = body.get("encoding_format") == "base64"  # as the OpenAI and Mistral APIs do
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(np.asarray(embed(str(text), self.dims), dtype="<f4").tobytes()).decode()
                               if base64_asked else embed(str(text), self.dims))}
                for i, text in enumerate(inputs)]
        tokens = sum(len(_TOKEN.findall(str(t))) for t in inputs)
        answer = {"object": "list", "data": data, "model": body.get("model") or "fake-embed",
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        await reply(send, 200, json.dumps(answer).encode())


def start_fake(port: int, chunks: int = 6, delay_ms: float = 20.0, dims: int = 1024,
               core: int | None = None, timeout: float = 20.0, llm_delay_ms: float = 0.0) -> subprocess.Popen[bytes]:
    """Start the fake upstream in a subprocess (pinned to ``core`` with taskset if given), wait until
    ``GET /v1/models`` answers, and return the process. ``llm_delay_ms``: see ``--llm-delay-ms``."""
    cmd = [sys.executable, "-m", "memory_proxy.testing.fake_upstream", "--port", str(port), "--chunks", str(chunks),
           "--delay-ms", str(delay_ms), "--dims", str(dims)]
    if llm_delay_ms:
        cmd += ["--llm-delay-ms", str(llm_delay_ms)]
    if core is not None:
        cmd = ["taskset", "-c", str(core), *cmd]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", timeout, proc)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memory_proxy.testing.fake_upstream",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--chunks", type=int, default=6, help="content chunks per streamed reply")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="delay between streamed chunks")
    parser.add_argument("--dims", type=int, default=1024, help="embedding dimension")
    parser.add_argument("--llm-delay-ms", type=float, default=0.0,
                        help="delay before answering a memory-LLM extraction call (non-streamed)")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(FakeUpstream(args.chunks, args.delay_ms, args.dims, args.llm_delay_ms), host=args.host,
                port=args.port, http="httptools", loop="uvloop", log_level="warning", access_log=False, lifespan="on",
                backlog=2048)


if __name__ == "__main__":
    main()
