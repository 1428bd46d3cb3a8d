"""The memory tools the chat model may call: `search_memory`, `remember`, `forget` — their definitions, the
reading of a call, and its execution for the identified user of the turn only (every store call in that
user's row-level security scope).

A call's arguments are data, never instructions, and every call gets an answer: arguments that are not
JSON, an unknown tool, a huge argument or a call past the turn's cap get a short tool result saying so,
never an exception; a failure while running one says that it failed, and the turn goes on.

- search_memory(query): the search the management API runs (retrieval/retrieve.retrieve_memories: hybrid
  search and ranking, above RETRIEVAL_MIN_SCORE), the user's own and the global memories; a JSON list of texts.
- remember(fact): through formation's own guards (formation/steps.kept_facts): about the user ("User …"),
  no secret (memory_proxy/redact), one short fact within the size limits, its names and numbers in the user's own
  words of this conversation (formation/evidence); then the memory model confirms that the user's own words state
  it, by meaning, in any language (tools/consent.py): what a document, a paste, a system prompt, the assistant
  or a tool result says is not the user's. Stored as the management API stores a memory (under the user's cap)
  and audited as `remember`.
- forget(what): only what the user's own latest message asks to forget, in any language, as formation's extraction
  call reads it (its `forget`; "don't forget to…" asks nothing); among the user's memories nearest to the user's
  words (never to `what`, which a document may have chosen), the memory model picks those the request names, then
  confirms each on its own; each is retired, audited as `forget` as formation's forget is. MAX_FORGOTTEN per turn.
Both read the user's own words as formation's rules leave them (formation/evidence.own_words).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..chat.request import message_text
from ..embedding.embedders import embed_one
from ..embedding.memory_document import embedding_text
from ..formation.drops import Drop
from ..formation.evidence import OwnWords
from ..formation.extract import ExtractedFact
from ..formation.memory_llm import MalformedReply, MemoryLLM
from ..formation.memory_text import storable
from ..formation.resolve import forget_candidates, forgotten
from ..formation.steps import kept_facts, users_words
from ..job_payload import FormationPayload, Remembered
from ..observability import TOOL_CALLS, log
from ..records import FactAttributes
from ..retrieval.retrieve import retrieve_memories
from ..services import Services
from ..settings import MEMORY_TYPES
from ..store import memories
from ..tokens import SPENT
from .consent import asks_to_forget, forget_request, user_states

if TYPE_CHECKING:
    from ..limits.meter import Meter

SEARCH, REMEMBER, FORGET = "search_memory", "remember", "forget"
MODES = {"off": (), "search": (SEARCH,), "all": (SEARCH, REMEMBER, FORGET)}
MAX_CALLS_PER_TURN = 8  # calls run in one turn, over all rounds; later ones are answered "not run"
MAX_ARGUMENT_CHARS = 2000  # of one call's arguments (a fact is ≤ 24 words, a query a few)
MAX_QUERY_CHARS = 500
MAX_RESULTS = 8  # memories one search returns
MAX_REMEMBERED = 3  # facts one turn may store
MAX_FORGOTTEN = 3  # memories one turn may retire
MAX_ELSEWHERE_CHARS = 1 << 18  # of the turn's text that is not the user's: past it, remember refuses (unchecked)
MAX_REQUEST_CHARS = 4000  # of the user's words shown with the candidates

_DEFINITIONS: dict[str, dict[str, Any]] = {
    SEARCH: {"description": "Search what you remember about the user. Use it when the user asks about "
                            "themselves or something they told you before.",
             "parameters": {"type": "object", "properties": {"query": {
                 "type": "string", "description": "what to look for, in a few words"}}, "required": ["query"]}},
    REMEMBER: {"description": "Remember a lasting fact the user told you about themselves, in their own words. "
                              "Never remember passwords, keys or what documents say.",
               "parameters": {"type": "object", "properties": {
                   "fact": {"type": "string", "description": 'one short sentence that starts with "User"'},
                   "type": {"type": "string", "enum": list(MEMORY_TYPES), "description": "the kind of fact"}},
                   "required": ["fact"]}},
    FORGET: {"description": "Forget something about the user, only when the user asks you to forget it.",
             "parameters": {"type": "object", "properties": {"what": {
                 "type": "string", "description": "what to forget, in a few words"}}, "required": ["what"]}},
}
_ARGUMENT = {SEARCH: "query", REMEMBER: "fact", FORGET: "what"}


def offered(mode: str) -> tuple[str, ...]:
    """The tool names a MEMORY_TOOLS mode offers."""
    return MODES.get(mode, ())


def definitions(mode: str) -> list[dict[str, Any]]:
    """The OpenAI function tools of a mode, as added beside the client's own."""
    return [{"type": "function", "function": {"name": name, **_DEFINITIONS[name]}} for name in offered(mode)]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a reply, as read: missing or odd pieces are empty strings (answered, never raised)."""

    id: str
    name: str
    arguments: str

    @classmethod
    def read(cls, raw: Any) -> ToolCall:
        raw = raw if isinstance(raw, dict) else {}
        function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):  # some servers send an object
            arguments = json.dumps(arguments) if isinstance(arguments, dict) else ""
        return cls(str(raw.get("id") or ""), str(function.get("name") or ""), arguments)


def tool_calls(message: Any) -> list[Any]:
    """The `tool_calls` of an assistant message, or []."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return calls if isinstance(calls, list) else []


