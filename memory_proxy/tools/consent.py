"""What the memory tools may act on: only what the user's own words say, judged by the memory LLM.

The chat model reads documents, pastes, tool results, system prompts and its own earlier replies as well as the
user's messages, and any of those can tell it to remember or forget something. The tools read the user's own
words as formation does (formation/evidence.own_words leaves out what has a form: OpenWebUI's RAG documents, fenced
code, block quotes, text between separator lines, a pasted chat log, machine-addressed lines), and then:
- before `remember` stores a fact, the memory model is asked whether those words state it (`user_states`);
- before `forget` retires anything, formation's own extraction call reads the latest message for a request to
  forget, in any language, negations included (`forget_request`), and the memory model confirms, memory by memory,
  that the message asks to forget it (`asks_to_forget`).
The chat model's own arguments only say what it wants; what happens is decided by the user's words. Decisions about
meaning are the model's; the rules here only frame what it is shown (docs/TOOLS.md#what-the-tools-may-act-on). Each
judgement is one bounded call; a reply that cannot be read, or a timeout, consents to nothing."""

from __future__ import annotations

import asyncio
import re

from ..formation.evidence import OMITTED, OwnWords
from ..formation.extract import extract_facts, neutral
from ..formation.memory_llm import MalformedReply, MemoryLLM
from ..formation.resolve import check

STATES = "Does the user, in their own words here, say that the fact is true of themselves?"
FORGETS = "Does this message ask you to forget this fact?"
MAX_SHOWN_CHARS = 4000  # of the user's own words shown to the model (the latest message first)
_WORD = re.compile(r"\w")
CHECK_TIMEOUT_S = 30.0  # one judgement, on the request path: past it, nothing is consented to


def shown(said: OwnWords, earlier: list[str]) -> str:
    """The user's own words the model reads: the latest message, then the earlier ones, newest first, bounded."""
    parts = [said.text, *reversed(earlier)]
    return "\n".join(p for p in parts if _WORD.search(p.replace(OMITTED, " ")))[:MAX_SHOWN_CHARS]


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


async def asks_to_forget(llm: MemoryLLM, said: OwnWords, fact: str) -> bool:
    """Whether the user's own latest message asks to forget `fact` (the memory LLM's yes, for this one memory)."""
    if not shown(said, []):
        return False
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check(llm, FORGETS, f"Message: {neutral(said.text[:MAX_SHOWN_CHARS])}\nFact: {neutral(fact)}",
                               "check_forget_turn.md")
    except (MalformedReply, TimeoutError):
        return False


async def forget_request(llm: MemoryLLM, said: OwnWords, today: str) -> str:
    """What the user's latest message asks to forget, as formation's extraction call reads it (its `forget`, "" for
    nothing): the same judgement, negations included, that a turn's formation job makes."""
    if not shown(said, []):
        return ""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return (await extract_facts(llm, today=today, before="", message=said.text[:MAX_SHOWN_CHARS])).forget
    except (MalformedReply, TimeoutError):
        return ""
