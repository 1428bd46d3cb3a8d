"""The job queue (memory_proxy/store/jobs.py): fair claims across users, each user's turns in order."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg

from memory_proxy.job_payload import FormationPayload
from memory_proxy.store import jobs, manage
from memory_proxy.store.database import make_pool
from memory_proxy.store.scope import user_scope
from tests.support.data import USER_A, USER_B
from tests.support.proxy import add_memory

FLOOD = "flooding-user"


async def queue(db: Any, user: str, n: int) -> list[int]:
    return await jobs.enqueue_many(db, [(user, FormationPayload(f"turn {i}"), datetime.now(UTC), None) for i in range(n)])


async def test_one_users_flood_takes_one_slot_and_the_others_go_beside_it(db: Any) -> None:
    """1,000 turns of one user, then one turn each of two others: the next claim takes the flooder's oldest
    job and the two others', not the flooder's next three (the others waited behind 763 of them)."""
    flood = await queue(db, FLOOD, 1000)
    a, b = await queue(db, USER_A, 1), await queue(db, USER_B, 1)
    claimed = await jobs.claim(db, worker_id="w1", limit=4, lease_s=60)
    assert sorted(j.id for j in claimed) == sorted([flood[0], *a, *b])
    # while the flooder's job runs, none of its others is taken
    assert await jobs.claim(db, worker_id="w2", limit=4, lease_s=60) == []


async def test_a_users_turns_are_claimed_in_the_order_they_were_said(db: Any) -> None:
    first, second = await queue(db, USER_A, 2)
    [job] = await jobs.claim(db, worker_id="w1", limit=4, lease_s=60)
    assert job.id == first
    # the first fails and waits for its retry: the second waits with it (it may change what the first said)
    await db.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
    await db.execute("UPDATE memory_jobs SET status = 'queued', run_after = now() + interval '1 hour' WHERE id = %s",
                     [first])
    assert await jobs.claim(db, worker_id="w1", limit=4, lease_s=60) == []
    await db.execute("UPDATE memory_jobs SET run_after = now() WHERE id = %s", [first])
    [again] = await jobs.claim(db, worker_id="w1", limit=4, lease_s=60)
    assert again.id == first and again.attempts == 2
    await db.execute("UPDATE memory_jobs SET status = 'done' WHERE id = %s", [first])
    [then] = await jobs.claim(db, worker_id="w1", limit=4, lease_s=60)
    assert then.id == second


async def test_racing_workers_never_hold_two_jobs_of_one_user(database_url: str, db: Any) -> None:
    for user in (USER_A, USER_B, FLOOD):
        await queue(db, user, 30)
    async with make_pool(database_url, 8) as pool:
        async def claim_once(worker: str) -> list[Any]:
            async with pool.connection() as conn:
                return await jobs.claim(conn, worker_id=worker, limit=3, lease_s=60)
        rounds = await asyncio.gather(*(claim_once(f"w{i}") for i in range(8)))
    users = [job.user_id for claimed in rounds for job in claimed]
    assert sorted(users) == sorted([USER_A, USER_B, FLOOD])


async def test_a_user_with_a_backlog_yields_the_freed_slot_to_a_newer_user(db: Any) -> None:
    """One slot, two users with backlogs and a newcomer: the slot goes round, so the newcomer's job is the
    second or third claimed, not the twenty-first (benchmarks.flood found 60 s waits once every slot was held)."""
    await queue(db, FLOOD, 10)
    await queue(db, USER_A, 10)
    await queue(db, USER_B, 1)
    order = []
    for _ in range(4):
        [job] = await jobs.claim(db, worker_id="w1", limit=1, lease_s=60)
        await db.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        assert await jobs.complete(db, job_id=job.id, worker_id="w1")
        order.append(job.user_id)
    assert order[:3] == [FLOOD, USER_A, USER_B] and order[3] == FLOOD


async def waits_for_a_lock(admin: psycopg.AsyncConnection[Any], pid: int) -> bool:
    """Whether backend `pid` waits for a lock (`admin`: an autocommit superuser connection, which sees every
    session's activity, afresh at each statement)."""
    row = await (await admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])).fetchone()
    return row is not None and row[0] == "Lock"


async def test_an_erasure_beside_a_jobs_write_waits_for_it_and_erases_what_it_wrote(database_url: str, db: Any) -> None:
    """A formation job writes a memory while the user is erased through another connection. Both lock the job's
    row first (`jobs.hold`; erasure deletes the jobs first): the erasure waits, then erases the new memory too.
    Locked the other way round (memory, then job), PostgreSQL found a deadlock and aborted one of the two
    (benchmarks.cluster: an erase answered 503)."""
    await queue(db, USER_A, 1)
    [job] = await jobs.claim(db, worker_id="w1", limit=1, lease_s=60)
    async with (make_pool(database_url, 2) as pool, pool.connection() as worker, pool.connection() as eraser,
                await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin):
        async with user_scope(worker, USER_A):
            assert await jobs.hold(worker, job_id=job.id, worker_id="w1")
            await add_memory(worker, USER_A, "User drinks green tea.")
            erasing = asyncio.create_task(manage.erase_user(eraser, USER_A))
            async with asyncio.timeout(10):  # until the erasure waits for a lock the write holds
                while not await waits_for_a_lock(admin, eraser.info.backend_pid):
                    await asyncio.sleep(0.01)
            assert await jobs.complete(worker, job_id=job.id, worker_id="w1")
        erased = await erasing
    assert (erased["memories"], erased["jobs"]) == (1, 1)
    assert await (await db.execute("SELECT count(*) FROM users_vectors WHERE user_id = %s", [USER_A])).fetchone() == (0,)


async def test_a_job_erased_before_its_write_writes_nothing(db: Any) -> None:
    await queue(db, USER_A, 1)
    [job] = await jobs.claim(db, worker_id="w1", limit=1, lease_s=60)
    await manage.erase_user(db, USER_A)
    async with user_scope(db, USER_A):
        assert not await jobs.hold(db, job_id=job.id, worker_id="w1")