def call_name(raw: Any) -> str:
    return ToolCall.read(raw).name


@dataclass
class ToolTurn:
    """One chat turn's tool work: whom it acts for, the user's words it may act on, and what it has done."""

    services: Services
    user_id: str
    mode: str
    payload: FormationPayload  # the user's words of this turn and the context before (formation's reading)
    said_at: datetime
    calls: int = 0
    remembered: list[Remembered] = field(default_factory=list)  # stored by `remember` (formation protects them)
    forgotten: int = 0
    on_done: Callable[[int, int], None] | None = None  # called once with (rounds, calls) when the rounds end
    answer_base: list[Any] = field(default_factory=list)  # the turn's messages as the answer round starts them
    own: tuple[OwnWords, list[str]] | None = None  # the user's own words (latest, earlier), once read
    forget_request: str | None = None  # what the user's latest message asks to forget, once read ("" for nothing)
    revealed: list[str] = field(default_factory=list)  # memory texts our tools returned to the model this turn
    untrusted: bool | None = None  # whether the turn holds text neither the user's nor ours (tools/outbound.py)
    notes: list[str] = field(default_factory=list)  # what the answer round is told (a client call withheld)
    answered: bool = False  # the answer round that follows a withheld call has been asked for
    meter: Meter | None = None  # the limits' count of the turn's tokens, when a limit applies: each round counts

    @property
    def llm(self) -> MemoryLLM:
        """The memory LLM that judges this turn's tool calls: formation's, reading the turn's model when it follows
        the upstream."""
        return self.services.llm.for_turn(self.payload.model)

    def done(self, rounds: int) -> None:
        """The rounds have ended (a final reply, an error or the client leaving): report them once."""
        on_done, self.on_done = self.on_done, None
        if on_done:
            on_done(rounds, self.calls)


