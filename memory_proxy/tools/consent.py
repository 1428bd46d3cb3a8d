"""What the memory tools may act on: only what the user's own words say, judged by the memory LLM.

The chat model reads documents, pastes, tool results, system prompts and its own earlier replies as well as the
user's messages, and any of those can tell it to remember or forget something. So before `remember` stores a
fact, the memory model is asked whether the user's own words of this conversation state it (the rules of
formation/evidence.own_words first leave out what has a form: OpenWebUI's RAG documents, fenced code, block
quotes, text between separator lines, machine-addressed lines); and before `forget` retires anything, the memory
model reads the user's latest message for a request to forget, in any language, and what it names, so that
neither a negation ("don't forget to…") nor a document's choice of target can erase a memory. The chat model's
own arguments only say what it wants; what happens is decided by the user's words. Decisions about meaning are
the model's; the rules here only frame what it is shown (docs/TOOLS.md#what-the-tools-may-act-on).

Each judgement is one bounded call; a reply that cannot be read, a timeout or an outage consents to nothing.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field, field_validator

from ..formation.evidence import OwnWords
from ..formation.extract import neutral
from ..formation.memory_llm import MalformedReply, MemoryLLM
from ..formation.resolve import check
from ..prompts import load_prompt, render

STATES = "Does the user, in their own words here, say that the fact is true of themselves?"
MAX_SHOWN_CHARS = 4000  # of the user's own words shown to the model (the latest message first)
MAX_REQUEST_CHARS = 200  # of what the user asks to forget, as the model quotes it
CHECK_TIMEOUT_S = 30.0  # one judgement, on the request path: past it, nothing is consented to


class ForgetRequest(BaseModel):
    """What the user's message asks to forget, in its own words; "" when it asks nothing of the kind."""

    forget: str = Field(default="")

    @field_validator("forget", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        return value.strip()[:MAX_REQUEST_CHARS] if isinstance(value, str) else ""


def shown(said: OwnWords, earlier: list[str]) -> str:
    """The user's own words the model reads: the latest message, then the earlier ones, newest first, bounded."""
    parts = [said.text, *reversed(earlier)]
    return "\n".join(p for p in parts if p.strip())[:MAX_SHOWN_CHARS]


async def user_states(llm: MemoryLLM, said: OwnWords, earlier: list[str], fact: str) -> bool:
    """Whether the user's own words of this conversation state `fact` about themselves (the memory LLM's yes)."""
    words = shown(said, earlier)
    if not words:
        return False
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check(llm, STATES, f"Message: {neutral(words)}\nFact: {neutral(fact)}", "check_user_turn.md")
    except (MalformedReply, TimeoutError):
        return False


async def forget_request(llm: MemoryLLM, said: OwnWords) -> str:
    """What the user's latest message asks to forget, in its words; "" when it asks nothing of the kind."""
    if not said.text.strip():
        return ""
    turn = render("forget_request_turn.md", message=neutral(said.text[:MAX_SHOWN_CHARS]))
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            answer = await llm.structured(ForgetRequest, [{"role": "system", "content": load_prompt("memory.md")},
                                                          {"role": "user", "content": turn}], purpose="forget_request")
    except (MalformedReply, TimeoutError):
        return ""
    return answer.forget
