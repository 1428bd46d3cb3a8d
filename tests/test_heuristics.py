"""Selective retrieval and the formation quality filter (memory/heuristics.py), and what the filter
saves on the recorded OpenWebUI session."""

from __future__ import annotations

import json

import pytest

from proxy.classify import TurnKind, classify, latest_user_text
from proxy.memory.heuristics import contentless, trivial_turn
from tests.conftest import FIXTURES


@pytest.mark.parametrize("text", ["ok", "Thanks!", "ok thanks", "yes please", "👍", "", "  ", "Merci", "lol"])
def test_contentless_messages_need_no_search(text: str) -> None:
    assert contentless(text)


@pytest.mark.parametrize("text", ["ok, and what about Rust?", "thanks — where do I live?", "Rex"])
def test_messages_with_content_are_searched(text: str) -> None:
    assert not contentless(text)


@pytest.mark.parametrize("text", [
    "I'm vegan.", "My name is Bob and I like green tea.", "we moved to Lyon last year",
    "Je m'appelle Ana et j'habite à Lyon.", "Ich wohne in Berlin.", "Mi hermana vive en Madrid.",
    "私は東京に住んでいます", "Меня зовут Анна",  # scripts without a pronoun list are never judged trivial
])
def test_turns_that_may_state_a_fact_go_to_the_llm(text: str) -> None:
    assert not trivial_turn(text)


@pytest.mark.parametrize("text", [
    "ok", "thanks!", "What is the capital of France?", "Write a haiku about autumn", "err?",
    "Explain quicksort in Python", "Hi, plain API call",
])
def test_trivial_turns_are_skipped_without_an_llm_call(text: str) -> None:
    assert trivial_turn(text)


def test_share_of_extraction_calls_saved_on_the_recorded_openwebui_session() -> None:
    """Tasks never form memories; of the real chat turns, those without a first-person statement skip
    the extraction LLM. Recorded session: 8 chat turns, 5 skipped (62.5 % of extraction calls)."""
    turns = []
    for line in (FIXTURES / "openwebui-0.12.4-requests.jsonl").read_text().splitlines():
        request = json.loads(line)
        body, headers = request.get("body"), {k.lower(): v for k, v in request["headers"].items()}
        if request["path"].endswith("/chat/completions") and isinstance(body, dict):
            user = headers.get("x-openwebui-user-id")
            if classify(user, headers.get("x-openwebui-task"), body) is TurnKind.CHAT:
                turns.append(latest_user_text(body["messages"]))
    skipped = [t for t in turns if trivial_turn(t)]
    assert (len(turns), len(skipped)) == (8, 5)
    assert "My name is Bob and I like green tea." not in skipped
