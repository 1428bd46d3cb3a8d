"""Calls to the client's own tools in a turn where our tools showed the model the user's memories: sent on, or
withheld (docs/TOOLS.md#no-way-out-for-memory).

A client's tool (a web fetch, a ticket, a message) is a way out, the user's memories are private, and a document,
a paste or a tool result can tell the model to put one into the other. Once `search_memory` (or `forget`) has
returned memory text in a turn, a call to a client tool is withheld when
- the turn holds text that is neither the user's own nor ours (`holds_untrusted`): documents or pastes that
  formation/evidence.own_words leaves out of a user message, a client tool's result, or a system message holding
  retrieved documents (OpenWebUI's RAG template there), whatever the call carries, since a model can be told to
  encode what it sends; or
- its arguments carry memory text (`carries`): three words in a row of a memory the tools returned, or one of its
  numbers of four digits or more (an account, a phone, a code), however spaced or URL-encoded.
The model is told the call was not sent and asked for its answer without tools; the client never sees the call.
A user's own request in a turn with no such text ("what's the weather where I live?") still reaches the client's
tool, as long as it does not carry a memory whole.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus

from ..chat.request import message_text
from ..formation.evidence import own_words
from ..observability import TOOL_CALLS, log
from .calls import ToolTurn

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_DIGITS = re.compile(r"\d[\d\s./-]{2,}\d")
_RAG_IN_SYSTEM = re.compile(r"<context>|<source\b", re.I)
MIN_RUN = 3  # words in a row of a memory that a call may not carry
MIN_DIGITS = 4  # a number of a memory at least this long may not leave in a call
NOTE = ("A call to the client's tool {name} was not sent: it would have carried what you remember about the user, "
        "in a turn that holds text that is not theirs. Answer the user without it.")


def holds_untrusted(messages: list[Any]) -> bool:
    """Whether the conversation holds text that is neither the user's own nor ours (see the module docstring).
    Pure: the caller runs it off the event loop (own_words grows with the message)."""
    for message in messages:
        if not isinstance(message, dict):
            continue
        role, text = message.get("role"), message_text(message.get("content"))
        if role == "tool" or (role == "system" and _RAG_IN_SYSTEM.search(text)):
            return True
        if role == "user" and own_words(text).left_out.strip():
            return True
    return False


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def carries(arguments: str, revealed: list[str]) -> bool:
    """Whether a call's arguments hold memory text (see the module docstring)."""
    decoded = unquote_plus(arguments)
    said = " ".join(_words(decoded))
    digits = re.sub(r"\D", "", decoded)
    for memory in revealed:
        words = _words(memory)
        words = words[1:] if words[:1] == ["user"] else words
        runs = (" ".join(words[i:i + MIN_RUN]) for i in range(len(words) - MIN_RUN + 1))
        if any(f" {run} " in f" {said} " for run in runs):
            return True
        numbers = (re.sub(r"\D", "", m.group(0)) for m in _DIGITS.finditer(memory))
        if any(len(n) >= MIN_DIGITS and n in digits for n in numbers):
            return True
    return False


async def prepare(turn: ToolTurn, messages: list[Any]) -> None:
    """Once our tools have shown the model memories, read whether the turn holds untrusted text (off the event loop,
    once a turn), so that `withholds` can answer at once."""
    if turn.revealed and turn.untrusted is None:
        turn.untrusted = await turn.services.scanner.run(holds_untrusted, messages)


def withholds(turn: ToolTurn, arguments: str) -> bool:
    """Whether a call to the client's tool with these arguments is withheld (after `prepare`)."""
    return bool(turn.revealed) and (bool(turn.untrusted) or carries(arguments, turn.revealed))


def report(turn: ToolTurn, names: list[str]) -> None:
    """Withheld calls counted, logged (by count: a tool's name is the client's), noted for the answer round."""
    for name in names:
        TOOL_CALLS.labels("client", "withheld").inc()
        turn.notes.append(NOTE.format(name=name[:64]))
    if names:
        log.warning("client_tool_calls_withheld", user_id=turn.user_id, count=len(names),
                    untrusted_text=bool(turn.untrusted))
