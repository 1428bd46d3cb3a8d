"""Isolation in depth: PostgreSQL's row-level security (memory_proxy/store/migrations/0004, 0013) keeps each user to their own
rows and those of their teams, even when the application's SQL forgets its user filter.

Every test here uses the app's own pool (`make_pool`: the connection drops to `memory_proxy_app`), never
the `db` fixture's all-users session, so the policies bind exactly as they do in production.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from memory_proxy.job_payload import FormationPayload
from memory_proxy.store import jobs, memories, search, teams
from memory_proxy.store.database import APP_ROLE, make_pool
from memory_proxy.store.scope import all_users, user_scope
from memory_proxy.store.teams import Holder

pytestmark = pytest.mark.slow

MODEL = "iso-model"
DIMS = 32  # small vectors: the policies do not care about the dimension, and 10,000 searches stay quick
USERS = [f"user-{i:03d}" for i in range(100)]
QUERIES = 10_000

# What a query that forgot its `WHERE user_id = …` would read: every table with a user_id.
UNFILTERED = {
    "users_vectors": "SELECT user_id FROM users_vectors",
    "memory_updates": "SELECT user_id FROM memory_updates",
    "memory_jobs": "SELECT user_id FROM memory_jobs",
}
# A botched search: the real re-rank, but candidates taken from every link instead of the user's own.
BUGGY_SEARCH = """
SELECT uv.user_id, v.id FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id
WHERE v.embedding_model = %(model)s ORDER BY v.embedding <=> %(q)s LIMIT %(k)s
"""
FORGED_LINK = ("INSERT INTO users_vectors (user_id, vector_id, content_key, embedding_model, embedding_bq,"
               " search_text) SELECT 'alice', id, content_key, embedding_model, binary_quantize(embedding),"
               " search_text FROM vectors"
               " WHERE id = %s")
FORGED_AUDIT = ("INSERT INTO memory_updates (user_id, old_vector_id, new_vector_id, reason)"
                " VALUES ('alice', %s, %s, 'forged')")


def unit(rng: np.random.Generator) -> np.ndarray:
    vector = rng.standard_normal(DIMS).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with make_pool(database_url, 4) as app_pool:
        yield app_pool


async def seed(pool: AsyncConnectionPool, rng: np.random.Generator) -> tuple[dict[str, set[str]], list[np.ndarray]]:
    """100 users with 8–20 memories each; a tenth of the vectors are shared by 2–5 users (a shared
    vector is one row in `vectors`, linked per user). Each user also gets an audit row and a job."""
    owned: dict[str, set[str]] = {user: set() for user in USERS}
    vectors: list[np.ndarray] = []
    async with pool.connection() as conn:
        for user in USERS:
            for j in range(int(rng.integers(8, 21))):
                vector = unit(rng)
                vectors.append(vector)
                vector_id = await memories.add_or_find_memory(conn, user_id=user, content=f"{user} fact {j}",
                                                         embedding=vector, model=MODEL)
                owned[user].add(vector_id)
                if j % 10 == 0:  # shared with a few others
                    for other in rng.choice(USERS, size=int(rng.integers(1, 5)), replace=False):
                        if other != user and await memories.link_vector(conn, str(other), vector_id):
                            owned[str(other)].add(vector_id)
            some = sorted(owned[user])
            await memories.supersede_memory(conn, user_id=user, old_id=some[0], new_id=some[1], reason="test")
            owned[user].discard(some[0])
            await jobs.enqueue(conn, user_id=user, payload=FormationPayload(f"{user} said"),
                               said_at=datetime.now(UTC))
    return owned, vectors


async def test_the_app_pool_runs_as_the_restricted_role(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert await cur.fetchone() == (APP_ROLE, False, False)


async def test_outside_any_scope_no_user_row_is_visible(pool: AsyncConnectionPool) -> None:
    rng = np.random.default_rng(1)
    await seed_one(pool, "alice", rng)
    async with pool.connection() as conn:
        for table, sql in UNFILTERED.items():
            assert await (await conn.execute(sql)).fetchall() == [], table
        async with all_users(conn):  # the cross-user scope (job claim, gauges) does see them
            assert await (await conn.execute(UNFILTERED["users_vectors"])).fetchall() == [("alice",)]


async def seed_one(pool: AsyncConnectionPool, user: str, rng: np.random.Generator) -> str:
    async with pool.connection() as conn:
        return await memories.add_or_find_memory(conn, user_id=user, content=f"{user}'s fact", embedding=unit(rng),
                                            model=MODEL)


async def test_another_users_rows_cannot_be_written_read_changed_or_deleted(pool: AsyncConnectionPool) -> None:
    rng = np.random.default_rng(2)
    alice_memory = await seed_one(pool, "alice", rng)
    async with pool.connection() as conn:
        async with user_scope(conn, "mallory"):
            assert await (await conn.execute(UNFILTERED["users_vectors"])).fetchall() == []
            updated = await conn.execute("UPDATE users_vectors SET user_id = 'mallory' WHERE vector_id = %s",
                                         [alice_memory])
            deleted = await conn.execute("DELETE FROM users_vectors WHERE vector_id = %s", [alice_memory])
        assert updated.rowcount == 0 and deleted.rowcount == 0
        for insert in (
            (FORGED_LINK, [alice_memory]),
            (FORGED_AUDIT, [alice_memory, alice_memory]),
            ("INSERT INTO memory_jobs (user_id, payload, said_at) VALUES ('alice', '{}', now())", []),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                async with user_scope(conn, "mallory"):
                    await conn.execute(*insert)
        assert await memories.count_memories(conn, "alice") == 1


TEAM_TABLES = ("users_vectors", "memory_updates", "memory_terms", "memory_lexicon", "memory_term_stats")


async def _team_rows(conn: psycopg.AsyncConnection[Any], user: str) -> dict[str, set[str]]:
    """What a query that forgot its filter reads in `user`'s scope: the principals of each memory table."""
    async with user_scope(conn, user):
        return {table: {row[0] for row in await (await conn.execute(f"SELECT user_id FROM {table}")).fetchall()}
                for table in TEAM_TABLES}


