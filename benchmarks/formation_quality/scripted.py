"""Scripted OpenAI-compatible chat servers on loopback, and a way to serve any ASGI app in this loop.

`ScriptedChat` answers every `POST /v1/chat/completions` with the text it is told to say next, streamed
or not as asked, and keeps the requests it received: the benchmark's upstream (the scripted assistant
reply; the probe's request shows what the proxy injected). `ScriptedMemoryLLM` answers the proxy's
formation calls for the turn being sent: as the **oracle** (every call from the turn's ideal answer: a
perfect model) or as the **fake** (the extraction call with the turn's `fake` text, what a small model
got wrong; the other calls as the oracle). Both are reached over real HTTP, as the proxy reaches any server.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from typing import Any

import uvicorn

from memory_proxy.memory.content import same_text_key
from memory_proxy.prompts import load_prompt

from ..fakes import free_port, read_body
from .scenarios import Turn

_TASK = re.compile(r'^TASK "(\w+)"', re.MULTILINE)
_KNOWN = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
_NEW_FACT = re.compile(r"^New fact: (.*)$", re.MULTILINE)


def task_prompt(messages: list[dict[str, Any]]) -> str:
    """The user message that names a formation call's task (a re-ask appends messages after it)."""
    return next((str(m.get("content")) for m in messages
                 if m.get("role") == "user" and _TASK.search(str(m.get("content", "")))), "")


def call_purpose(messages: list[dict[str, Any]]) -> str | None:
    """Which formation call a request is ("extract", "relate", "forget"): the task its user message names
    under the memory prompt; None for anything else (a chat turn)."""
    system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
    task = _TASK.search(task_prompt(messages))  # the first line: the user's message comes after it
    return task.group(1) if task and load_prompt("memory.md") in system else None


def oracle_answer(turn: Turn, said_on: date, purpose: str, prompt: str, *, fake: bool = False) -> Any:
    """A perfect model's answer to one formation call about `turn`, said on `said_on` (its `ideal`,
    `forget`, `forgets`); with `fake`, the extraction call is answered with the turn's `fake` text."""
    known = _KNOWN.findall(prompt)
    if purpose == "check":  # a perfect model confirms its perfect answers; the fake its own errors
        return {"answer": "yes"}
    if purpose == "provenance":  # every part the user's: the rules alone decide what the model is shown
        return {"not_own": []}
    if purpose == "forget":
        return {"forget": [int(n) for n, text in known if any(re.search(p, text, re.I) for p in turn.forgets)]}
    if purpose == "relate":
        new = _NEW_FACT.search(prompt)
        fact = same_text_key(new.group(1)) if new else ""
        ideal = [f for f in turn.ideal if same_text_key(f.text(said_on)) == fact] or list(turn.ideal)
        replaced = [f.replaces for f in ideal if f.replaces]
        return {n: "updates" if any(re.search(p, text, re.I) for p in replaced)
                else "same" if same_text_key(text) == fact else "unrelated" for n, text in known}
    if fake:
        return json.loads(turn.fake)
    return {"facts": [{"fact": f.text(said_on), "type": f.type} for f in turn.ideal], "forget": turn.forget}


class ScriptedMemoryLLM:
    """The memory LLM of a run without a real model: answers each formation call about `turn` (set by the
    runner before each turn is sent) as the oracle, or as the fake (`fake=True`)."""

    def __init__(self, *, fake: bool) -> None:
        self.fake = fake
        self.turn = Turn(day=0, user="")
        self.said_on = date.today()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = json.loads(await read_body(receive) or b"{}")
        purpose = call_purpose(request.get("messages", []))
        prompt = task_prompt(request.get("messages", []))
        content = json.dumps(oracle_answer(self.turn, self.said_on, purpose, prompt, fake=self.fake)
                             if purpose else {})
        await _send(send, 200, {"id": "m1", "object": "chat.completion", "created": 1, "model": "scripted",
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": content}}],
                                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})


class ScriptedChat:
    def __init__(self, name: str) -> None:
        self.name = name
        self.say = "OK."
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["path"].endswith("/models"):
            await _send(send, 200, {"object": "list", "data": [{"id": self.name, "object": "model"}]})
            return
        request = json.loads(body or b"{}")
        self.requests.append(request)
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if request.get("stream"):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": self.name,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": self.say},
                                  "finish_reason": None}]}
            done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (chunk, done))
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await send({"type": "http.response.body", "body": events + b"data: [DONE]\n\n"})
            return
        await _send(send, 200, {"id": "c1", "object": "chat.completion", "created": 1, "model": self.name,
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": self.say}}],
                                "usage": usage})


async def _send(send: Any, status: int, payload: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


@asynccontextmanager
async def serving(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Serve an ASGI app on loopback in this event loop (its lifespan run); yield its base URL."""
    port = port or free_port()
    # keep-alive longer than any wait between two requests of the runner: with uvicorn's 5 s, a connection
    # closed while a slow model's job ran was reused by the client (httpx.ReadError ended a 40-user run)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="auto", loop="none", timeout_keep_alive=3600))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the server stopped before it started")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
