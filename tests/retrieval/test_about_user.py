"""retrieval/about_user.py and what a question about the user as a whole gets: the embedder tells "what do you
know about me?" from a question about one thing, and such a question begins with the user's newest facts (their
profile), episodes left out, in PostgreSQL and in the in-process index alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_proxy.embedding.local_model import LocalEmbedder
from memory_proxy.records import FactAttributes
from memory_proxy.retrieval.about_user import AboutUser
from memory_proxy.retrieval.indexes import Indexes
from memory_proxy.retrieval.retrieve import PROFILE_READ, memories_for_turn
from memory_proxy.retrieval.user_index import Query
from memory_proxy.settings import EPISODE, load_settings
from memory_proxy.store import search
from memory_proxy.store.database import make_pool
from memory_proxy.store.memories import add_or_find_memory
from tests.support.data import MODEL, USER_A
from tests.support.fakes import basis

# Not the examples about_user.py compares with: other wordings, and questions as LoCoMo asks them of its speakers.
WHOLE = ["What's in your memory about me?", "what do u know abt me", "Remind me what you know about my life.",
         "Give me a summary of my profile", "Что ты помнишь обо мне?", "Cosa ricordi di me?"]
ONE_THING = ["When did I go to the LGBTQ support group?", "What is my identity?", "What did I research?",
             "What does I do to remember happy memories?", "How long ago was my 18th birthday?",
             "Which country do I come from?", "What books have I read?"]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


async def test_the_local_embedder_tells_a_question_about_the_user_from_one_about_one_thing(local: LocalEmbedder) -> None:
    about = AboutUser(local)
    asked = {q: await about.asks((await local.embed([q]))[0]) for q in WHOLE + ONE_THING}
    assert [q for q in WHOLE if not asked[q]] == []
    assert [q for q in ONE_THING if asked[q]] == []


async def test_an_embedder_it_was_not_calibrated_for_never_takes_a_question_for_one() -> None:
    class Other:
        model = "mistral-embed"
        asked = 0

        async def embed(self, texts: list[str]) -> list[list[float]]:
            self.asked += 1
            return [basis((0, 1.0)) for _ in texts]

    other = Other()
    assert not await AboutUser(other).asks(basis((0, 1.0)))  # type: ignore[arg-type]
    assert other.asked == 0


async def test_a_failing_embedder_means_no_and_is_asked_again_next_time(local: LocalEmbedder) -> None:
    class Flaky:
        model = local.model
        failures = 1

        async def embed(self, texts: list[str]) -> list[list[float]]:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("down")
            return await local.embed(texts)

    about = AboutUser(Flaky())  # type: ignore[arg-type]
    [vector] = await local.embed(["What do you know about me?"])
    assert not await about.asks(vector)
    assert await about.asks(vector)


async def seed_profile(db: Any) -> tuple[list[str], list[str]]:
    """30 facts and 30 episodes, interleaved, each a day newer than the last; (facts, episodes) newest first."""
    facts, episodes = [], []
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(30):
        for kind, held in (("preference", facts), (EPISODE, episodes)):
            text = f"User fact {i}." if kind != EPISODE else f"I said thing {i}"
            held.append(await add_or_find_memory(db, user_id=USER_A, content=text, model=MODEL,
                                                 embedding=basis((5 + i % 7, 1.0)),
                                                 stated_at=start + timedelta(days=i),
                                                 attributes=FactAttributes(memory_type=kind)))
    return facts[::-1], episodes[::-1]


class Asks:
    """An AboutUser whose answer the test sets."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer

    async def asks(self, vector: list[float]) -> bool:
        return self.answer


class Embedder:
    model = MODEL

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [basis((0, 1.0)) for _ in texts]  # near none of the memories: search alone finds nothing


async def test_a_question_about_the_user_begins_with_their_newest_facts(db: Any, database_url: str) -> None:
    facts, episodes = await seed_profile(db)
    settings = load_settings({"RETRIEVAL_MIN_SCORE": "0.5"}).retrieval
    async with make_pool(database_url, 2) as pool:
        found = {answer: await memories_for_turn(pool=pool, embedder=Embedder(), user_id=USER_A,
                                                 query="What do you know about me?", settings=settings,
                                                 about_user=Asks(answer))  # type: ignore[arg-type]
                 for answer in (True, False)}
    assert found[True].about_user and not found[False].about_user
    assert [m.id for m in found[True].query][:PROFILE_READ] == facts[:PROFILE_READ]
    assert found[False].query == []  # the search alone: nothing near the question
    assert not {m.id for m in found[True].query} & set(episodes)


async def test_the_index_reads_the_profile_as_postgresql_does(db: Any, indexes: Indexes) -> None:
    facts, _ = await seed_profile(db)
    await indexes.caught_up()
    index = await indexes.ready(USER_A)
    assert index is not None and len(index.memories) == 60
    query = basis((0, 1.0))
    for recent, facts_only in ((PROFILE_READ, True), (11, False)):
        sql = await search.search(db, user_id=USER_A, model=MODEL, embedding=query, text="about me", limit=9,
                                  tiers=True, recent=recent, recent_facts=facts_only)
        mine = index.search(Query.of(query, "about me"), limit=9, mode="hybrid", rrf_k=60, weights=(1.0, 1.0),
                            tiers=True, now=datetime.now(UTC), recent=recent, recent_facts=facts_only)
        assert [m.id for m in mine.recent] == [m.id for m in sql.recent]
        assert len(sql.recent) == recent
    assert [m.id for m in sql.recent][:2] != facts[:2]  # without facts_only the newest are mixed with episodes
