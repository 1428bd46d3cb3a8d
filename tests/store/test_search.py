"""store/search.py against hand-computed cases: BM25, reciprocal rank fusion, common words, the per-user
postings the triggers keep (memory_proxy/store/migrations/0007), the similarities MMR reads, and one round trip."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_proxy.records import FactAttributes, Memory, SearchHit
from memory_proxy.retrieval.retrieve import memories_for_turn
from memory_proxy.settings import load_settings
from memory_proxy.store import memories, search
from memory_proxy.store.database import make_pool
from tests.support.data import MODEL, USER_A, USER_B
from tests.support.fakes import basis
from tests.support.proxy import add_with_vector


def bm25(tf: int, dl: int, avgdl: float, df: int, n: int) -> float:
    """The docstring's formula, written out again: k1 1.2, b 0.75."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl))


async def test_bm25_and_reciprocal_rank_fusion_match_a_hand_computed_case(db: Any) -> None:
    # English full-text config: "has", "a", "and" are stop words; "likes" stems to "like". Words per memory
    # (dl): parrot 2 (user, parrot), cat 2, cat_dog 3, tea 3 (user, like, tea); avgdl 2.5, N 4.
    parrot = await add_with_vector(db, "User has a parrot.", basis((1, 1.0)))
    cat = await add_with_vector(db, "User has a cat.", basis((2, 1.0)))
    cat_dog = await add_with_vector(db, "User has a cat and a dog.", basis((0, 1.0)))  # the query's own direction
    tea = await add_with_vector(db, "User likes tea.", basis((0, 0.6), (3, 0.8)))  # cosine 0.6
    # By hand: parrot 1.2040·1.0891 = 1.3113; cat 0.6931·1.0891 = 0.7549; cat_dog 0.6931·0.9244 = 0.6407.
    assert bm25(1, 2, 2.5, 1, 4) == pytest.approx(1.3113, abs=1e-4)
    assert bm25(1, 2, 2.5, 2, 4) == pytest.approx(0.7549, abs=1e-4)
    assert bm25(1, 3, 2.5, 2, 4) == pytest.approx(0.6407, abs=1e-4)

    query = basis((0, 1.0))
    text = await search.search(db, user_id=USER_A, model=MODEL, embedding=query, text="cat or parrot?",
                               mode="text", limit=10)
    assert [h.memory.id for h in text.hits] == [parrot, cat, cat_dog]  # idf, then length normalisation
    assert [h.fused for h in text.hits] == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    assert [(h.matched_terms, h.query_terms) for h in text.hits] == [(1, 2)] * 3

    hybrid = await search.search(db, user_id=USER_A, model=MODEL, embedding=query, text="cat or parrot?",
                                 mode="hybrid", limit=10, weights=(1.0, 2.0))
    # vector ranks: cat_dog 1, tea 2, then parrot and cat (cosine 0, tie broken by id); text as above
    vector_rank = {cat_dog: 1, tea: 2, **{mid: 3 + i for i, mid in enumerate(sorted([parrot, cat]))}}
    text_rank = {parrot: 1, cat: 2, cat_dog: 3}
    expected = {mid: 1 / (60 + vector_rank[mid]) + (2 / (60 + text_rank[mid]) if mid in text_rank else 0)
                for mid in vector_rank}
    assert {h.memory.id: h.fused for h in hybrid.hits} == pytest.approx(expected)
    assert [h.memory.id for h in hybrid.hits] == sorted(expected, key=lambda mid: -expected[mid])
    assert {h.memory.id: round(h.cosine, 4) for h in hybrid.hits}[tea] == 0.6


async def test_a_word_most_of_the_users_memories_hold_is_not_scored(db: Any) -> None:
    for i in range(4):
        await add_with_vector(db, f"User keeps note {i} about gardening.", basis((10 + i, 1.0)))
    rare = await add_with_vector(db, "User keeps a parrot.", basis((20, 1.0)))
    found = await search.search(db, user_id=USER_A, model=MODEL, embedding=basis((0, 1.0)),
                                text="my notes, my parrot", mode="text", limit=10)
    # "note" is in 4 of 5 memories (> half): dropped before any posting is read; "parrot" is scored.
    # The query still has two words: a memory matching one word of a long query must not look like a
    # match of half of it (the minimum score's keyword rule, retrieval/rank.py).
    assert [h.memory.id for h in found.hits] == [rare]
    assert (found.hits[0].matched_terms, found.hits[0].query_terms) == (1, 2)


async def postings(db: Any, user: str) -> tuple[set[tuple[str, str]], dict[str, int], tuple[int, int] | None]:
    async with db.transaction():
        await db.execute("SELECT set_config('memory_proxy.all_users', 'on', true)")
        terms = {(r[0], r[1]) for r in await (await db.execute(
            "SELECT lexeme, vector_id FROM memory_terms WHERE user_id = %s", [user])).fetchall()}
        lexicon = dict(await (await db.execute(
            "SELECT lexeme, df FROM memory_lexicon WHERE user_id = %s", [user])).fetchall())
        stats = await (await db.execute(
            "SELECT memories, words FROM memory_term_stats WHERE user_id = %s", [user])).fetchone()
    return terms, lexicon, tuple(stats) if stats else None