async def test_a_teams_rows_are_seen_by_its_current_members_only(pool: AsyncConnectionPool) -> None:
    """memory_proxy/store/migrations/0013: rows held by 'team:platform' are visible to and writable by the team's members,
    in every memory table, from the statement after a membership changes; another team's and another
    user's rows stay out of reach. Memberships are an operator's: no scope is needed to change them."""
    rng = np.random.default_rng(5)
    async with pool.connection() as conn:
        old, team_memory = [await memories.add_or_find_memory(conn, user_id=Holder.team("platform").principal, content=text,
                                                              embedding=unit(rng), model=MODEL)
                            for text in ("Team ships on Fridays.", "Team deploys staging every Thursday.")]
    await seed_one(pool, Holder.team("billing").principal, rng)
    await seed_one(pool, "alice", rng)
    async with pool.connection() as conn:
        async with user_scope(conn, Holder.team("platform").principal):
            await memories.supersede_memory(conn, user_id=Holder.team("platform").principal, old_id=old,
                                            new_id=team_memory, reason="test")
        for team in ("platform", "billing"):
            await teams.create_team(conn, team, team.title())
        await teams.set_member(conn, "platform", "alice")
        await teams.set_member(conn, "billing", "carol")

        seen = await _team_rows(conn, "alice")
        assert all(rows == {"alice", "team:platform"} for table, rows in seen.items() if table != "memory_updates")
        assert seen["memory_updates"] == {"team:platform"}
        assert all("team:platform" not in rows for rows in (await _team_rows(conn, "mallory")).values())
        assert all("team:platform" not in rows for rows in (await _team_rows(conn, "carol")).values())
        # a member writes the team's rows (formation will, for team facts); nobody else can
        async with user_scope(conn, "alice"):
            await conn.execute(FORGED_AUDIT.replace("'alice'", "'team:platform'"), [old, team_memory])
        for outsider in ("carol", "mallory"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                async with user_scope(conn, outsider):
                    await conn.execute(FORGED_AUDIT.replace("'alice'", "'team:platform'"), [old, team_memory])
        # removed: the very next statement sees nothing of the team, and can change nothing of it
        assert await teams.remove_member(conn, "platform", "alice")
        assert all(rows <= {"alice"} for rows in (await _team_rows(conn, "alice")).values())
        async with user_scope(conn, "alice"):
            deleted = await conn.execute("DELETE FROM users_vectors WHERE user_id = 'team:platform'")
        assert deleted.rowcount == 0
        assert await memories.count_memories(conn, Holder.team("platform").principal) == 1


async def test_a_scope_ends_with_its_transaction(pool: AsyncConnectionPool) -> None:
    """A pooled connection must not carry one user's scope into the next borrower's queries."""
    rng = np.random.default_rng(3)
    await seed_one(pool, "alice", rng)
    async with pool.connection() as conn:
        async with user_scope(conn, "alice"):
            assert len(await (await conn.execute(UNFILTERED["users_vectors"])).fetchall()) == 1
        assert await (await conn.execute(UNFILTERED["users_vectors"])).fetchall() == []
        with pytest.raises(RuntimeError):
            async with user_scope(conn, "alice"):
                raise RuntimeError("the transaction is rolled back, and its setting with it")
        assert await (await conn.execute(UNFILTERED["users_vectors"])).fetchall() == []


async def test_100_users_10000_random_queries_never_see_another_users_row(pool: AsyncConnectionPool) -> None:
    """Half the queries are the product's search (search.neighbours); the other half are SQL that
    forgot the user filter (a botched search, and plain SELECTs on every user-owned table). Queries often
    aim at another user's memory exactly (its own vector), with no score threshold."""
    rng = np.random.default_rng(20261123)
    owned, vectors = await seed(pool, rng)
    pick = random.Random(7)
    foreign_hits = checked_rows = 0
    searched_users: set[str] = set()

    async def one_query(conn: Any, i: int) -> None:
        nonlocal foreign_hits, checked_rows
        user = pick.choice(USERS)
        searched_users.add(user)
        query = vectors[pick.randrange(len(vectors))] if i % 3 else unit(rng)
        if i % 2 == 0:
            found = await search.neighbours(conn, user_id=user, model=MODEL, embedding=query,
                                            top_k=25, min_score=-1.0, include_global=False)
            rows = [(user if m.id in owned[user] else "someone else", m.id) for m in found]
            assert len(found) == min(25, len(owned[user]))  # the filter hides nothing of the user's own
        else:
            async with user_scope(conn, user):
                if i % 4 == 1:
                    cur = await conn.execute(BUGGY_SEARCH, {"model": MODEL, "q": query, "k": 25})
                else:
                    cur = await conn.execute(UNFILTERED[pick.choice(list(UNFILTERED))])
            rows = await cur.fetchall()
        foreign_hits += sum(row[0] != user for row in rows)
        checked_rows += len(rows)

    async def client(offset: int) -> None:
        async with pool.connection() as conn:
            for i in range(offset, QUERIES, 4):
                await one_query(conn, i)

    await asyncio.gather(*(client(offset) for offset in range(4)))
    assert foreign_hits == 0
    assert checked_rows > 100_000 and len(searched_users) == len(USERS)  # the test looked at a lot
