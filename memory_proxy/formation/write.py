"""The write step of formation: a job's decisions stored, each to its holder, in the worker's transaction that also
marks the job done (formation/worker.py), so a crash or a takeover never writes a job twice.

The rules no model decides live here: the flip-flop rule (a replace, refine or forget only happens when this
statement is strictly newer than the memory it retires), the cap on a holder's active memories (facts refused past
MAX_MEMORIES_PER_USER; episodes past MAX_EPISODES_PER_USER retire the oldest), proposals kept apart for a team's
editors (TEAM_FACTS=review), and the audit of every replacement (store/memories.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ..observability import FACTS_DROPPED, log
from ..settings import EPISODE
from ..store import jobs, manage, memories, proposals
from ..store.teams import Holder
from .drops import Drop
from .resolve import Resolution


async def write_decisions(conn: AsyncConnection[Any], job: jobs.Job, resolutions: list[Resolution],
                          model: str, max_memories: int, max_episodes: int) -> list[dict[str, Any]]:
    """Write the decisions for `job.user_id`, each to its holder: the user's own memories, or a team's (inside
    the caller's transaction, in the user's scope: a team's rows only while the user is a member); return
    them as logged.

    A target already retired by another job makes a replacing fact an add (and a forget a no-op); a
    statement not newer than its target is ignored (flip-flop rule). A holder with `max_memories` active
    memories gets no new one (a replacement keeps the count, so it still happens).
    """
    def whose(r: Resolution) -> str:
        return (r.holder or Holder(job.user_id)).principal

    episodes = [r for r in resolutions if r.attributes.memory_type == EPISODE]
    applied = await _write_episodes(conn, job, episodes, model, max_episodes) if episodes else []
    resolutions = [r for r in resolutions if r.attributes.memory_type != EPISODE]
    # Each holder's count lock first, in one order (a team's is shared by its members' concurrent jobs).
    adding = sorted({whose(r) for r in resolutions if r.action == "add" and not r.propose})
    active = {holder: await memories.count_memories(conn, holder, lock=True) for holder in adding}
    for r in resolutions:
        holder = whose(r)
        entry: dict[str, Any] = {"fact": r.fact, "action": r.action, "target_id": r.target_id, "reason": r.reason,
                                 **({"team": r.holder.team_id} if r.holder and r.holder.is_team else {})}
        if r.propose and r.action in ("add", "replace", "refine"):  # TEAM_FACTS=review: for the team's editors
            entry.update(action="propose", proposal_id=await proposals.propose(
                conn, holder=holder, proposed_by=job.user_id, content=r.fact, embedding=r.embedding, model=model,
                action=r.action, replaces=r.target_id, reason=r.reason, stated_at=job.said_at,
                attributes=r.attributes))
            applied.append(entry)
            continue
        if r.action in ("replace", "refine", "forget") and r.target_id:
            locked = await memories.lock_active_link(conn, holder, r.target_id)
            stated_at = locked.stated_at if locked else None
            if stated_at is None:
                entry.update(action="add" if r.action in ("replace", "refine") else "ignore", target_id=None,
                             reason=f"{r.reason} (target already retired)")
            elif job.said_at <= stated_at:
                entry.update(action="ignore", reason="flip-flop rule: the stored memory is not older")
        if entry["action"] == "add" and holder not in active:
            active[holder] = await memories.count_memories(conn, holder, lock=True)
        if entry["action"] == "add" and active[holder] >= max_memories:
            entry.update(action="ignore", reason=f"{holder} holds {active[holder]} active memories (MAX_MEMORIES_PER_USER)")
            FACTS_DROPPED.labels(Drop.USER_CAP).inc()
            log.warning("memory_limit", limit="max_memories_per_user", user_id=holder, active=active[holder])
        elif entry["action"] == "add":
            active[holder] += 1
        if entry["action"] == "forget":
            await memories.retire_memory(conn, user_id=holder, vector_id=r.target_id or "",
                                         reason=r.reason, action="forget")
        elif entry["action"] in ("add", "replace", "refine"):
            new_id = await memories.add_memory(conn, user_id=holder, content=r.fact, embedding=r.embedding,
                                               model=model, stated_at=job.said_at, attributes=r.attributes)
            if new_id is None:  # the holder already has this exact text (a concurrent job stored it)
                new_id = await memories.find_same_text(conn, holder, r.fact)
                if entry["action"] == "add":
                    entry.update(action="ignore", target_id=new_id, reason="exact duplicate")
            if entry["action"] in ("replace", "refine") and new_id:
                await memories.supersede_memory(conn, user_id=holder, old_id=entry["target_id"],
                                                new_id=new_id, reason=r.reason, action=entry["action"])
            entry["memory_id"] = new_id
        applied.append(entry)
    return applied


async def _write_episodes(conn: AsyncConnection[Any], job: jobs.Job, episodes: list[Resolution], model: str,
                          max_episodes: int) -> list[dict[str, Any]]:
    """The turn's episodes added, the oldest retired first past MAX_EPISODES_PER_USER (an episode is the user's
    words on a day: never a replacement, never compared with a fact)."""
    held = await memories.count_memories(conn, job.user_id, lock=True, episodes=True)
    if (over := held + len(episodes) - max_episodes) > 0:
        await memories.retire_oldest_episodes(conn, job.user_id, over)
    applied = []
    for r in episodes:
        new_id = await memories.add_memory(conn, user_id=job.user_id, content=r.fact, embedding=r.embedding,
                                           model=model, stated_at=job.said_at, attributes=r.attributes)
        applied.append({"fact": r.fact, "action": "episode", "target_id": None,  # apart: the facts' rates stay theirs
                        "reason": r.reason if new_id else f"{r.reason}: already held", "memory_id": new_id})
    return applied


async def keep_versions(pool: AsyncConnectionPool, user_id: str, decisions: list[dict[str, Any]],
                        max_versions: int) -> None:
    """MAX_VERSIONS_PER_MEMORY for the memories a job replaced: after the job's commit, so that a failure here
    (logged) loses nothing and never fails a job that is done."""
    replaced = [(Holder.of_memory(user_id, d.get("team", "")).principal, d["memory_id"]) for d in decisions
                if d["action"] in ("replace", "refine") and d.get("memory_id")]
    if not replaced:
        return
    try:
        async with pool.connection() as conn:
            for holder, memory_id in replaced:
                await manage.keep_versions(conn, holder, memory_id, max_versions)
    except (psycopg.Error, OSError) as exc:
        log.warning("keep_versions_failed", user_id=user_id, error=f"{type(exc).__name__}: {exc}"[:300])
