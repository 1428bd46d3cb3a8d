"""A scripted memory LLM: answers the formation call like Mistral or an OpenAI server (and any other
chat request with a plain "Noted.", so it can stand in for the upstream too).

Tests set `extract(message) -> facts`: each fact a string ("User …"), or a dict with `fact`, `type` and
either `replaces` (a number) or `replaces_text` (the known fact it replaces, turned into that fact's
number in the prompt, 0 when it is not listed). It answers in tool-call form when the request carries
tools (instructor's TOOLS mode) and as JSON content otherwise (JSON / JSON_SCHEMA modes). Used as a respx
side effect, and served over real HTTP (`asgi_app`) for tests that run the worker as a separate process.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

_MESSAGE = re.compile(r"<message>\n(.*?)\n</message>", re.DOTALL)
_KNOWN = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


def is_memory_prompt(body: dict[str, Any]) -> bool:
    return bool(_MESSAGE.search(str(body["messages"][-1].get("content", ""))))


def known_facts(prompt: str) -> list[str]:
    """The known facts listed in a formation prompt, in their numbered order."""
    return [text for _, text in _KNOWN.findall(prompt.split("Message:", 1)[0])]


def as_fact(fact: str | dict[str, Any], known: list[str]) -> dict[str, Any]:
    if isinstance(fact, str):
        return {"fact": fact, "type": "preference", "replaces": 0}
    fact = dict(fact)
    if "replaces_text" in fact:
        old = fact.pop("replaces_text")
        fact["replaces"] = known.index(old) + 1 if old in known else 0
    return {"type": "preference", "replaces": 0, **fact}


@dataclass
class FakeMemoryLLM:
    extract: Callable[[str], list[Any]] = lambda _message: []
    malformed: bool = False          # answer with text that is not JSON at all
    hang: asyncio.Event | None = None  # hold every answer until this event is set
    prompts: list[tuple[str, str]] = field(default_factory=list)  # (purpose, the turn's prompt)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = str(body["messages"][-1]["content"])
        if not is_memory_prompt(body):  # a plain chat turn
            return {"id": "cmpl-chat", "object": "chat.completion", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."},
                                 "finish_reason": "stop"}]}
        self.prompts.append(("extract", prompt))
        match = _MESSAGE.search(prompt)
        known = known_facts(prompt)
        data = {"facts": [as_fact(f, known) for f in self.extract(match.group(1) if match else "")]}
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
