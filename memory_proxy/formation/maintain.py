"""Maintenance over all users or one: expire TTLs, merge near-duplicates, prune stale memories,
and delete what is past its retention (HISTORY_RETENTION_DAYS, JOB_RETENTION_DAYS, DEAD_JOB_RETENTION_DAYS).

Run by a worker every MAINTENANCE_INTERVAL_SECONDS (one worker at a time: a PostgreSQL advisory lock)
and by `memory-proxy maintain`. Retired memories stay in the user's history (store/maintenance.py) until
their retention ends.
"""

from __future__ import annotations

from collections import Counter

from psycopg_pool import AsyncConnectionPool

from ..observability import log
from ..retrieval.rank import decayed_after_days
from ..settings import MaintenanceSettings
from ..store import jobs, limits, maintenance, manage
from ..store.scope import user_scope


async def maintain_user(pool: AsyncConnectionPool, settings: MaintenanceSettings, user_id: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    async with pool.connection() as conn, user_scope(conn, user_id):  # one transaction per user
        gone = await maintenance.expired(conn, user_id)
        counts["expired"] = await maintenance.retire(conn, user_id=user_id, ids=gone, action="expire",
                                                     reason="time to live of its type passed")
        for older, newer in await maintenance.near_duplicates(conn, user_id, settings.dedup_similarity):
            counts["merged"] += await maintenance.retire(
                conn, user_id=user_id, ids=[older], by=newer, action="merge",
                reason=f"near-duplicate of a newer memory (cosine > {settings.dedup_similarity:g})")
        old = await maintenance.stale(conn, user_id, after_days=settings.prune_after_days,
                                      decayed_after=decayed_after_days(settings.half_life_days))
        counts["pruned"] = await maintenance.retire(conn, user_id=user_id, ids=old, action="prune",
                                                    reason=f"unused for over {settings.prune_after_days:g} days "
                                                           "and decayed below 5 %")
    async with pool.connection() as conn:
        counts["history_purged"] = await manage.purge_history(conn, user_id, settings.history_days)
    return counts


async def maintain(pool: AsyncConnectionPool, settings: MaintenanceSettings,
                   user_id: str | None = None) -> dict[str, int]:
    """Counts of memories expired, merged, pruned and purged (and, over all users, of jobs and of fair use's old
    usage windows purged)."""
    if user_id is None:
        async with pool.connection() as conn:
            users = await maintenance.users_with_memories(conn)
    else:
        users = [user_id]
    total: Counter[str] = Counter({"expired": 0, "merged": 0, "pruned": 0, "history_purged": 0})
    for user in users:
        total.update(await maintain_user(pool, settings, user))
    if user_id is None:
        async with pool.connection() as conn:
            total.update(await jobs.purge(conn, done_days=settings.job_days, dead_days=settings.dead_job_days))
            total["usage_purged"] = await limits.forget_old_usage(conn)  # fair use reads today and the last minute
    log.info("maintenance", users=len(users), **total)
    return dict(total)


async def maintain_if_free(pool: AsyncConnectionPool, settings: MaintenanceSettings) -> dict[str, int] | None:
    """`maintain` for all users unless another worker is at it (None then)."""
    async with pool.connection() as conn, maintenance.run_alone(conn) as alone:
        return await maintain(pool, settings) if alone else None
