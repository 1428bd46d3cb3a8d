"""One question asked of the chat model, directly or through the proxy, as a client streams it; what it cost.

Every system reaches the model through one recording relay (benchmarks/openwebui/stack.ModelsShim, `keep`): it keeps
each request as the model got it (what it was given: injected memories, tool results, the transcript) and the end of
each reply (its usage: prompt and completion tokens, every round of a turn summed).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from ..openwebui.stack import ModelsShim
from ..tools_model import reply_usage, streamed

ANSWER_MAX_TOKENS = 150  # a reply long enough for any LoCoMo answer, short enough for 2 cores


@dataclass
class Reply:
    question: int  # its index in the conversation's questions
    text: str = ""
    given: list[str] = field(default_factory=list)  # what the model read besides the question, every round
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    first_token_s: float = 0.0
    error: str = ""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _given(body: dict[str, Any], question: str) -> list[str]:
    texts = []
    for message in body.get("messages", ()):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str) and content and content != question:
            texts.append(content)
    return texts


async def ask(client: httpx.AsyncClient, shim: ModelsShim, url: str, headers: dict[str, str], model: str,
              messages: list[dict[str, Any]], index: int) -> Reply:
    """Stream one chat turn to `url` (the model through `shim`, or the proxy whose upstream is `shim`)."""
    probe = uuid.uuid4().hex  # marks this turn's requests among the shim's (a tool round sends more than one)
    question = str(messages[-1]["content"])
    body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0,
            "max_tokens": ANSWER_MAX_TOKENS, "messages": messages, "probe": probe}
    reply = Reply(index)
    began = time.perf_counter()
    try:
        reply.text, first_ms, _ = await streamed(client, url, headers, body)
        reply.first_token_s = first_ms / 1000
    except (RuntimeError, httpx.HTTPError, ValueError) as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    reply.seconds = time.perf_counter() - began
    mine = [n for n in shim.requests if (n.get("body") or {}).get("probe") == probe]
    shim.requests[:] = [n for n in shim.requests if n not in mine]
    reply.requests = len(mine)
    for note in mine:
        prompt, completion = reply_usage(note.get("tail", ""))
        reply.prompt_tokens += prompt
        reply.completion_tokens += completion
        reply.given += _given(note.get("body") or {}, question)
    return reply
