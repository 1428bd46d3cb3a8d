"""`FakeMemoryLLM`: a scripted memory LLM that answers the formation calls like Mistral or an OpenAI server
(and any other chat request with a plain "Noted.", so it can stand in for the upstream too).

By default its answers come from `extract(message) -> facts`: each fact a string ("User …") or a dict with
`fact`, `type` and optionally the known fact it `replaces_text` (or `refines_text`, `same_text`), and, for a
team's fact written with its team's name ("Team Platform's …"), the sentence formation `stores` ("Team's …",
the one the relate call is shown); the relate call is then answered from those ("updates", "detail", "same", else "unrelated"). `extract` may instead
return a dict `{"facts": [...], "forget": "what", "forgets": [texts]}`: the forget call picks the candidates
whose text is in `forgets`. `provenance(parts)` answers the provenance call: the numbers of the parts that
are not the user's own words (none by default). A benchmark replaces all of this with its own `script`
(purpose, prompt) -> answer, e.g. a perfect model answering from each turn's ideal facts.

It answers in tool-call form when the request carries tools (instructor's TOOLS mode) and as JSON content
otherwise (JSON / JSON_SCHEMA modes). Used as a respx side effect (`await llm(request)`), and served over
real HTTP (`asgi_app`) for tests and benchmarks that reach it as the proxy reaches any server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .asgi import ASGIApp, Receive, Scope, Send, read_body
from .prompt_reader import call_purpose, new_fact, numbered, said_message, task_prompt

Script = Callable[[str, str], Any]  # (purpose, prompt) -> the answer's JSON value
_RELATION_OF = {"replaces_text": "updates", "refines_text": "detail", "same_text": "same"}
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def is_memory_prompt(body: dict[str, Any]) -> bool:
    return call_purpose(body.get("messages", [])) is not None


@dataclass
class FakeMemoryLLM:
    extract: Callable[[str], Any] = lambda _message: []
    script: Script | None = None     # answers every formation call instead of `extract` and the rest
    raw: dict[str, str] = field(default_factory=dict)  # purpose → the reply's text as is (hostile replies)
    finish_reason: str = "stop"  # of the `raw` replies ("length": cut at max_tokens)
    check: Callable[[str], bool] = lambda _prompt: True  # the answer to a yes/no check call, from its prompt
    provenance: Callable[[list[str]], list[int]] = lambda _parts: []  # the numbers of the parts not the user's
    down: bool = False               # answer every formation call with HTTP 503
    hang: asyncio.Event | None = None  # hold every answer until this event is set
    slow_s: float = 0.0              # seconds every formation answer takes (a small model writing to its limit)
    usage: dict[str, int] = field(default_factory=lambda: dict(USAGE))  # reported per formation call
    prompts: list[tuple[str, str]] = field(default_factory=list)  # (purpose, the call's prompt)
    _pointers: dict[str, dict[str, str]] = field(default_factory=dict)  # fact → {known text: relation}
    _forgets: list[str] = field(default_factory=list)

    def _extraction(self, prompt: str) -> dict[str, Any]:
        answer = self.extract(said_message(prompt) or "")
        if not isinstance(answer, dict):
            answer = {"facts": answer}
        facts = []
        for fact in answer.get("facts", []):
            fact = {"fact": fact} if isinstance(fact, str) else dict(fact)
            self._pointers[fact["fact"]] = {fact.pop(k): r for k, r in _RELATION_OF.items() if k in fact}
            if "stores" in fact:  # related as formation stores it
                self._pointers[fact.pop("stores")] = self._pointers[fact["fact"]]
            facts.append({"type": "preference", **fact})
        self._forgets = list(answer.get("forgets", []))
        return {"facts": facts, "forget": answer.get("forget", "")}

    def data(self, purpose: str, prompt: str) -> Any:
        if self.script is not None:
            return self.script(purpose, prompt)
        known = numbered(prompt)
        if purpose == "check":
            return {"answer": "yes" if self.check(prompt) else "no"}
        if purpose == "provenance":
            return {"not_own": self.provenance([text for _, text in numbered(prompt.rsplit("Message:", 1)[-1])])}
        if purpose == "relate":
            pointers = self._pointers.get(new_fact(prompt), {})
            return {n: pointers.get(text, "unrelated") for n, text in known}
        if purpose == "forget":
            return {"forget": [int(n) for n, text in known if text in self._forgets]}
        return self._extraction(prompt)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        purpose = call_purpose(body["messages"])
        if purpose is None:  # a plain chat turn
            return {"id": "cmpl-chat", "object": "chat.completion", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."},
                                 "finish_reason": "stop"}]}
        prompt = task_prompt(body["messages"])
        self.prompts.append((purpose, prompt))
        arguments = self.raw[purpose] if purpose in self.raw else json.dumps(self.data(purpose, prompt))
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
        else:
            message = {"role": "assistant", "content": arguments}
        return {"id": "cmpl-mem", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [{"index": 0, "message": message,
                             "finish_reason": self.finish_reason if purpose in self.raw else "stop"}],
                "usage": dict(self.usage)}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if self.hang is not None and is_memory_prompt(body):
            await self.hang.wait()
        if self.slow_s and is_memory_prompt(body):
            await asyncio.sleep(self.slow_s)
        if self.down and is_memory_prompt(body):
            return httpx.Response(503, json={"error": {"message": "overloaded", "type": "server_error"}})
        return httpx.Response(200, json=self.answer(body))

    def calls(self, purpose: str) -> int:
        return sum(1 for p, _ in self.prompts if p == purpose)


def asgi_app(llm: FakeMemoryLLM, embed: Callable[[httpx.Request], httpx.Response] | None = None) -> ASGIApp:
    """The fake memory LLM (and, if given, embeddings) over real HTTP: `/v1/chat/completions`, `/v1/embeddings`."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        request = httpx.Request(scope["method"], f"http://fake{scope['path']}", content=body)
        is_embedding = embed is not None and scope["path"].endswith("/embeddings")
        response = embed(request) if embed is not None and is_embedding else await llm(request)
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": response.content})

    return app
