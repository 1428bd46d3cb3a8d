"""The episodic tier (EPISODES): the user's own words of a turn kept beside the facts formed from them.

Real PostgreSQL; the memory LLM is the scripted FakeMemoryLLM behind respx; the worker is awaited, never slept on.
"""

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memory_proxy.formation.episodes import MAX_EPISODES_PER_TURN, PIECE_BYTES, episode_texts
from memory_proxy.store.scope import in_user_scope
from tests.support.data import (
    API,
    BUN,
    BUN_MSG,
    CHAT,
    NODE,
    NODE_MSG,
    RUNTIME_Q,
    USER_A,
    USER_B,
    runtime_facts,
)
from tests.support.proxy import (
    active_texts,
    chat_body,
    make_env,
    metric,
    sent_body,
    system_text,
    user_headers,
)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return make_env(database_url, tmp_path, EPISODES="true")



async def kinds(db: Any, user_id: str) -> list[tuple[str, str]]:
    """The user's active memories as (type, text), sorted."""
    cur = await db.execute("SELECT v.memory_type, v.content FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                           " WHERE uv.user_id = %s AND uv.superseded_at IS NULL", [user_id])
    return sorted(await cur.fetchall())


def test_long_words_are_kept_in_pieces_cut_between_words_and_redacted() -> None:
    words = " ".join(f"word{i}" for i in range(3000))
    pieces = episode_texts(words)
    assert len(pieces) == MAX_EPISODES_PER_TURN and all(len(p.encode()) <= PIECE_BYTES for p in pieces)
    assert " ".join(pieces) == " ".join(words.split()[:len(" ".join(pieces).split())])  # nothing cut mid-word
    assert episode_texts("my key is sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD ok") == [
        "my key is [REDACTED: api_key] ok"]
    assert episode_texts("   ") == []


async def test_a_turn_keeps_the_users_words_beside_its_fact_and_a_fact_is_never_compared_with_them(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = runtime_facts
    added, episodes = metric("memory_proxy_decisions_total", action="add"), metric("memory_proxy_decisions_total",
                                                                                    action="episode")
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert await kinds(db, USER_A) == [("episode", BUN_MSG), ("preference", BUN)]
    assert metric("memory_proxy_decisions_total", action="add") == added + 1  # the fact's rates stay the facts'
    assert metric("memory_proxy_decisions_total", action="episode") == episodes + 1
    assert await kinds(db, USER_B) == []
    await client.post(CHAT, json=chat_body(NODE_MSG), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    # the fact replaced the fact; the words of both turns stay
    assert await kinds(db, USER_A) == sorted([("episode", BUN_MSG), ("episode", NODE_MSG), ("preference", NODE)])
    [relate] = [prompt for purpose, prompt in memory_llm.prompts if purpose == "relate"]
    assert BUN in relate and BUN_MSG not in relate  # the facts' neighbours hold no episode


async def test_an_episode_is_injected_as_the_users_words_and_not_with_episodes_off(
        client: Any, outside: Any, db: Any, worker: Any, proxy: Any) -> None:
    said = "I am learning the cello with my teacher Agathe"
    await client.post(CHAT, json=chat_body(said), headers=user_headers(USER_A))  # the model extracts nothing
    assert await worker.run_until_idle() == 1
    await client.post(CHAT, json=chat_body("Who teaches me the cello?"), headers=user_headers(USER_A))
    assert f"(the user's words) \"{said}\"" in system_text(sent_body(outside))
    off = await proxy(EPISODES="false")
    await off.post(CHAT, json=chat_body("Who teaches me the cello?"), headers=user_headers(USER_A))
    assert "Agathe" not in system_text(sent_body(outside))


async def test_what_the_user_pasted_and_trivial_turns_are_not_kept(
        client: Any, outside: Any, db: Any, worker: Any) -> None:
    pasted = "Summarize this:\n```\ndef pay(): return ledger.total()\n```"
    await client.post(CHAT, json=chat_body(pasted), headers=user_headers(USER_A))
    await client.post(CHAT, json=chat_body("ok thanks"), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 2
    texts = [text for _, text in await kinds(db, USER_A)]
    assert texts == ["Summarize this: […]"]  # what was pasted, marked as left out


async def test_past_the_episode_cap_the_oldest_is_retired_and_facts_are_not_counted(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    worker.settings = replace(worker.settings, max_episodes=2, max_memories=1)
    memory_llm.extract = runtime_facts
    for message in (BUN_MSG, "first thought", "second thought"):
        await client.post(CHAT, json=chat_body(message), headers=user_headers(USER_A))
        assert await worker.run_until_idle() == 1
    assert await kinds(db, USER_A) == [("episode", "first thought"), ("episode", "second thought"),
                                       ("preference", BUN)]  # one fact under a cap of one: episodes apart
    cur = await db.execute("SELECT v.content, u.action FROM memory_updates u JOIN vectors v ON v.id = u.old_vector_id"
                           " WHERE u.user_id = %s", [USER_A])
    assert await cur.fetchall() == [(BUN_MSG, "expire")]


async def test_a_request_to_forget_reaches_the_users_words(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    said = "My sister Ines lives in Porto"
    await client.post(CHAT, json=chat_body(said), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    memory_llm.extract = lambda m: {"forget": "my sister", "forgets": [said]} if m.startswith("Forget") else []
    await client.post(CHAT, json=chat_body("Forget what I told you about my sister"), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert said not in [text for _, text in await kinds(db, USER_A)]


async def test_export_and_erasure_take_the_episodes(client: Any, outside: Any, db: Any, worker: Any) -> None:
    await client.post(CHAT, json=chat_body("I keep bees on my roof"), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    exported = (await client.get(f"{API}/export", params={"user": USER_A})).json()
    assert [(m["memory_type"], m["content"]) for m in exported["memories"]] == [("episode", "I keep bees on my roof")]
    listed = (await client.get(f"{API}/memories", params={"user": USER_A, "type": "episode"})).json()
    assert [m["content"] for m in listed["data"]] == ["I keep bees on my roof"]
    created = await client.post(f"{API}/memories", params={"user": USER_A},
                                json={"content": "I said this", "memory_type": "episode"})
    assert created.status_code == 400  # an episode is what the user said in a chat, never made up after
    erased = await client.post(f"{API}/erase", params={"user": USER_A, "confirm": USER_A})
    assert erased.status_code == 200
    async with in_user_scope(db, USER_A):
        assert await active_texts(db, USER_A) == []


async def test_a_question_about_a_fact_still_finds_the_fact(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = runtime_facts
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert BUN in system_text(sent_body(outside))
