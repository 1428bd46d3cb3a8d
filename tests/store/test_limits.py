"""store/limits.py and migration 0018: a request is admitted against every subject's limits at once or against
none, exactly, however many connections (replicas) ask at the same moment."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from memory_proxy.store import limits
from memory_proxy.store.database import make_pool
from memory_proxy.store.limits import Limit


async def admitted(db: Any, *subjects: Limit, request: uuid.UUID | None = None) -> limits.Refusal | None:
    outcome = await limits.admit(db, list(subjects), request or uuid.uuid4(), 900)
    return outcome if isinstance(outcome, limits.Refusal) else None


async def test_requests_a_minute_are_counted_until_the_limit(db: Any) -> None:
    user = Limit("user", "ann", rpm=3)
    assert [await admitted(db, user) for _ in range(3)] == [None] * 3
    refusal = await admitted(db, user)
    assert refusal is not None and (refusal.kind, refusal.subject, refusal.which) == ("user", "ann", "rpm")
    assert 1 <= refusal.retry_after <= 70  # until the oldest 10-second step counted has left
    assert await admitted(db, Limit("user", "bob", rpm=3)) is None  # another subject: its own count


async def test_a_request_refused_by_one_subject_is_counted_against_none(db: Any) -> None:
    key, user = Limit("key", "k1", rpm=10), Limit("user", "ann", rpm=1)
    assert await admitted(db, key, user) is None
    refusal = await admitted(db, key, user)
    assert refusal is not None and refusal.which == "rpm" and refusal.kind == "user"
    [use] = await limits.usage(db, "key", "k1")
    assert use.requests_today == 1


async def test_requests_at_once_are_given_back_when_they_end(db: Any) -> None:
    user = Limit("user", "ann", concurrent=2)
    first, second = uuid.uuid4(), uuid.uuid4()
    assert await admitted(db, user, request=first) is None and await admitted(db, user, request=second) is None
    refusal = await admitted(db, user)
    assert refusal is not None and refusal.which == "concurrent"
    await limits.spent(db, [("user", "ann")], first, 0)
    assert await admitted(db, user) is None
    [use] = await limits.usage(db, "user", "ann")
    assert use.in_flight == 2


async def test_a_lease_whose_replica_died_expires(db: Any) -> None:
    user = Limit("user", "ann", concurrent=1)
    assert isinstance(await limits.admit(db, [user], uuid.uuid4(), 0), limits.Admitted)  # its lease ends as it is taken
    assert await admitted(db, user) is None


async def test_tokens_spent_count_against_the_minute_and_the_day(db: Any) -> None:
    assert await admitted(db, Limit("user", "ann", tpm=1000)) is None
    await limits.spent(db, [("user", "ann")], None, 1000)
    refusal = await admitted(db, Limit("user", "ann", tpm=1000))
    assert refusal is not None and refusal.which == "tpm"
    refusal = await admitted(db, Limit("user", "ann", daily_tokens=1000))
    assert refusal is not None and refusal.which == "daily_tokens" and refusal.retry_after <= 86400
    assert await admitted(db, Limit("user", "ann", daily_tokens=1001)) is None
    [use] = await limits.usage(db, "user", "ann")
    assert use.tokens_today == 1000 and 0 < use.tokens_minute <= 1000  # (less once this minute has ended)


async def test_many_connections_at_once_admit_exactly_the_limit(database_url: str) -> None:
    """What three replicas asking together would see: 40 requests at once on 8 connections, 25 admitted."""
    user = Limit("user", "flood", rpm=25)
    async with make_pool(database_url, 8) as pool:
        await pool.open(wait=True)

        async def one() -> limits.Refusal | None:
            async with pool.connection() as conn:
                outcome = await limits.admit(conn, [user], uuid.uuid4(), 900)
                return outcome if isinstance(outcome, limits.Refusal) else None

        results = await asyncio.gather(*(one() for _ in range(40)))
    assert sum(r is None for r in results) == 25


async def test_far_from_a_limit_requests_are_admitted_side_by_side_and_exactly_near_it(database_url: str,
                                                                                       db: Any) -> None:
    """Limits above max_connections are checked under a shared lock until a subject comes within that many of one
    (migration 0021); the requests that cross over, 12 connections at once, still stop exactly at the limit, and
    admissions and ends counting into the same rows never wait for each other in a circle (a deadlock raises)."""
    row = await (await db.execute("SHOW max_connections")).fetchone()
    crowd = int(row[0])
    async with make_pool(database_url, 12) as pool:
        await pool.open(wait=True)

        async def admitted_of(limit: Limit, requests: int, *, ending: bool) -> int:
            async def one() -> bool:
                request = uuid.uuid4()
                async with pool.connection() as conn:
                    outcome = await limits.admit(conn, [Limit("key", "k-par", rpm=10**6), limit], request, 900)
                    refusal = outcome if isinstance(outcome, limits.Refusal) else None
                    if refusal is None and ending:
                        await limits.spent(conn, [("key", "k-par"), (limit.kind, limit.subject)], request, 7)
                assert refusal is None or refusal.which in ("rpm", "concurrent")
                return refusal is None

            return sum(await asyncio.gather(*(one() for _ in range(requests))))

        assert await admitted_of(Limit("user", "u-rpm", rpm=crowd + 30), crowd + 60, ending=True) == crowd + 30
        assert await admitted_of(Limit("user", "u-once", concurrent=crowd + 10), crowd + 30, ending=False) == crowd + 10


async def test_a_subject_far_from_its_limits_is_locked_shared_and_near_them_alone(db: Any) -> None:
    row = await (await db.execute("SHOW max_connections")).fetchone()
    crowd = int(row[0])

    async def lock_mode(limit: Limit) -> str:
        async with db.transaction():
            assert await admitted(db, limit) is None
            found = await (await db.execute(
                "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")).fetchone()
        return str(found[0])

    assert await lock_mode(Limit("user", "far", rpm=crowd + 1000, concurrent=crowd + 1000)) == "ShareLock"
    assert await lock_mode(Limit("user", "tight", rpm=crowd)) == "ExclusiveLock"
    assert await lock_mode(Limit("user", "tight-at-once", concurrent=5)) == "ExclusiveLock"


async def test_an_operators_limits_are_set_listed_and_removed(db: Any) -> None:
    await limits.set_limit(db, Limit("user", "*", rpm=60))
    await limits.set_limit(db, Limit("model", "gpt-x", tpm=1000, concurrent=4))
    await limits.set_limit(db, Limit("model", "gpt-x", tpm=2000))
    assert await limits.list_limits(db) == [Limit("model", "gpt-x", tpm=2000), Limit("user", "*", rpm=60)]
    await limits.set_limit(db, Limit("user", "*"))  # nothing limited: the row goes
    assert await limits.delete_limit(db, "model", "gpt-x") and not await limits.delete_limit(db, "model", "gpt-x")
    assert await limits.list_limits(db) == []


async def test_maintenance_forgets_usage_older_than_two_days(db: Any) -> None:
    assert await admitted(db, Limit("user", "ann", rpm=5)) is None
    await db.execute("INSERT INTO limit_usage (kind, subject, span, start, requests) "
                     "VALUES ('user', 'ann', 'd', now() - interval '3 days', 7)")
    assert await limits.forget_old_usage(db) == 1
    [use] = await limits.usage(db, "user", "ann")
    assert use.requests_today == 1


async def test_the_last_minute_counts_every_step_it_touches_whole(db: Any) -> None:
    """10-second steps: at 00:01:05 the minute began at 00:00:05, so the step of 00:00:00 still counts, whole (a
    burst in it must not count again at a discount); the step of 23:59:50 no more. The wait: until 00:01:10."""
    for start, requests in (("2025-12-31 23:59:50", 100), ("2026-01-01 00:00:00", 10), ("2026-01-01 00:00:50", 3),
                            ("2026-01-01 00:01:00", 1)):
        await db.execute("INSERT INTO limit_usage (kind, subject, span, start, requests) "
                         "VALUES ('user', 'ann', 'm', %s::timestamptz, %s)", [start + "+00", requests])
    cur = await db.execute("SELECT limits_rate('user', 'ann', '2026-01-01 00:01:05+00', false), "
                           "limits_wait('user', 'ann', '2026-01-01 00:01:05+00')")
    assert await cur.fetchone() == (10 + 3 + 1, 5)


async def test_counting_does_not_wait_for_the_disk_and_leaves_the_connection_as_it_was(db: Any) -> None:
    """Admission and spending commit asynchronously (their row locks would otherwise be held through a WAL
    flush, every request of a subject in line behind the disk); only their own transaction: the next statement
    on the pooled connection (a formation job's insert) waits for the disk again."""
    async def setting() -> str:
        row = await (await db.execute("SHOW synchronous_commit")).fetchone()
        return str(row[0])

    assert await setting() == "on"
    async with db.transaction():
        assert await admitted(db, Limit("user", "ann", rpm=5)) is None
        assert await setting() == "off"
    async with db.transaction():
        await limits.spent(db, [("user", "ann")], None, 10)
        assert await setting() == "off"
    assert await setting() == "on"
