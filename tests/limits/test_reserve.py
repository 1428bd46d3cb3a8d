"""memory_proxy/limits/reserve.py and migration 0021: far from its limits a subject's requests are admitted a few at
a time without asking PostgreSQL, their tokens and places settled later; two processes (replicas) on reserves
still never pass a limit, and a process that stops gives its places back."""

from __future__ import annotations

from typing import Any

from memory_proxy.limits.limiter import Limiter, Ticket
from memory_proxy.limits.reserve import SPARE
from memory_proxy.settings import load_settings
from memory_proxy.store import limits
from memory_proxy.store.database import make_pool
from memory_proxy.store.limits import Limit
from tests.support.data import USER_A


class Counting:
    """A pool that counts the connections asked of it (each one call of PostgreSQL)."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.asked = pool, 0

    def connection(self) -> Any:
        self.asked += 1
        return self.pool.connection()


async def crowd(db: Any) -> int:
    """How many requests 0021 counts in flight at most: 8 per connection the server allows."""
    row = await (await db.execute("SHOW max_connections")).fetchone()
    return 8 * int(row[0])


def limiter_for(env: dict[str, str], pool: Any, **per_user: int) -> Limiter:
    values = ",".join(f"{k}={v}" for k, v in per_user.items())
    return Limiter(load_settings({**env, "LIMITS_PER_USER": values}).limits, pool)


async def test_far_from_its_limits_a_process_asks_once_for_several_requests(env: dict[str, str], database_url: str,
                                                                           db: Any) -> None:
    far = 100 * await crowd(db)
    async with make_pool(database_url, 2) as pool:
        counting = Counting(pool)
        limiter = limiter_for(env, counting, rpm=far, tpm=far * 1000, concurrent=far, daily_tokens=far * 1000)
        tickets = [await limiter.admit(key=None, user=USER_A, model=None) for _ in range(4 * (SPARE + 1))]
        assert all(isinstance(t, Ticket) and t.reserved for t in tickets)
        assert counting.asked == 1 + 4  # the operator's rows read, then one call for each SPARE + 1 requests
        [use] = await limits.usage(db, "user", USER_A)
        assert use.requests_today == 4 * (SPARE + 1) and use.in_flight == 4 * (SPARE + 1)
        for ticket in tickets:
            assert isinstance(ticket, Ticket)
            await limiter.spend(ticket, 10)
        assert counting.asked == 1 + 4  # their ends: nothing asked yet
        await limiter.settle_reserves()
        [use] = await limits.usage(db, "user", USER_A)
        assert use.tokens_today == 10 * len(tickets) and use.in_flight == 0


async def test_near_a_limit_every_request_asks_and_holds_a_lease_of_its_own(env: dict[str, str], database_url: str,
                                                                            db: Any) -> None:
    async with make_pool(database_url, 2) as pool:
        counting = Counting(pool)
        limiter = limiter_for(env, counting, rpm=await crowd(db))  # never more than 8 × max_connections away
        tickets = [await limiter.admit(key=None, user=USER_A, model=None) for _ in range(5)]
        assert counting.asked == 1 + 5 and not any(isinstance(t, Ticket) and t.reserved for t in tickets)


async def test_two_processes_on_reserves_never_pass_a_limit(env: dict[str, str], database_url: str, db: Any) -> None:
    """A limit just far enough for reserves: the two processes take them until the subject comes near, then ask
    for each request, in line; together they admit no more than the limit, and what their reserves counted and
    did not use (at most SPARE each) is all they lose."""
    rpm = await crowd(db) + 40
    async with make_pool(database_url, 4) as pool:
        replicas = [limiter_for(env, pool, rpm=rpm), limiter_for(env, pool, rpm=rpm)]
        admitted = 0
        for i in range(rpm + 60):
            outcome = await replicas[i % 2].admit(key=None, user=USER_A, model=None)
            admitted += isinstance(outcome, Ticket) and bool(outcome.subjects)
        assert rpm - 2 * SPARE <= admitted <= rpm
        [use] = await limits.usage(db, "user", USER_A)
        assert use.requests_today <= rpm


async def test_places_at_once_on_reserves_never_pass_the_limit(env: dict[str, str], database_url: str,
                                                               db: Any) -> None:
    concurrent = await crowd(db) + 30
    async with make_pool(database_url, 4) as pool:
        replicas = [limiter_for(env, pool, concurrent=concurrent), limiter_for(env, pool, concurrent=concurrent)]
        held = []
        for i in range(concurrent + 40):  # none ends
            outcome = await replicas[i % 2].admit(key=None, user=USER_A, model=None)
            if isinstance(outcome, Ticket) and outcome.subjects:
                held.append(outcome)
            if i == 21:  # a settlement while far (blocks not full) gives back no place in use
                await replicas[0].settle_reserves()
                [use] = await limits.usage(db, "user", USER_A)
                assert use.in_flight >= len(held)
        assert concurrent - 2 * (SPARE + 1) <= len(held) <= concurrent
        [use] = await limits.usage(db, "user", USER_A)
        assert len(held) <= use.in_flight <= concurrent


async def test_a_process_that_stops_gives_its_places_back(env: dict[str, str], database_url: str, db: Any) -> None:
    far = 100 * await crowd(db)
    async with make_pool(database_url, 2) as pool:
        limiter = limiter_for(env, pool, concurrent=far)
        ticket = await limiter.admit(key=None, user=USER_A, model=None)
        assert isinstance(ticket, Ticket) and ticket.reserved
        [use] = await limits.usage(db, "user", USER_A)
        assert use.in_flight == SPARE + 1  # the block: this request's place and its reserve's
        await limiter.settle_reserves(returning=True)
        [use] = await limits.usage(db, "user", USER_A)
        assert use.in_flight == 0


async def test_a_change_of_the_limits_ends_the_reserves_taken_under_the_old(env: dict[str, str], database_url: str,
                                                                            db: Any) -> None:
    far = 100 * await crowd(db)
    async with make_pool(database_url, 2) as pool:
        counting = Counting(pool)
        limiter = limiter_for(env, counting, rpm=far)
        first = await limiter.admit(key=None, user=USER_A, model=None)
        assert isinstance(first, Ticket) and first.reserved
        asked = counting.asked
        limiter.changed(Limit("user", USER_A, rpm=5))  # an operator's change through this process
        refused = await limiter.admit(key=None, user=USER_A, model=None)
        assert counting.asked == asked + 1  # asked, not taken from the reserve
        assert isinstance(refused, limits.Refusal) and refused.which == "rpm"  # the reserve's 8 stay counted


async def test_a_settlement_asks_nothing_when_nothing_changed(env: dict[str, str], database_url: str, db: Any) -> None:
    """Requests on a reserve of a subject without a limit at once hold no block: while they run and spend nothing,
    the settlement every second costs no call of PostgreSQL."""
    far = 100 * await crowd(db)
    async with make_pool(database_url, 2) as pool:
        counting = Counting(pool)
        limiter = limiter_for(env, counting, rpm=far)
        ticket = await limiter.admit(key=None, user=USER_A, model=None)
        assert isinstance(ticket, Ticket) and ticket.reserved
        asked = counting.asked
        await limiter.settle_reserves()
        await limiter.settle_reserves()
        assert counting.asked == asked
        await limiter.spend(ticket, 9)
        await limiter.settle_reserves()
        assert counting.asked == asked + 1
        [use] = await limits.usage(db, "user", USER_A)
        assert use.tokens_today == 9