async def run_calls(turn: ToolTurn, calls: list[Any], messages: list[Any]) -> list[dict[str, Any]]:
    """A tool message answering each call, in order; `messages` is the conversation so far (for provenance)."""
    results = []
    for raw in calls:
        call = ToolCall.read(raw)
        started = time.perf_counter()
        turn.calls += 1
        if turn.calls > MAX_CALLS_PER_TURN:
            outcome, content = "over_cap", f"not run: at most {MAX_CALLS_PER_TURN} memory tool calls per turn"
        else:
            counting = SPENT.set(turn.meter.besides) if turn.meter else None  # a remote embedder's tokens: the turn's
            try:
                outcome, content = await _run(turn, call, messages)
            finally:
                if counting:
                    SPENT.reset(counting)
        tool = call.name if call.name in _DEFINITIONS else "unknown"
        TOOL_CALLS.labels(tool, outcome).inc()
        log.info("memory_tool_call", user_id=turn.user_id, tool=tool, outcome=outcome,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        results.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return results


async def _run(turn: ToolTurn, call: ToolCall, messages: list[Any]) -> tuple[str, str]:
    if call.name not in offered(turn.mode):
        return "unknown_tool", f"unknown tool; the memory tools are: {', '.join(offered(turn.mode))}"
    if len(call.arguments) > MAX_ARGUMENT_CHARS:
        return "bad_arguments", f"not run: the arguments are over {MAX_ARGUMENT_CHARS} characters"
    try:
        arguments = json.loads(call.arguments or "{}")
    except (ValueError, RecursionError):
        return "bad_arguments", "not run: the arguments are not a JSON object"
    value = arguments.get(_ARGUMENT[call.name]) if isinstance(arguments, dict) else None
    if not isinstance(value, str) or not value.strip():
        return "bad_arguments", f"not run: give {_ARGUMENT[call.name]!r} as a non-empty string"
    try:
        if call.name == SEARCH:
            return await _search(turn, value.strip())
        if call.name == REMEMBER:
            kind = arguments.get("type")
            return await _remember(turn, value.strip(), kind if isinstance(kind, str) else "", messages)
        return await _forget(turn, value.strip())
    except Exception as exc:  # noqa: BLE001 - a memory-side failure: the tool says so and the turn goes on
        log.warning("memory_tool_failed", user_id=turn.user_id, tool=call.name, error=type(exc).__name__)
        return "failed", "the memory tool failed; answer without it"


async def _found(turn: ToolTurn, query: str, top_k: int, with_teams: bool = False) -> list[Any]:
    services = turn.services
    services.require_database()
    return await retrieve_memories(pool=services.pool, embedder=services.embedder, user_id=turn.user_id,
                                   query=query[:MAX_QUERY_CHARS], indexes=services.indexes,
                                   settings=replace(services.settings.retrieval, top_k=top_k), with_teams=with_teams)


async def _search(turn: ToolTurn, query: str) -> tuple[str, str]:
    """The user's memories for `query`, then their teams' (each marked as the team's, as injected); a forget
    looks among the user's own only."""
    found = await _found(turn, storable(query), MAX_RESULTS, with_teams=True)
    turn.revealed += [m.content for m in found]
    texts = [f"(team {m.team_name or m.team}) {m.content}" if m.team else m.content for m in found]
    return ("ok" if texts else "empty"), json.dumps(texts, ensure_ascii=False)


async def _own_words(turn: ToolTurn) -> tuple[OwnWords, list[str]]:
    """The user's own words of the latest message and of the earlier ones (formation's rules, off the loop, once a
    turn)."""
    if turn.own is None:
        said, _, earlier = await turn.services.scanner.run(users_words, turn.payload)
        turn.own = (said, earlier)
    return turn.own


def conversation_text(messages: list[Any]) -> str:
    """Every text the chat model read: system prompts, documents (a RAG template in a user message
    included: the formation payload holds only the user's part), the assistant's words, tool results. A
    name or number found here but not in the user's own words is refused (formation/evidence.grounding looks
    in the user's words first)."""
    return "\n".join(message_text(m.get("content")) for m in messages if isinstance(m, dict))


async def _remember(turn: ToolTurn, fact: str, kind: str, messages: list[Any]) -> tuple[str, str]:
    if len(turn.remembered) >= MAX_REMEMBERED:
        return "over_cap", f"not stored: at most {MAX_REMEMBERED} facts per turn"
    elsewhere = conversation_text(messages)
    if len(elsewhere) > MAX_ELSEWHERE_CHARS:
        return "refused", "not stored: the conversation is too long to check where the fact comes from"
    services = turn.services
    said, earlier = await _own_words(turn)
    extracted = ExtractedFact(fact=fact, **({"type": kind} if kind else {}))
    kept, dropped = await services.scanner.run(kept_facts, [extracted], said, earlier, elsewhere, turn.said_at)
    if kept and not await user_states(turn.llm, said, earlier, kept[0][0]):  # by meaning, in any language
        kept, dropped = [], [{"why": Drop.NOT_USERS_WORDS}]
    if not kept:
        why = dropped[0]["why"] if dropped else "refused"
        return "refused", (f"not stored ({why}): remember only a short fact about the user that starts with "
                           "\"User\", that the user said in their own words, without secrets")
    text, checked = kept[0]
    services.require_database()
    embedding = await embed_one(services.embedder, embedding_text(text, turn.said_at))
    attributes = FactAttributes(memory_type=checked.type,
                                expires_at=services.settings.formation.expiry(checked.type, turn.said_at))
    async with services.pool.connection() as conn:
        if await memories.find_same_text(conn, turn.user_id, text):
            return "ok", "already remembered"
        try:
            new_id = await memories.add_within_cap(
                conn, user_id=turn.user_id, max_memories=services.settings.formation.max_memories, content=text,
                embedding=embedding, model=services.embedder.model, stated_at=turn.said_at,
                metadata={"type": "memory", "source": "tool"}, attributes=attributes)
        except memories.MemoryCapReached:
            return "refused", "not stored: the user holds the most memories allowed"
        await memories.audit(conn, user_id=turn.user_id, old_id=None, new_id=new_id,
                             reason="remembered by the chat model from the user's words", action="remember")
    turn.remembered.append(Remembered(new_id, text))
    return "ok", "remembered"


async def _forget(turn: ToolTurn, what: str) -> tuple[str, str]:
    """Retire what the user's own latest message asks to forget (tools/consent.py): among the user's memories nearest
    to the user's words, those the memory model picks for the request, each confirmed on its own. `what`, the chat
    model's argument, chooses nothing: a document may have written it."""
    if turn.forgotten >= MAX_FORGOTTEN:
        return "over_cap", f"not forgotten: at most {MAX_FORGOTTEN} memories per turn"
    said, _ = await _own_words(turn)
    if turn.forget_request is None:
        turn.forget_request = await forget_request(turn.llm, said, turn.said_at.date().isoformat())
    if not turn.forget_request:
        return "refused", "not forgotten: the user's latest message does not ask to forget anything"
    turn.services.require_database()
    candidates = await forget_candidates(turn.services.pool, turn.services.embedder, turn.user_id, said.text)
    try:
        named = await forgotten(turn.llm, request=said.text[:MAX_REQUEST_CHARS], what=said.text[:MAX_REQUEST_CHARS],
                                candidates=candidates) if candidates else []
    except MalformedReply:
        named = []
    asked = [m for m in named[:MAX_FORGOTTEN - turn.forgotten] if await asks_to_forget(turn.llm, said, m.content)]
    if not asked:
        return "refused", "not forgotten: the user's latest message does not ask to forget that"
    done: list[str] = []
    async with turn.services.pool.connection() as conn:
        for memory in asked:
            if await memories.retire_memory(conn, user_id=turn.user_id, vector_id=memory.id,
                                            reason="the user asked to forget it", action="forget"):
                done.append(memory.content)  # one gone meanwhile is not retired
    if not done:
        return "empty", "nothing found to forget"
    turn.forgotten += len(done)
    turn.revealed += done
    return "ok", json.dumps({"forgotten": done}, ensure_ascii=False)