async def test_postings_follow_every_change_of_a_users_links(db: Any) -> None:
    bun = await add_with_vector(db, "User codes with Bun.", basis((1, 1.0)))
    node = await add_with_vector(db, "User codes with Node.", basis((2, 1.0)))
    await add_with_vector(db, "User codes in Rust.", basis((3, 1.0)), user=USER_B)
    terms, lexicon, stats = await postings(db, USER_A)
    assert terms == {("user", bun), ("code", bun), ("bun", bun), ("user", node), ("code", node), ("node", node)}
    assert lexicon == {"user": 2, "code": 2, "bun": 1, "node": 1} and stats == (2, 6)

    await memories.supersede_memory(db, user_id=USER_A, old_id=bun, new_id=node, reason="switched")
    terms, lexicon, stats = await postings(db, USER_A)
    assert {vid for _, vid in terms} == {node} and lexicon == {"user": 1, "code": 1, "node": 1} and stats == (1, 3)

    await memories.restore_memory(db, user_id=USER_A, vector_id=bun, max_memories=2000)  # bun active again, node superseded
    terms, lexicon, stats = await postings(db, USER_A)
    assert {vid for _, vid in terms} == {bun} and lexicon == {"user": 1, "code": 1, "bun": 1}

    async with db.transaction():
        await db.execute("SELECT set_config('memory_proxy.all_users', 'on', true)")
        await db.execute("DELETE FROM users_vectors WHERE user_id = %s", [USER_A])
    assert await postings(db, USER_A) == (set(), {}, None)  # an erase leaves no word of the user
    assert (await postings(db, USER_B))[2] == (1, 3)


async def test_a_user_never_reads_another_users_postings(db: Any, database_url: str) -> None:
    await add_with_vector(db, "User keeps a parrot.", basis((1, 1.0)), user=USER_B)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:  # the app's role: RLS applies
        async with conn.transaction():
            await conn.execute("SELECT set_config('memory_proxy.user_id', %s, true)", [USER_A])
            seen = await (await conn.execute(
                "SELECT (SELECT count(*) FROM memory_terms) + (SELECT count(*) FROM memory_lexicon)"
                " + (SELECT count(*) FROM memory_term_stats)")).fetchone()
        found = await search.search(conn, user_id=USER_A, model=MODEL, embedding=basis((1, 1.0)),
                                    text="parrot", limit=10, include_global=False)
    assert seen[0] == 0 and found.hits == []


async def test_candidates_carry_their_similarities_to_each_other(db: Any) -> None:
    await add_with_vector(db, "User likes green tea.", basis((0, 1.0), (1, 0.1)))
    await add_with_vector(db, "User loves green tea.", basis((0, 1.0), (1, 0.12)))  # a near copy: same signs everywhere
    await add_with_vector(db, "User climbs on weekends.", basis((500, 1.0)))
    found = await search.search(db, user_id=USER_A, model=MODEL, embedding=basis((0, 1.0)), text="", limit=10,
                                mode="vector")
    by_text = {h.memory.content: h for h in found.hits}
    order = [h.memory.content for h in found.hits]
    likes, loves = by_text["User likes green tea."], by_text["User loves green tea."]
    assert all(len(h.similar) == 3 for h in found.hits)
    assert likes.similar[order.index("User loves green tea.")] == pytest.approx(1.0)
    assert likes.similar[order.index("User likes green tea.")] == pytest.approx(1.0)  # itself
    assert loves.similar[order.index("User climbs on weekends.")] < 1.0


async def test_a_turn_reads_both_tiers_and_the_search_on_one_connection(db: Any, database_url: str) -> None:
    name = await memories.add_or_find_memory(db, user_id=USER_A, content="User's name is Ana.",
                                        embedding=basis((9, 1.0)), model=MODEL,
                                        attributes=FactAttributes(memory_type="identity"))
    tea = await add_with_vector(db, "User likes green tea.", basis((0, 1.0)))

    class Embedder:
        model = MODEL

        async def embed(self, texts: list[str]) -> list[list[float]]:
            return [basis((0, 1.0)) for _ in texts]

    settings = load_settings({"RETRIEVAL_INJECT_ALL_BELOW": "0", "RETRIEVAL_MIN_SCORE": "0.5"}).retrieval
    async with make_pool(database_url, 2) as pool:
        checkouts = 0
        connection = pool.connection

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal checkouts
            checkouts += 1
            return connection(*args, **kwargs)

        pool.connection = counted  # type: ignore[method-assign]
        found = await memories_for_turn(pool=pool, embedder=Embedder(), user_id=USER_A,
                                        query="What tea do I like?", settings=settings)
    assert [m.id for m in found.always_on] == [name] and [m.id for m in found.query] == [tea]
    assert checkouts == 1


async def test_one_shared_word_of_a_long_query_does_not_pass_the_minimum_score(db: Any) -> None:
    from memory_proxy.retrieval.rank import qualifies

    writing = await add_with_vector(db, "User likes writing Python.", basis((7, 1.0)))  # cosine 0 to the query
    found = await search.search(db, user_id=USER_A, model=MODEL, embedding=basis((0, 1.0)),
                                text="Can you help me write a poem about the ocean?", limit=10)
    [hit] = [h for h in found.hits if h.memory.id == writing]
    assert (hit.matched_terms, hit.query_terms) == (1, 4)  # help, write, poem, ocean
    assert not qualifies(hit, 0.8)


def test_what_a_turn_may_show_of_a_team_is_its_pinned_memories_its_hits_and_all_of_it_only_when_small() -> None:
    """A large team's newest memories are not shown, so a turn neither ranks nor marks them."""
    now = datetime.now(UTC)
    pinned, identity, *newest = [Memory(id=i, content=f"fact {i}", created_at=now, pinned=i == "p") for i in "pixyz"]
    hit = SearchHit(memory=newest[0], fused=1.0, cosine=0.5, matched_terms=0)
    found = search.Found(always_on=[pinned, identity], recent=newest, hits=[hit])
    large = found.shown(inject_all_below=2)
    assert (large.always_on, large.recent, large.hits) == ([pinned], [], [hit])
    assert found.shown(inject_all_below=3).recent == newest
