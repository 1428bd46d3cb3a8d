"""retrieval/indexes.py: the in-process index finds what the SQL search finds, and stays true to the database
(dropped on every change it is told of, never trusted while it cannot hear, bounded in memory)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from memory_proxy.retrieval import indexes as index_module
from memory_proxy.retrieval import late_interaction, user_index
from memory_proxy.retrieval.indexes import Indexes, UserIndex
from memory_proxy.retrieval.retrieve import retrieve_memories
from memory_proxy.retrieval.user_index import Query
from memory_proxy.settings import load_settings
from memory_proxy.store import memories, search, snapshot
from memory_proxy.store.database import make_pool
from tests.support.data import BUN, CHAT, MODEL, RUNTIME_Q, USER_A, USER_B
from tests.support.fakes import basis
from tests.support.proxy import add_memory, add_with_vector, chat_body, fillers, metric, user_headers
from tests.support.servers import until

WORDS = ["parrot", "garden", "coffee", "rust", "berlin", "violin", "marathon", "sushi"]


async def seed(db: Any, user: str = USER_A, count: int = 24) -> list[str]:
    """`count` memories sharing words in overlapping pairs, with vectors spread over a few directions."""
    ids = []
    for i in range(count):
        text = f"User likes {WORDS[i % 8]} and {WORDS[(i * 3 + 1) % 8]}, note {i}."
        ids.append(await add_with_vector(db, text, basis((i % 5, 1.0), (10 + i, 0.3 + 0.05 * (i % 4))), user))
    return ids


QUERIES = [("what about my parrot and the violin?", (0, 1.0)), ("coffee in berlin", (3, 0.8)),
           ("sushi", (2, 0.5)), ("nothing matches this", (4, 1.0))]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "text"])
async def test_the_index_finds_what_the_sql_search_finds(db: Any, database_url: str, indexes: Indexes,
                                                         mode: str) -> None:
    await seed(db)
    await seed(db, USER_B, 8)  # another user's words must not count in A's frequencies
    await db.execute("UPDATE users_vectors SET pinned = true WHERE vector_id = (SELECT min(vector_id) "
                     "FROM users_vectors WHERE user_id = %s)", [USER_A])
    await indexes.caught_up()
    held = await indexes.ready(USER_A)
    assert held is not None and len(held.memories) == 24
    for text, direction in QUERIES:
        query = basis(direction, (30, 0.2))
        sql = await search.search(db, user_id=USER_A, model=MODEL, embedding=query, text=text, limit=15,
                                  mode=mode, weights=(1.0, 0.7), tiers=True)
        mine = held.search(Query.of(query, text), limit=15, mode=mode, rrf_k=60, weights=(1.0, 0.7), tiers=True,
                           now=datetime.now(UTC))
        assert [h.memory.id for h in mine.hits] == [h.memory.id for h in sql.hits], text
        assert [h.fused for h in mine.hits] == pytest.approx([h.fused for h in sql.hits]), text
        assert [h.cosine for h in mine.hits] == pytest.approx([h.cosine for h in sql.hits], abs=1e-5), text
        assert [(h.matched_terms, h.query_terms) for h in mine.hits] == [
            (h.matched_terms, h.query_terms) for h in sql.hits], text
        assert mine.always_on == sql.always_on and mine.recent == sql.recent
    assert sql.always_on and sql.always_on[0].pinned


async def test_mmr_similarities_are_exact_cosines_of_the_candidates(db: Any, database_url: str,
                                                                    indexes: Indexes) -> None:
    ids = await seed(db, count=6)
    await indexes.caught_up()
    held = await indexes.ready(USER_A)
    assert held is not None
    found = held.search(Query.of(basis((0, 1.0)), ""), limit=6, mode="vector", rrf_k=60, weights=(1.0, 1.0), tiers=False,
                        now=datetime.now(UTC))
    vectors = {mid: np.asarray(basis((i % 5, 1.0), (10 + i, 0.3 + 0.05 * (i % 4)))) for i, mid in enumerate(ids)}
    for hit in found.hits:
        expected = [float(vectors[hit.memory.id] @ vectors[other.memory.id]) for other in found.hits]
        assert hit.similar == pytest.approx(expected, abs=1e-5)


async def test_a_change_drops_that_users_index_and_use_counts_do_not(db: Any, database_url: str,
                                                                     indexes: Indexes) -> None:
    a_ids = await seed(db)
    await seed(db, USER_B, 8)
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is not None and await indexes.ready(USER_B) is not None
    await memories.record_uses(db, [(USER_A, a_ids[0], 3, datetime.now(UTC))])  # no notification
    await add_with_vector(db, "User moved to Lisbon.", basis((7, 1.0)), USER_B)  # notified after the use counts
    await until(lambda: indexes.get(USER_B) is None)
    assert indexes.get(USER_A) is not None  # notifications arrive in commit order: A's was never sent

    await memories.retire_memory(db, user_id=USER_A, vector_id=a_ids[1], reason="test", action="delete")
    await until(lambda: indexes.get(USER_A) is None)
    held = await indexes.ready(USER_A)
    assert held is not None and a_ids[1] not in {m.id for m in held.memories}
    assert held.access_count[held.position[a_ids[0]]] == 3


async def test_a_read_overtaken_by_a_change_is_thrown_away(db: Any, database_url: str, indexes: Indexes) -> None:
    await seed(db, count=6)
    await indexes.caught_up()
    assert indexes.get(USER_A) is None  # a miss starts a load
    indexes.changed(snapshot.user_key(USER_A))  # a change heard before the load stored its read
    assert await indexes.ready(USER_A) is None
    assert await indexes.ready(USER_A) is not None  # the next load stores


@pytest.mark.slow
async def test_no_index_is_trusted_while_the_listener_cannot_hear(db: Any, database_url: str) -> None:
    await seed(db, count=6)
    async with make_pool(database_url, 2) as pool:
        deaf = Indexes(pool, model=MODEL, budget_bytes=64 << 20)  # never listening
        before = metric("memory_proxy_index_lookups_total", result="bypass")
        assert deaf.get(USER_A) is None and await deaf.ready(USER_A) is None
        assert metric("memory_proxy_index_lookups_total", result="bypass") == before + 2

        stop = asyncio.Event()
        task = asyncio.create_task(deaf.run(database_url, stop))
        await until(lambda: deaf.listening)
        assert await deaf.ready(USER_A) is not None
        # The listener's connection dies: every index is dropped at once, then it listens again.
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            killed = await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         "WHERE query = 'LISTEN memory_changed' AND datname = current_database()")
            assert len(await killed.fetchall()) == 1
        await until(lambda: not deaf.listening)
        assert deaf.get(USER_A) is None
        await until(lambda: deaf.listening)
        assert await deaf.ready(USER_A) is not None
        stop.set()
        await task


async def test_memory_is_bounded_least_recently_searched_first(db: Any, database_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    users = [f"user-{i}" for i in range(10)]
    for user in users:
        await seed(db, user, 5)
    monkeypatch.setattr(user_index, "ROW_OVERHEAD_BYTES", 0)
    one_user = 5 * 1024 * 4
    async with make_pool(database_url, 2) as pool:
        held = Indexes(pool, model=MODEL, budget_bytes=int(8.5 * one_user))  # 8 users (one may take an eighth)
        stop = asyncio.Event()
        task = asyncio.create_task(held.run(database_url, stop))
        await until(lambda: held.listening)
        for user in users[:8]:
            assert await held.ready(user) is not None
        assert held.get(users[0]) is not None  # searched again: now the most recently used
        for user in users[8:]:
            assert await held.ready(user) is not None
        assert [user for user in users if held.get(user) is not None] == [users[0], *users[3:]]
        await seed(db, "big-user", 6)  # over an eighth of the budget: always searched in SQL
        assert await held.ready("big-user") is None
        stop.set()
        await task


async def test_a_user_key_collision_never_serves_another_users_index(db: Any, database_url: str,
                                                                     indexes: Indexes) -> None:
    await seed(db, count=6)
    await indexes.caught_up()
    held = await indexes.ready(USER_A)
    assert held is not None
    indexes._held[snapshot.user_key(USER_B)] = index_module._Entry(USER_A, held)  # as if md5(B) were md5(A)
    assert indexes.get(USER_B) is None


async def test_an_index_is_read_in_the_users_scope_only(database_url: str, db: Any) -> None:
    """A load runs under row-level security, on the app's pool: only the user's own rows exist for it."""
    a_ids = await seed(db, count=6)
    await seed(db, USER_B, 6)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        rows = await snapshot.read_user(conn, USER_A, 100)
    assert rows is not None and sorted(r.id for r in rows) == sorted(a_ids)


def test_expiry_is_checked_at_search_time() -> None:
    now = datetime.now(UTC)
    rows = [snapshot.LinkRow(id=f"m{i}", content=f"fact {i}", created_at=now, stated_at=now,
                             memory_type="temporary", pinned=i == 1, identity=False, linked_at=now,
                             expires_at=now + timedelta(hours=1) if i < 2 else None, access_count=0,
                             last_accessed_at=None, embedding_model=MODEL,
                             embedding=np.asarray(basis((i, 1.0), (9, 1.0)), dtype=np.float32), terms={"fact": 1},
                             version="1")
            for i in range(6)]
    held = UserIndex.of(rows, MODEL)
    later = now + timedelta(hours=2)
    for when, expected in ((now, {f"m{i}" for i in range(6)}), (later, {f"m{i}" for i in range(1, 6)})):
        found = held.search(Query.of(basis((0, 1.0)), "fact"), limit=10, mode="hybrid", rrf_k=60, weights=(1.0, 1.0),
                            tiers=True, now=when)
        assert {h.memory.id for h in found.hits} == expected  # m0 expired; m1 expired but pinned
        assert {m.id for m in found.recent} == expected


def test_many_memories_rank_the_nearest_by_sign_bits_as_the_sql_does() -> None:
    """Past SEARCH_CANDIDATES memories, the vector arm ranks the nearest by Hamming distance of their sign bits
    (as the SQL's binary codes pick whom to re-rank); the best by exact cosine are among them."""
    now = datetime.now(UTC)
    rng = np.random.default_rng(7)
    query = rng.standard_normal(1024).astype(np.float32)
    vectors = rng.standard_normal((1_000, 1024)).astype(np.float32)
    vectors[:10] = query + rng.uniform(0.5, 1.5, (10, 1)) * rng.standard_normal((10, 1024))  # the ten near ones
    rows = [snapshot.LinkRow(id=f"m{i:04}", content=f"fact {i}", created_at=now, stated_at=now, memory_type="fact",
                             pinned=False, identity=False, linked_at=now, expires_at=None, access_count=0,
                             last_accessed_at=None, embedding_model=MODEL, embedding=vectors[i], terms={},
                             version="1") for i in range(1_000)]
    held = UserIndex.of(rows, MODEL)
    near = held._nearest(Query.of(query, "").code)
    assert len(near) == search.SEARCH_CANDIDATES and set(range(10)) <= set(near.tolist())
    exact = np.argsort(-(held.vectors @ (query / np.linalg.norm(query))))[:10]
    found = held.search(Query.of(query, ""), limit=10, mode="vector", rrf_k=60, weights=(1.0, 1.0), tiers=False, now=now)
    assert [h.memory.id for h in found.hits] == [f"m{i:04}" for i in exact]
    assert sorted(exact) == list(range(10))


def test_memories_of_another_model_are_never_sign_bit_candidates() -> None:
    """A user part re-embedded: the vector arm ranks only vectors of the query's model, nearest first."""
    now = datetime.now(UTC)
    rng = np.random.default_rng(8)
    query = rng.standard_normal(1024).astype(np.float32)
    vectors = rng.standard_normal((600, 1024)).astype(np.float32)
    vectors[:20] = query  # the nearest of all, but of the old model
    rows = [snapshot.LinkRow(id=f"m{i:04}", content=f"fact {i}", created_at=now, stated_at=now, memory_type="fact",
                             pinned=False, identity=False, linked_at=now, expires_at=None, access_count=0,
                             last_accessed_at=None, embedding_model="old" if i < 300 else MODEL,
                             embedding=vectors[i], terms={}, version="1") for i in range(600)]
    held = UserIndex.of(rows, MODEL)
    near = held._nearest(Query.of(query, "").code)
    assert len(near) == search.SEARCH_CANDIDATES and min(near.tolist()) >= 300


@pytest.mark.parametrize("n", [1, 5, 50])
def test_the_best_scores_come_first_ties_by_position_whichever_way_they_are_found(n: int) -> None:
    rng = np.random.default_rng(n)
    scores = rng.integers(0, 20, 1_000).astype(np.float64)
    scores[rng.integers(0, 1_000, 300)] = -np.inf
    expected = np.argsort(-scores, kind="stable")[:n]
    assert user_index._best(scores, n).tolist() == expected[np.isfinite(scores[expected])].tolist()


def word_states(text: str) -> np.ndarray:
    """A stand-in for the local model's word states: one unit vector per word, by the word alone."""
    return np.array([basis((sum(map(ord, w)) % 64, 1.0)) for w in text.lower().split()], dtype=np.float32)


def test_the_late_interaction_arm_adds_its_rank_to_the_candidates_fused_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    texts = ["coffee in berlin", "tea in berlin", "violin lessons", "coffee beans"]
    rows = [snapshot.LinkRow(id=f"m{i}", content=text, created_at=now, stated_at=now, memory_type="preference",
                             pinned=False, identity=False, linked_at=now, expires_at=None, access_count=0,
                             last_accessed_at=None, embedding_model=MODEL,
                             embedding=np.asarray(basis((i, 1.0), (9, 1.0)), dtype=np.float32),
                             terms={w: 1 for w in text.split()}, version="1") for i, text in enumerate(texts)]
    seen: list[str] = []

    def tokenize(batch: list[str]) -> list[late_interaction.Tokens]:
        seen.extend(batch)
        return [late_interaction.Tokens.pack(word_states(t.split("] ", 1)[1])) for t in batch]  # as embedded: dated

    held = UserIndex.of(rows, MODEL, tokenize)
    assert len(seen) == 4 and all(t is not None for t in held.tokens)
    options: dict[str, Any] = {"limit": 10, "mode": "hybrid", "rrf_k": 20, "weights": (1.0, 4.0), "tiers": False,
                               "now": now}
    plain = held.search(Query.of(basis((3, 1.0)), "berlin"), **options)
    mine = held.search(Query.of(basis((3, 1.0)), "berlin"), word_states=word_states("coffee berlin"), late_weight=8.0,
                       **options)
    assert mine.late_weight == 8.0 and plain.late_weight == 0.0
    added = {h.memory.id: h.fused - p.fused for h, p in zip(mine.hits, plain.hits, strict=True)}
    assert [h.memory.id for h in mine.hits] == [h.memory.id for h in plain.hits]  # order kept for MMR's rows
    assert added["m0"] == pytest.approx(8 / 21)  # both words: first by this arm
    assert sorted(added.values(), reverse=True)[1:] == pytest.approx([8 / 22, 8 / 23, 8 / 24][:len(added) - 1])
    used = dataclasses.replace(held.rows[0], version="2", access_count=3)  # a new version, the same words
    edited = dataclasses.replace(held.rows[3], version="2", content="coffee beans roasted")
    again = UserIndex.of([used, *held.rows[1:3], edited], MODEL, tokenize, base=held)
    assert len(seen) == 5 and seen[-1].endswith("coffee beans roasted")  # only the edited memory's words
    assert again.tokens[:3] == held.tokens[:3] and again.tokens[0] is held.tokens[0]
    stopwords = held.search(Query.of(basis((3, 1.0)), "berlin"), word_states=np.zeros((0, 1024), dtype=np.float32),
                            late_weight=8.0, **options)
    assert stopwords.late_weight == 0.0  # a query of stop words only: the arm did not run
    monkeypatch.setattr(user_index, "LATE_MAX_MEMORIES", 3)  # a user grown too big for it: none computed or held
    too_big = UserIndex.of(list(again.rows), MODEL, tokenize, base=again)
    assert too_big.tokens == [None] * 4 and len(seen) == 5 and too_big.nbytes < again.nbytes


class WordsFake:
    """An embedder with word states (as the local model's): vectors by the first word, states by word."""

    model = MODEL

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [basis((WORDS.index(t.split()[0]) if t.split()[0] in WORDS else 40, 1.0)) for t in texts]

    async def embed_query(self, text: str) -> tuple[list[float], np.ndarray]:
        return (await self.embed([text]))[0], word_states(text)

    def tokens_sync(self, texts: list[str]) -> list[late_interaction.Tokens]:
        return [late_interaction.Tokens.pack(word_states(t)) for t in texts]

    async def warm_up(self) -> None:
        return None


async def test_a_user_too_big_to_hold_with_word_states_is_held_without_them(db: Any, database_url: str) -> None:
    await seed(db)  # 24 memories: ~0.1 MB of vectors, ~4.8 MB of these states; a user may take 1 MB
    big = lambda texts: [late_interaction.Tokens.pack(np.ones((200, 1024), dtype=np.float32)) for _ in texts]  # noqa: E731
    async with make_pool(database_url, 2) as pool:
        held = Indexes(pool, model=MODEL, budget_bytes=8 << 20, tokenize=big)
        stop = asyncio.Event()
        task = asyncio.create_task(held.run(database_url, stop))
        await until(lambda: held.listening)
        index = await held.ready(USER_A)
        assert index is not None and index.tokens == [None] * 24 and index.nbytes < 1 << 20
        stop.set()
        await task


async def test_a_turn_ranks_with_the_late_interaction_arm_when_the_index_holds_word_states(
        db: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await seed(db)
    fake = WordsFake()
    calls: list[dict[str, Any]] = []
    search_index = UserIndex.search
    monkeypatch.setattr(UserIndex, "search", lambda self, *a, **k: calls.append(k) or search_index(self, *a, **k))
    settings = load_settings({}).retrieval
    async with make_pool(database_url, 2) as pool:
        held = Indexes(pool, model=MODEL, budget_bytes=64 << 20, tokenize=fake.tokens_sync)
        stop = asyncio.Event()
        task = asyncio.create_task(held.run(database_url, stop))
        await until(lambda: held.listening)
        assert await held.ready(USER_A) is not None
        for late_weight in (8.0, 0.0):
            ranking = dataclasses.replace(settings.ranking, late_weight=late_weight)
            found = await retrieve_memories(pool=pool, embedder=fake, user_id=USER_A, query="parrot violin",
                                            settings=dataclasses.replace(settings, ranking=ranking), indexes=held)
            assert found and all(0 < m.score <= 1 for m in found)  # relevance over the best of every arm that ran
            if late_weight:
                assert calls[-1]["late_weight"] == 8.0 and calls[-1]["word_states"].shape == (2, 1024)
            else:
                assert calls[-1]["word_states"] is None  # off: the query's words are not even computed
        stop.set()
        await task


async def test_chat_turns_search_the_index_and_a_deletion_reaches_it(proxy: Any, db: Any) -> None:
    await fillers(db, USER_A)
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy()
    held: Indexes = client.app.state.services.indexes
    first = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert first.json()["memories"] == [bun]  # searched in PostgreSQL while the index loads
    await until(lambda: held.get(USER_A) is not None)

    hits = metric("memory_proxy_index_lookups_total", result="hit")
    second = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert second.json()["memories"] == [bun]
    assert metric("memory_proxy_index_lookups_total", result="hit") == hits + 1

    deleted = await client.delete(f"/api/v1/memories/{bun}", params={"user": USER_A})
    assert deleted.status_code == 200
    await until(lambda: (index := held.get(USER_A)) is None or bun not in index.position)
    third = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert third.json()["memories"] == []


async def test_a_deletion_not_heard_yet_is_never_injected(proxy: Any, db: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Another replica's delete reaches this process by notification, maybe after this process's next turn
    begins: what the index found is confirmed in PostgreSQL before it is injected."""
    await fillers(db, USER_A)
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy()
    held: Indexes = client.app.state.services.indexes
    await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    await until(lambda: held.get(USER_A) is not None)
    heard: list[str] = []
    monkeypatch.setattr(held, "changed", heard.append)  # the notification is late: the index still serves

    await db.execute("DELETE FROM users_vectors WHERE vector_id = %s", [bun])
    stale = metric("memory_proxy_index_stale_total")
    turn = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert bun in held.fresh(USER_A).position  # type: ignore[union-attr]  # searched in the stale index
    assert turn.json()["memories"] == []
    assert metric("memory_proxy_index_stale_total") == stale + 1
    assert snapshot.user_key(USER_A) in heard  # and read again, as the notification would have it


async def test_with_no_budget_every_turn_searches_postgresql(proxy: Any, db: Any) -> None:
    await fillers(db, USER_A)
    bun = await add_memory(db, USER_A, BUN)
    client = await proxy(RETRIEVAL_INDEX_MB="0")
    bypass = metric("memory_proxy_index_lookups_total", result="bypass")
    for _ in range(3):
        response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
        assert response.json()["memories"] == [bun]
    assert metric("memory_proxy_index_lookups_total", result="bypass") == bypass + 3


async def test_a_user_searched_in_sql_by_size_is_not_read_again_until_a_change(db: Any, indexes: Indexes) -> None:
    for i in range(3):  # fewer than COLD_START_THRESHOLD: the global memories are searched with theirs
        await add_with_vector(db, f"User fact {i}.", basis((i, 1.0)))
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is None
    before = metric("memory_proxy_index_lookups_total", result="sql")
    assert indexes.get(USER_A) is None and not indexes._loading  # no second read
    assert metric("memory_proxy_index_lookups_total", result="sql") == before + 1
    for i in range(3, 6):
        await add_with_vector(db, f"User fact {i}.", basis((i, 1.0)))
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is not None  # the change dropped the mark: read again, now held


async def test_a_listener_that_stops_hearing_is_replaced(db: Any, database_url: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """LISTEN can succeed and still hear nothing (a dead link, a transaction-mode pooler): the heartbeat
    it sends itself must come back, or no index is trusted."""
    await seed(db, count=6)
    monkeypatch.setattr(index_module, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(index_module, "HEARTBEAT_TIMEOUT_S", 0.5)
    async with make_pool(database_url, 2) as pool:
        held = Indexes(pool, model=MODEL, budget_bytes=64 << 20)
        stop = asyncio.Event()
        task = asyncio.create_task(held.run(database_url, stop))
        await until(lambda: held.listening)
        await held.caught_up()  # it hears
        assert held.listening and await held.ready(USER_A) is not None

        async def lost(conn: Any, key: str) -> None:  # the notification never arrives
            return None

        monkeypatch.setattr(snapshot, "notify", lost)
        await until(lambda: not held.listening)
        assert held.get(USER_A) is None and all(entry.stale for entry in held._held.values())
        stop.set()
        await task


async def test_a_read_after_a_change_reads_whole_only_the_rows_that_changed(db: Any, database_url: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ids = await seed(db, count=12)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        before = await snapshot.read_user(conn, USER_A, 100)
        assert before is not None
        await memories.set_pinned(db, USER_A, ids[0], True)
        await memories.retire_memory(db, user_id=USER_A, vector_id=ids[1], reason="test", action="delete")
        new = await add_with_vector(db, "User moved to Lisbon.", basis((7, 1.0)))
        await memories.record_uses(db, [(USER_A, ids[2], 2, datetime.now(UTC))])
        read_whole: list[str] = []
        link_row = snapshot._link_row
        monkeypatch.setattr(snapshot, "_link_row", lambda row: read_whole.append(row[0]) or link_row(row))
        after = await snapshot.read_user(conn, USER_A, 100, {row.id: row for row in before})
        monkeypatch.undo()
        full = await snapshot.read_user(conn, USER_A, 100)
    assert sorted(read_whole) == sorted([ids[0], ids[2], new])  # pinned, used, new; the other 9 kept
    assert after is not None and full is not None
    strip = lambda rows: [(r.id, r.content, r.pinned, r.access_count, r.version, r.terms) for r in rows]  # noqa: E731
    assert strip(after) == strip(full) and ids[1] not in {r.id for r in after}
    assert all(np.array_equal(a.embedding, f.embedding) for a, f in zip(after, full, strict=True))


async def test_a_changed_users_index_is_read_again_from_its_rows(db: Any, indexes: Indexes,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ids = await seed(db, count=12)
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is not None
    read_whole: list[str] = []
    link_row = snapshot._link_row
    monkeypatch.setattr(snapshot, "_link_row", lambda row: read_whole.append(row[0]) or link_row(row))
    await memories.set_pinned(db, USER_A, ids[3], True)
    await indexes.caught_up()
    assert indexes.get(USER_A) is None  # not served once changed
    held = await indexes.ready(USER_A)
    assert held is not None and held.memories[held.position[ids[3]]].pinned
    assert read_whole == [ids[3]]


async def test_a_changed_index_is_read_again_before_the_users_next_turn(db: Any, indexes: Indexes,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Formation changes a user's memories seconds after a turn: the index is read again then, once for a
    burst of changes, so that the next turn finds it fresh instead of searching in SQL."""
    monkeypatch.setattr(index_module, "REFRESH_DELAY_S", 0.5)
    await seed(db, count=6)
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is not None
    reads = 0
    read_user = snapshot.read_user

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read_user(*args, **kwargs)

    monkeypatch.setattr(snapshot, "read_user", counted)
    new = [await add_with_vector(db, f"User moved to city {i}.", basis((7, 1.0))) for i in range(3)]
    await indexes.caught_up()
    assert indexes.fresh(USER_A) is None  # changed: not served
    await until(lambda: (held := indexes.fresh(USER_A)) is not None and set(new) <= set(held.position))
    assert reads == 1
    hits = metric("memory_proxy_index_lookups_total", result="hit")
    assert indexes.get(USER_A) is not None
    assert metric("memory_proxy_index_lookups_total", result="hit") == hits + 1


async def test_a_refresh_overtaken_by_a_change_reads_again(db: Any, indexes: Indexes,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "REFRESH_DELAY_S", 0.01)
    await seed(db, count=6)
    await indexes.caught_up()
    assert await indexes.ready(USER_A) is not None
    late: list[str] = []
    read_user = snapshot.read_user

    async def overtaken(*args: Any, **kwargs: Any) -> Any:
        rows = await read_user(*args, **kwargs)
        if not late:  # a change commits after this read, before it is stored
            late.append(await add_with_vector(db, "User adopted a cat.", basis((8, 1.0))))
            await indexes.caught_up()
        return rows

    monkeypatch.setattr(snapshot, "read_user", overtaken)
    first = await add_with_vector(db, "User moved to Lisbon.", basis((7, 1.0)))
    await until(lambda: (held := indexes.fresh(USER_A)) is not None and {first, *late} <= set(held.position))


def test_a_query_of_another_dimension_is_never_compared() -> None:
    """As the SQL's dimension check: a 384-d query (another model) ranks nothing by vector."""
    now = datetime.now(UTC)
    rows = [snapshot.LinkRow(id=f"m{i}", content=f"fact {i}", created_at=now, stated_at=now,
                             memory_type="preference", pinned=False, identity=False, linked_at=now, expires_at=None,
                             access_count=0, last_accessed_at=None, embedding_model=MODEL,
                             embedding=np.asarray(basis((i, 1.0)), dtype=np.float32),
                             terms={"fact": 1, str(i): 1}, version="1") for i in range(6)]
    held = UserIndex.of(rows, MODEL)
    other = [1.0] + [0.0] * 383
    found = held.search(Query.of(other, ""), limit=10, mode="vector", rrf_k=60, weights=(1.0, 1.0), tiers=False, now=now)
    assert found.hits == []
    found = held.search(Query.of(other, "fact 3"), limit=10, mode="hybrid", rrf_k=60, weights=(1.0, 1.0), tiers=False, now=now)
    assert [h.memory.id for h in found.hits] == ["m3"] and found.hits[0].cosine == -1.0  # by its words only


@pytest.mark.parametrize("text", ["O'Brien's dog and the dogs' bones", "a back\\slash, a 'quote' and ''two''",
                                  "run run run, ran; running!"])
async def test_a_memorys_words_are_read_as_postgresql_holds_them(db: Any, text: str) -> None:
    cur = await db.execute("SELECT to_tsvector('english', %s)::text, tsvector_to_array(to_tsvector('english', %s)),"
                           " (SELECT array_agg(cardinality(positions)) FROM unnest(to_tsvector('english', %s)))",
                           [text, text, text])
    as_text, lexemes, counts = await cur.fetchone()
    assert snapshot.terms(as_text) == dict(zip(lexemes, counts, strict=True))
