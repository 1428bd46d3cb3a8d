"""Pure: (messages, memories) → messages with the memories in the system prompt.

Memories are rendered as JSON string literals with `<` and `>` escaped, inside a fixed block from
`memory_proxy/prompts/inject.md`: a memory saying "ignore previous instructions" or "</user_memories>" stays a
quoted datum and cannot close the block. The block is appended to the first system message (string or
content-part array), or a system message is inserted first when there is none.
"""

from __future__ import annotations

import json
from typing import Any

from ..prompts import render
from ..records import Memory
from ..settings import EPISODE
from ..tokens import count_tokens
from .request import message_text

# OpenWebUI's own Memory feature puts this block into the system message. When it is there the client
# already injected its memories: we skip ours (no retrieval at all) rather than inject twice.
CLIENT_MEMORY_MARKER = "<memory_context>"


def quote_memory(content: str) -> str:
    return json.dumps(content, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def memory_line(memory: Memory) -> str:
    """One memory as the model reads it: when it was said, whose it is when a team's (the fact is in the
    third person: "User ..." is the user, "The team ..." the team), or that it is the user's own words (an
    episode, in the first person: "I" is the user), and the text."""
    team = f"(team {quote_memory(memory.team_name or memory.team)}) " if memory.team else ""
    words = "(the user's words) " if memory.memory_type == EPISODE else ""
    return f"- (said {memory.said_at:%Y-%m-%d}) {team}{words}{quote_memory(memory.content)}"


def render_memories(memories: list[Memory]) -> str:
    teams = render("inject_teams.md") if any(m.team for m in memories) else ""
    return render("inject.md", memories="\n".join(memory_line(m) for m in memories), teams=teams)


def within_budget(always_on: list[Memory], query: list[Memory], budget_tokens: int,
                  team: list[Memory] | None = None) -> list[Memory]:
    """The memories to inject, in order: the always-on tier while it fits in half the budget, then the
    query tier while the whole budget allows, then the user's teams' memories in what is left (a team,
    however large, never crowds out the user's own). A memory too long to fit is passed over, not cut. The
    budget counts the memory lines, not the block's fixed instructions (about 60 tokens).

    They are shown best first: the query tier's in their ranking, then the always-on ones it did not find, then
    the teams' (a small model reads the first lines most: docs/BENCHMARKS.md#answers)."""
    chosen: list[Memory] = []
    seen: set[tuple[str, str]] = set()
    used = 0
    for tier, cap in ((always_on, budget_tokens // 2), (query, budget_tokens), (team or [], budget_tokens)):
        for memory in tier:
            cost = count_tokens(memory_line(memory))
            if (memory.team, memory.id) not in seen and used + cost <= cap:
                chosen.append(memory)
                seen.add((memory.team, memory.id))
                used += cost
    found = {(m.team, m.id): rank for rank, m in enumerate(query)}
    tier_of = {(m.team, m.id): 1 for m in always_on} | {(m.team, m.id): 2 for m in team or []}
    return sorted(chosen, key=lambda m: (0, found[m.team, m.id]) if (m.team, m.id) in found
                  else (tier_of[m.team, m.id], 0))  # stable: each tier keeps its own order


def has_client_memory(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "system"
               and CLIENT_MEMORY_MARKER in message_text(m.get("content")) for m in messages)


def inject_memories(messages: list[Any], memories: list[Memory], tools_note: bool = False) -> list[Any]:
    """A new message list with the memory block in the system prompt (and, with `tools_note`, the note that the
    model can search for more: memory_proxy/prompts/memory_tools.md); the input is not modified."""
    parts = [*([render_memories(memories)] if memories else []), *([render("memory_tools.md")] if tools_note else [])]
    return with_system_block(messages, "\n\n".join(parts)) if parts else messages


def with_tool_results(messages: list[Any], results: list[str]) -> list[Any]:
    """The messages with what the memory tools returned this turn in the system prompt (memory_proxy/prompts/memory_found.md):
    a search's memories one per line, any other result as one line, each JSON-quoted as memories are."""
    lines = []
    for result in results:
        try:
            found = json.loads(result)
        except (ValueError, RecursionError):
            found = None
        texts = [str(t) for t in found] if isinstance(found, list) else [result]
        lines += [f"- {quote_memory(text)}" for text in texts]
    return with_system_block(messages, render("memory_found.md", results="\n".join(lines) or "- (nothing)"))


def with_system_block(messages: list[Any], block: str) -> list[Any]:
    """A new message list with `block` appended to the first system message (string or content parts), or in a
    system message of its own put first when there is none."""
    out = list(messages)
    for i, message in enumerate(out):
        if isinstance(message, dict) and message.get("role") == "system":
            content = message.get("content")
            if isinstance(content, list):
                merged: Any = [*content, {"type": "text", "text": block}]
            else:
                merged = f"{content}\n\n{block}" if content else block
            out[i] = {**message, "content": merged}
            return out
    return [{"role": "system", "content": block}, *out]
