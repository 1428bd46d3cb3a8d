"""The benchmark's scripted servers: `ScriptedChat`, the upstream, answers every `POST /v1/chat/completions`
with the text it is told to say next, streamed or not as asked, and keeps the requests it received (the
scripted assistant reply; the probe's request shows what the proxy injected). `OracleScript` is the script
of the memory LLM (memory_proxy.testing's `FakeMemoryLLM`) for the turn being sent: as the **oracle** (every
call from the turn's ideal answer: a perfect model) or as the **fake** (the extraction call with the turn's
`fake` text, what a small model got wrong; the other calls as the oracle). Both are reached over real HTTP,
as the proxy reaches any server.
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from memory_proxy.formation.memory_text import same_text_key
from memory_proxy.testing.asgi import read_body
from memory_proxy.testing.prompt_reader import new_fact, numbered

from .scenarios import Turn


def oracle_answer(turn: Turn, said_on: date, purpose: str, prompt: str, *, fake: bool = False) -> Any:
    """A perfect model's answer to one formation call about `turn`, said on `said_on` (its `ideal`,
    `forget`, `forgets`); with `fake`, the extraction call is answered with the turn's `fake` text."""
    known = numbered(prompt)
    if purpose == "check":  # a perfect model confirms its perfect answers; the fake its own errors
        return {"answer": "yes"}
    if purpose == "provenance":  # every part the user's: the rules alone decide what the model is shown
        return {"not_own": []}
    if purpose == "forget":
        return {"forget": [int(n) for n, text in known if any(re.search(p, text, re.I) for p in turn.forgets)]}
    if purpose == "relate":
        fact = same_text_key(new_fact(prompt))
        ideal = [f for f in turn.ideal if same_text_key(f.text(said_on)) == fact] or list(turn.ideal)
        replaced = [f.replaces for f in ideal if f.replaces]
        return {n: "updates" if any(re.search(p, text, re.I) for p in replaced)
                else "same" if same_text_key(text) == fact else "unrelated" for n, text in known}
    if fake:
        return json.loads(turn.fake)
    return {"facts": [{"fact": f.text(said_on), "type": f.type} for f in turn.ideal], "forget": turn.forget}


class OracleScript:
    """The memory LLM's answers in a run without a real model: each formation call about `turn` (set by the
    runner before each turn is sent), as the oracle, or as the fake (`fake=True`)."""

    def __init__(self, *, fake: bool) -> None:
        self.fake = fake
        self.turn = Turn(day=0, user="")
        self.said_on = date.today()

    def __call__(self, purpose: str, prompt: str) -> Any:
        return oracle_answer(self.turn, self.said_on, purpose, prompt, fake=self.fake)


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
