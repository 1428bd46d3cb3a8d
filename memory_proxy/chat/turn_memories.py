"""What retrieval gives one identified chat turn: its memories within the token budget, or none when the memory
side fails (counted, logged, never the client's problem), and the turn's `memory_retrieval` log line.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from ..errors import MemoryUnavailable
from ..observability import FAIL_OPEN, MEMORIES_INJECTED, RETRIEVAL_OUTCOMES, log
from ..records import Memory
from ..retrieval.retrieve import memories_for_turn
from ..services import Services
from ..store.teams import Holder
from .inject import has_client_memory, within_budget
from .request import search_query, users_message


@dataclass
class TurnRetrieval:
    """What retrieval did for one identified chat turn: the memories injected, the ones a request without the
    memory tools gets (`plain`: the same, unless the tools are offered with MEMORY_TOOLS_INJECT=always_on), and
    its `memory_retrieval` log line (info; warning when it failed open), logged once: at once, or when the memory
    tool rounds end (with them)."""

    memories: list[Memory]
    plain: list[Memory]
    outcome: str
    fields: dict[str, Any]

    def log(self, **tools: Any) -> None:
        (log.warning if self.outcome == "failed" else log.info)("memory_retrieval", **self.fields, **tools)

    def log_with_rounds(self, mode: str, rounds: int, calls: int) -> None:
        """The line of a turn offered the memory tools, logged when their rounds end."""
        self.log(tools=mode, rounds=rounds, tool_calls=calls)


async def turn_memories(services: Services, user_id: str, body: dict[str, Any],
                            always_on_only: bool = False, groups: list[str] | None = None) -> TurnRetrieval:
    """The user's memories for this turn within the token budget, or none if the memory side fails; with
    `always_on_only`, only the always-on tier (pinned and identity memories) is injected."""
    started = time.perf_counter()
    plain, always_on, outcome, reason, whole = await _retrieved(services, user_id, body, groups)
    memories = always_on if always_on_only else plain
    if outcome in ("hit", "miss"):
        outcome = "hit" if memories else "miss"
    RETRIEVAL_OUTCOMES.labels(outcome).inc()
    MEMORIES_INJECTED.observe(len(memories))
    for holder, ids in _by_holder(user_id, memories).items():  # a team's memories are counted as the team's
        services.uses.add(holder, ids)
        services.indexes.used(holder, ids)
    return TurnRetrieval(memories, plain, outcome, {
        "user_id": user_id, "outcome": outcome, "count": len(memories), "ids": [m.id for m in memories],
        "ms": round((time.perf_counter() - started) * 1000, 1), **({"reason": reason} if reason else {}),
        **({"about_user": True} if whole else {})})


def _by_holder(user_id: str, memories: list[Memory]) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for m in memories:
        held.setdefault(Holder.of_memory(user_id, m.team).principal, []).append(m.id)
    return held


async def _retrieved(services: Services, user_id: str, body: dict[str, Any],
                     groups: list[str] | None) -> tuple[list[Memory], list[Memory], str, str, bool]:
    """(both tiers within the budget, the always-on tier alone within it, outcome: hit, miss, skipped or failed,
    why: the fail-open reason — of the whole retrieval, or of the search when recent memories stood in —, or
    the skip's, and whether the message asked about the user as a whole)."""
    messages = body["messages"]
    if has_client_memory(messages):
        return [], [], "skipped", "client_memory", False
    retrieval = services.settings.retrieval
    try:
        services.require_database()
        if not services.breaker.allow():
            raise MemoryUnavailable("breaker_open", "the database failed repeatedly: not tried for a while")
        mirror = (None if groups is None else
                  functools.partial(services.mirror.mirror_on, user_id=user_id, groups=groups))
        found = await memories_for_turn(pool=services.pool, embedder=services.embedder, user_id=user_id,
                                        about_user=services.about_user,
                                        query=search_query(users_message(messages)), settings=retrieval,
                                        indexes=services.indexes, embedder_breaker=services.embedder_breaker,
                                        mirror=mirror)
        services.breaker.success()
    except MemoryUnavailable as exc:
        if exc.reason.startswith("database_") and exc.reason != "database_not_ready":
            services.breaker.failure()
        FAIL_OPEN.labels(exc.reason).inc()
        return [], [], "failed", exc.reason, False
    except Exception:  # noqa: BLE001 - a bug on the memory side: the turn is still relayed, and it is counted
        FAIL_OPEN.labels("internal_error").inc()
        log.exception("retrieval_error")  # the traceback; the turn's memory_retrieval line follows
        return [], [], "failed", "internal_error", False
    memories = within_budget(found.always_on, found.query, retrieval.token_budget, found.team)
    always_on = within_budget(found.always_on, [], retrieval.token_budget)
    return memories, always_on, "hit" if memories else "miss", found.fallback, found.about_user
