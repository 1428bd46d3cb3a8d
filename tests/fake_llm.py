"""A scripted memory LLM: answers the extraction and resolution prompts like Mistral or an OpenAI server
(and any other chat request with a plain "Noted.", so it can stand in for the upstream too).

Tests set `extract` (user message → facts) and `resolve` (list of Pending → decisions). It answers in
tool-call form when the request carries tools (instructor's TOOLS mode) and as JSON content otherwise
(JSON / JSON_SCHEMA modes). Used as a respx side effect, and served over real HTTP (`asgi_app`) for
tests that run the worker as a separate process.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

_USER_MESSAGE = re.compile(r"<user_message>\n(.*?)\n</user_message>", re.DOTALL)
_FACT = re.compile(r'^\[(\d+)\] New fact: (".*")$')
_EXISTING = re.compile(r'^\s+Existing: \(id ([^)]+)\) (".*")$')


@dataclass
class Pending:
    """One fact the resolution prompt asks about, with the existing memories listed under it."""

    index: int
    fact: str
    existing: list[tuple[str, str]] = field(default_factory=list)  # (id, text)


def parse_resolution_prompt(prompt: str) -> list[Pending]:
    pending: list[Pending] = []
    for line in prompt.splitlines():
        if m := _FACT.match(line):
            pending.append(Pending(int(m.group(1)), json.loads(m.group(2))))
        elif (m := _EXISTING.match(line)) and pending:
            pending[-1].existing.append((m.group(1), json.loads(m.group(2))))
    return pending


def same_or_add(pending: list[Pending]) -> list[dict[str, Any]]:
    """Default resolution: ignore a fact equal to an existing memory, add anything else."""
    out = []
    for p in pending:
        same = next((i for i, text in p.existing if text.lower() == p.fact.lower()), None)
        out.append({"candidate": p.index, "action": "ignore" if same else "add", "target_id": same,
                    "reason": "redundant" if same else "new"})
    return out


def rated(fact: str | dict[str, Any]) -> dict[str, Any]:
    """An extracted fact as the LLM rates it: tests give bare strings for important, certain facts."""
    return {"text": fact, "type": "preference", "importance": 8, "confidence": 0.9} if isinstance(fact, str) else fact


def is_memory_prompt(body: dict[str, Any]) -> bool:
    prompt = str(body["messages"][-1].get("content", ""))
    return "memory archivist" in prompt or "memory curator" in prompt


@dataclass
class FakeMemoryLLM:
    extract: Callable[[str], list[Any]] = lambda _message: []
    resolve: Callable[[list[Pending]], list[dict[str, Any]]] = same_or_add
    malformed: bool = False          # answer with text that is not the requested JSON
    hang: asyncio.Event | None = None  # hold every answer until this event is set
    prompts: list[tuple[str, str]] = field(default_factory=list)  # (purpose, prompt)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        if not is_memory_prompt(body):  # a plain chat turn
            return {"id": "cmpl-chat", "object": "chat.completion", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."},
                                 "finish_reason": "stop"}]}
        if "memory archivist" in prompt:
            purpose = "extract"
            match = _USER_MESSAGE.search(prompt)
            data: dict[str, Any] = {"memories": [rated(f) for f in self.extract(match.group(1) if match else "")]}
        else:
            purpose = "resolve"
            data = {"decisions": self.resolve(parse_resolution_prompt(prompt))}
        self.prompts.append((purpose, prompt))
        arguments = "this is not JSON {" if self.malformed else json.dumps(data)
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
        else:
            message = {"role": "assistant", "content": arguments}
        return {"id": "cmpl-mem", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if self.hang is not None and is_memory_prompt(body):
            await self.hang.wait()
        return httpx.Response(200, json=self.answer(body))

    def calls(self, purpose: str) -> int:
        return sum(1 for p, _ in self.prompts if p == purpose)


def asgi_app(llm: FakeMemoryLLM, embed: Callable[[httpx.Request], httpx.Response]) -> Any:
    """The fake memory LLM and embeddings over real HTTP: `/v1/chat/completions`, `/v1/embeddings`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = httpx.Request(scope["method"], f"http://fake{scope['path']}", content=body)
        response = embed(request) if scope["path"].endswith("/embeddings") else await llm(request)
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": response.content})

    return app
