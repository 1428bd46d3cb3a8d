"""Cleaning what the extraction LLM returns, before anything is embedded or stored."""

from proxy.memory.extract import MAX_FACTS_PER_TURN, MAX_MEMORY_BYTES, clean_facts


def test_facts_are_trimmed_deduplicated_and_empty_ones_dropped() -> None:
    assert clean_facts(["  User  lives in\nBerlin. ", "user lives in berlin", "", "   "]) == [
        "User lives in Berlin."]


def test_a_fact_over_the_size_limit_is_dropped_not_cut() -> None:
    at_limit = "é" * (MAX_MEMORY_BYTES // 2)  # 2 bytes each in UTF-8: exactly the limit
    assert clean_facts([at_limit + "x", at_limit, "User has a cat."]) == [at_limit, "User has a cat."]


def test_at_most_the_per_turn_cap_is_kept() -> None:
    facts = [f"User likes topic {i}." for i in range(MAX_FACTS_PER_TURN + 5)]
    assert clean_facts(facts) == facts[:MAX_FACTS_PER_TURN]
