"""Formation end to end on the benchmark's CI subset (memory/formation.py and the rules it calls).

Scripted users go through the real HTTP path of a running proxy (chat turn, tee, outbox, job, worker,
management API, the probe's injection) with a scripted memory LLM that reproduces what a 1.5B model
did wrong: it copies the prompt's example, omits the update, answers `inf` or an unknown number, obeys
an instruction hidden in the user's text or a pasted e-mail, attributes a brother's city to the user,
answers with a bare list. Every one of those users must still end right.
"""

from typing import Any

from benchmarks.formation_quality.proxy_runner import run_proxy
from benchmarks.formation_quality.scenarios import load_users
from benchmarks.formation_quality.score import judge
from tests.conftest import CHAT, USER_A, chat_body, metric, user_headers


async def test_the_ci_users_end_right_whatever_the_scripted_model_gets_wrong(database_url: str) -> None:
    users = load_users(ci=True)
    assert len(users) >= 15 and len({u.category for u in users}) >= 12
    result = await run_proxy(users, llm_base_url=None, database_url=database_url)
    verdicts = [judge(user, outcome) for user, outcome in zip(users, result["users"], strict=True)]
    failures = {v.user: v.failures for v in verdicts if not v.passed}
    assert failures == {}
    # one LLM call per turn that reached the model, and never a second one
    assert max(t["llm_calls"] for u in result["users"] for t in u["turns"]) == 1


async def test_a_turn_without_a_first_person_word_makes_no_call_and_only_supported_facts_are_kept(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = lambda message: [
        {"fact": "User uses Bun at work.", "type": "project"},
        {"fact": "User has a meeting tomorrow.", "type": "temporary"},
        {"fact": "User prefers TypeScript.", "type": "preference"},  # never said: dropped
        "Bun is fast.",  # not about the user: dropped
        {"fact": "User asks about Rust.", "type": "project"},  # a request, not a fact: dropped
    ]
    dropped = {why: metric("memory_proxy_facts_dropped_total", reason=why)
               for why in ("unsupported", "not_about_user", "request")}
    await client.post(CHAT, json=chat_body("What is the capital of France?"), headers=user_headers(USER_A))
    await client.post(CHAT, json=chat_body("I use Bun at work and I have a meeting tomorrow. Is Rust nice?"),
                      headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 2
    assert memory_llm.calls("extract") == 1  # the question never reached the LLM
    cur = await db.execute(
        "SELECT v.content, v.memory_type, v.expires_at IS NOT NULL FROM users_vectors uv"
        " JOIN vectors v ON v.id = uv.vector_id WHERE uv.user_id = %s ORDER BY v.content", [USER_A])
    assert await cur.fetchall() == [("User has a meeting tomorrow.", "temporary", True),
                                    ("User uses Bun at work.", "project", False)]
    assert {why: metric("memory_proxy_facts_dropped_total", reason=why) - n for why, n in dropped.items()} == {
        "unsupported": 1, "not_about_user": 1, "request": 1}


def _said_facts(n: int) -> tuple[str, list[str]]:
    topics = [f"topic{i}" for i in range(n)]
    return "I like " + ", ".join(topics) + ".", [f"User likes {t}." for t in topics]


def test_a_fact_over_the_size_limit_is_dropped_not_cut() -> None:
    from proxy.memory.content import MAX_MEMORY_BYTES
    from proxy.memory.evidence import own_words
    from proxy.memory.extract import ExtractedFact
    from proxy.memory.formation import _kept

    long_fact = "User likes " + "é" * MAX_MEMORY_BYTES
    dropped: list[dict[str, str]] = []
    kept = _kept([ExtractedFact(fact=long_fact), ExtractedFact(fact="User likes tea.")],
                 own_words("I like tea and " + "é" * MAX_MEMORY_BYTES), [], dropped)
    assert [text for text, _ in kept] == ["User likes tea."]
    assert [d["why"] for d in dropped] == ["too_long"]


def test_at_most_the_per_turn_cap_is_kept_and_repeats_are_dropped() -> None:
    from proxy.memory.content import MAX_FACTS_PER_TURN
    from proxy.memory.evidence import own_words
    from proxy.memory.extract import ExtractedFact
    from proxy.memory.formation import _kept

    message, facts = _said_facts(MAX_FACTS_PER_TURN + 3)
    dropped: list[dict[str, str]] = []
    kept = _kept([ExtractedFact(fact=f) for f in [facts[0], facts[0].lower(), *facts[1:]]], own_words(message),
                 [], dropped)
    assert [text for text, _ in kept] == facts[:MAX_FACTS_PER_TURN]
    assert [d["why"] for d in dropped] == ["repeated"] + ["over_cap"] * 3


def test_a_state_of_the_moment_is_kept_for_a_day_whatever_type_the_model_said() -> None:
    from proxy.memory.formation import _NOW

    for passing in ("User is exhausted today.", "User has caught a cold.", "User is stuck at the airport.",
                    "User's flight is delayed.", "User is in bed."):
        assert _NOW.search(passing), passing
    for lasting in ("User has migraines.", "User likes cold weather.", "User is a nurse.", "User is vegan."):
        assert not _NOW.search(lasting), lasting
