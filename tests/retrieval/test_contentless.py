"""Selective retrieval and formation's skip of contentless turns (retrieval/contentless.py), on the recorded
OpenWebUI session too."""

from __future__ import annotations

import json

import pytest

from memory_proxy.chat.request import TurnKind, classify, latest_user_text
from memory_proxy.retrieval.contentless import contentless
from tests.support.data import FIXTURES


@pytest.mark.parametrize("text", ["ok", "Thanks!", "ok thanks", "yes please", "👍", "", "  ", "Merci", "lol"])
def test_contentless_messages_need_no_search(text: str) -> None:
    assert contentless(text)


@pytest.mark.parametrize("text", ["ok, and what about Rust?", "thanks — where do I live?", "Rex"])
def test_messages_with_content_are_searched(text: str) -> None:
    assert not contentless(text)


@pytest.mark.parametrize("text", [
    "I'm vegan.", "What is the capital of France?", "Vivo en Sevilla.", "Mieszkam w Gdańsku",
    "私は東京に住んでいます", "lol I just adopted a cat",
])
def test_any_other_turn_goes_to_the_model_in_any_language(text: str) -> None:
    assert not contentless(text)


def test_turns_skipped_on_the_recorded_openwebui_session() -> None:
    """Tasks never form memories; of the real chat turns, only those with nothing but acknowledgements
    skip the memory LLM: whether a message states a fact is the model's to judge, in any language."""
    turns = []
    for line in (FIXTURES / "openwebui-0.12.4-requests.jsonl").read_text().splitlines():
        request = json.loads(line)
        body, headers = request.get("body"), {k.lower(): v for k, v in request["headers"].items()}
        if request["path"].endswith("/chat/completions") and isinstance(body, dict):
            user = headers.get("x-openwebui-user-id")
            if classify(user, headers.get("x-openwebui-task"), body) is TurnKind.CHAT:
                turns.append(latest_user_text(body["messages"]))
    skipped = [t for t in turns if contentless(t)]
    assert len(turns) == 8 and len(skipped) < len(turns)
    assert "My name is Bob and I like green tea." not in skipped
