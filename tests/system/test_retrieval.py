"""Memory quality end to end (real PostgreSQL): hybrid search, tiers, budget, expiry, use counts,
history and restore, maintenance, and the formation filters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_proxy.formation.maintain import maintain
from memory_proxy.records import FactAttributes
from memory_proxy.settings import MaintenanceSettings, load_settings
from memory_proxy.store import memories
from tests.support.data import BERLIN, BUN, CHAT, RUNTIME_Q, USER_A, USER_B
from tests.support.fakes import vector_for
from tests.support.proxy import add_memory, chat_body, fillers, make_env, sent_body, system_text, user_headers

DOG = "User's dog is named Rex."  # its vector is unrelated to every query (no fixture): words must find it
DOG_Q = "What is my dog's name?"


async def typed(db: Any, user: str, content: str, memory_type: str, *, pinned: bool = False,
                expires_at: datetime | None = None, stated_at: datetime | None = None) -> str:
    memory_id = await memories.add_or_find_memory(db, user_id=user, content=content, embedding=vector_for(content),
                                             model="mistral-embed", stated_at=stated_at,
                                             attributes=FactAttributes(memory_type=memory_type, expires_at=expires_at))
    if pinned:
        await db.execute("UPDATE users_vectors SET pinned = true WHERE user_id = %s AND vector_id = %s",
                         [user, memory_id])
    return memory_id


async def test_full_text_finds_what_the_embedding_misses(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    dog = await add_memory(db, USER_A, DOG)
    hybrid = await proxy()
    response = await hybrid.post(CHAT, json=chat_body(DOG_Q), headers=user_headers(USER_A))
    assert response.json()["memories"] == [dog]  # cosine ≈ 0, but it holds both query words: dog, name
    vector_only = await proxy(RETRIEVAL_MODE="vector")
    response = await vector_only.post(CHAT, json=chat_body(DOG_Q), headers=user_headers(USER_A))
    assert response.json()["memories"] == []


async def test_always_on_tier_reaches_every_turn_even_contentless_ones(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    name = await typed(db, USER_A, "User's name is Ana.", "identity")
    tea = await typed(db, USER_A, "User likes green tea.", "preference", pinned=True)
    client = await proxy()
    embeddings_before = outside.routes["embeddings"].call_count
    response = await client.post(CHAT, json=chat_body("ok thanks"), headers=user_headers(USER_A))
    assert response.json()["memories"] == [tea, name]  # pinned first; no search for "ok thanks"
    assert outside.routes["embeddings"].call_count == embeddings_before
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.json()["memories"][:2] == [tea, name]


async def test_a_user_with_few_memories_gets_all_of_them(proxy: Any, outside: Any, db: Any) -> None:
    bun, berlin = await add_memory(db, USER_A, BUN), await add_memory(db, USER_A, BERLIN)
    client = await proxy(RETRIEVAL_INJECT_ALL_BELOW="5")
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert sorted(response.json()["memories"]) == sorted([bun, berlin])  # Berlin too: no search (seed 004)
    await fillers(db, USER_A, 4)  # six now: searched, only what is relevant
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.json()["memories"] == [bun]


async def test_a_user_with_more_memories_than_the_rule_gets_only_what_search_finds(proxy: Any, outside: Any,
                                                                                   db: Any) -> None:
    """The newest RETRIEVAL_INJECT_ALL_BELOW memories were read to tell a small user: a user with more held as
    many, and got them all on every turn (31 memories, 10 injected for one relevant)."""
    await fillers(db, USER_A, 30)
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy(RETRIEVAL_INJECT_ALL_BELOW="10")
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.json()["memories"] == [bun]


async def test_the_token_budget_caps_the_injection_and_always_on_takes_at_most_half(
        proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    for i in range(6):
        await typed(db, USER_A, f"User's identity fact {i} is rather long, about forty tokens or so of text.",
                    "identity")
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy(INJECT_TOKEN_BUDGET="60")
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    injected = response.json()["memories"]
    # one identity line (~27 tokens ≤ 30), then the query tier; shown best first: the query tier's
    assert len(injected) == 2 and injected[0] == bun
    assert "identity fact" in system_text(sent_body(outside))


async def test_expired_memories_are_not_retrieved_unless_pinned(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    past = datetime.now(UTC) - timedelta(days=1)
    bun = await typed(db, USER_A, BUN, "temporary", expires_at=past)
    client = await proxy()
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.json()["memories"] == []
    await db.execute("UPDATE users_vectors SET pinned = true WHERE user_id = %s AND vector_id = %s", [USER_A, bun])
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.json()["memories"][:1] == [bun]  # the expired one itself, pinned: first (always-on tier)


async def test_each_injection_is_counted_for_ranking(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy()
    for _ in range(2):
        await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    async with asyncio.timeout(10):  # counted off the request path: poll with a deadline
        while True:
            cur = await db.execute("SELECT access_count, last_accessed_at FROM users_vectors"
                                   " WHERE user_id = %s AND vector_id = %s", [USER_A, bun])
            count, last = await cur.fetchone()
            if count == 2:
                break
            await asyncio.sleep(0.05)
    assert last is not None


async def test_a_replacement_can_be_undone_with_its_own_audit_row(db: Any) -> None:
    bun = await add_memory(db, USER_A, BUN)
    node = await add_memory(db, USER_A, "User is a software engineer who uses Node.")
    await memories.supersede_memory(db, user_id=USER_A, old_id=bun, new_id=node, reason="switched", action="replace")
    assert await memories.count_memories(db, USER_A) == 1
    assert await memories.restore_memory(db, user_id=USER_A, vector_id=bun, max_memories=2000) == node
    cur = await db.execute("SELECT vector_id, superseded_by FROM users_vectors WHERE user_id = %s ORDER BY 1",
                           [USER_A])
    assert sorted(await cur.fetchall()) == sorted([(bun, None), (node, bun)])
    cur = await db.execute("SELECT action, old_vector_id, new_vector_id FROM memory_updates ORDER BY created_at")
    assert await cur.fetchall() == [("replace", bun, node), ("restore", node, bun)]
    with pytest.raises(memories.RestoreConflict):
        await memories.restore_memory(db, user_id=USER_A, vector_id=bun, max_memories=2000)  # active already
    with pytest.raises(memories.RestoreConflict):
        await memories.restore_memory(db, user_id=USER_B, vector_id=node, max_memories=2000)  # not B's


async def test_maintenance_expires_merges_and_prunes_into_the_history(db: Any, database_url: str) -> None:
    from memory_proxy.store.database import make_pool

    now = datetime.now(UTC)
    expired = await typed(db, USER_A, "User has a dentist appointment today.", "temporary",
                          expires_at=now - timedelta(hours=1))
    older = await typed(db, USER_A, BUN, "preference", stated_at=now - timedelta(days=3))
    twin_vector = [x + 0.001 for x in vector_for(BUN)]  # cosine > 0.99 to BUN
    newer = await memories.add_or_find_memory(db, user_id=USER_A, content="User codes with Bun.", embedding=twin_vector,
                                         model="mistral-embed", stated_at=now)
    words = await memories.add_or_find_memory(  # the user's words said after it, as near: another kind, kept apart
        db, user_id=USER_A, content="I code with Bun", embedding=[x + 0.002 for x in vector_for(BUN)],
        model="mistral-embed", stated_at=now + timedelta(seconds=1), attributes=FactAttributes(memory_type="episode"))
    stale = await typed(db, USER_A, "User is preparing a talk.", "context", stated_at=now - timedelta(days=200))
    pinned_stale = await typed(db, USER_A, "User is writing a book.", "context", pinned=True,
                               stated_at=now - timedelta(days=200))
    identity = await typed(db, USER_A, "User's name is Ana.", "identity", stated_at=now - timedelta(days=900))
    other_users = await typed(db, USER_B, "User is preparing a talk.", "context", stated_at=now - timedelta(days=200))

    async with make_pool(database_url, 2) as pool:
        counts = await maintain(pool, MaintenanceSettings(), user_id=USER_A)
        assert counts == {"expired": 1, "merged": 1, "pruned": 1, "history_purged": 0}
        assert await maintain(pool, MaintenanceSettings(), user_id=USER_A) == {"expired": 0, "merged": 0,
                                                                               "pruned": 0, "history_purged": 0}
    cur = await db.execute("SELECT vector_id FROM users_vectors WHERE user_id = %s AND superseded_at IS NULL",
                           [USER_A])
    assert {r[0] for r in await cur.fetchall()} == {newer, words, pinned_stale, identity}
    cur = await db.execute("SELECT action, old_vector_id, new_vector_id FROM memory_updates WHERE user_id = %s",
                           [USER_A])
    assert sorted(await cur.fetchall(), key=str) == sorted(
        [("expire", expired, None), ("merge", older, newer), ("prune", stale, None)], key=str)
    assert await memories.count_memories(db, USER_B) == 1 and other_users


def test_per_provider_defaults() -> None:
    local = load_settings(make_env("postgresql://x/y", __import__("pathlib").Path("/tmp"), EMBEDDING_PROVIDER="local",
                                   RETRIEVAL_INJECT_ALL_BELOW="5"))
    ranking = local.retrieval.ranking
    assert (local.embedding.model, local.retrieval.min_score, ranking.text_weight, ranking.rrf_k) == \
        ("all-minilm-l6-v2-int8", 0.35, 4.0, 20)
    default = load_settings({})
    ranking = default.retrieval.ranking
    assert (default.embedding.model, default.retrieval.min_score, ranking.text_weight, ranking.rrf_k) == \
        ("mistral-embed", 0.8, 1.0, 60)
    assert load_settings({"EMBEDDING_PROVIDER": "local", "RETRIEVAL_RRF_K": "60"}).retrieval.ranking.rrf_k == 60
