"""Maintenance's retention (memory_proxy/formation/maintain.py): what is past its lifetime is deleted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memory_proxy.formation.maintain import maintain
from memory_proxy.job_payload import FormationPayload
from memory_proxy.settings import MaintenanceSettings
from memory_proxy.store import jobs, memories
from memory_proxy.store.database import make_pool
from tests.support.data import USER_A
from tests.support.proxy import add_memory


async def test_retired_memories_done_and_dead_jobs_are_deleted_after_their_retention(
        db: Any, database_url: str) -> None:
    old = await add_memory(db, USER_A, "User lives in Lyon.")
    new = await add_memory(db, USER_A, "User lives in Montreal.")
    recent = await add_memory(db, USER_A, "User drinks coffee.")
    kept = await add_memory(db, USER_A, "User drinks tea.")
    await memories.supersede_memory(db, user_id=USER_A, old_id=old, new_id=new, reason="moved")
    await memories.supersede_memory(db, user_id=USER_A, old_id=recent, new_id=kept, reason="switched")
    await db.execute("UPDATE users_vectors SET superseded_at = now() - interval '200 days' WHERE vector_id = %s",
                     [old])
    for status, age in [("done", 10), ("done", 1), ("dead", 40), ("dead", 5)]:
        job_id = await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload("x"))
        await db.execute(
            "UPDATE memory_jobs SET status = %s, finished_at = now() - make_interval(days => %s),"
            " run_after = now() - make_interval(days => %s) WHERE id = %s", [status, age, age, job_id])

    async with make_pool(database_url, 2) as pool:
        counts = await maintain(pool, MaintenanceSettings(interval_s=0))  # retention 180 / 7 / 30 days

    assert counts["history_purged"] == 1 and counts["jobs_done_purged"] == 1 and counts["jobs_dead_purged"] == 1
    cur = await db.execute("SELECT vector_id FROM users_vectors WHERE user_id = %s ORDER BY vector_id", [USER_A])
    assert {row[0] for row in await cur.fetchall()} == {new, recent, kept}  # the 200-day-old retirement is gone
    cur = await db.execute("SELECT count(*) FROM vectors WHERE id = %s", [old])
    assert (await cur.fetchone())[0] == 0  # nobody else held it
    cur = await db.execute("SELECT old_vector_id FROM memory_updates WHERE user_id = %s", [USER_A])
    assert [row[0] for row in await cur.fetchall()] == [recent]
    cur = await db.execute("SELECT status, round(extract(epoch FROM now() - finished_at) / 86400)"
                           " FROM memory_jobs ORDER BY id")
    assert [(s, int(d)) for s, d in await cur.fetchall()] == [("done", 1), ("dead", 5)]
