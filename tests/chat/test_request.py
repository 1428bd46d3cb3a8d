import json

import pytest

from memory_proxy.chat.request import TurnKind, classify, latest_user_text, message_text
from tests.support.data import FIXTURES

RAG_TURN = ("### Task:\nRespond to the user query using the provided context, incorporating inline "
            "citations.\n<context>\n<source id=\"1\">doc</source>\n</context>\n\n<user_query>\nWhat is X?\n</user_query>")


def test_no_user_is_anonymous_even_with_task_header() -> None:
    assert classify(None, "title_generation", {"messages": []}) is TurnKind.ANONYMOUS


def test_task_header_decides_when_present() -> None:
    task_like = {"stream": False, "messages": [{"role": "user", "content": "### Task:\nGenerate a title"}]}
    assert classify("u", "title_generation", {"messages": [{"role": "user", "content": "hi"}]}) is TurnKind.TASK
    assert classify("u", "", task_like) is TurnKind.CHAT  # header present and empty: a real turn


def test_heuristic_without_header() -> None:
    title = {"stream": False, "messages": [{"role": "user", "content": "### Task:\nGenerate a concise title"}]}
    assert classify("u", None, title) is TurnKind.TASK
    assert classify("u", None, {**title, "stream": True}) is TurnKind.CHAT
    assert classify("u", None, {**title, "tools": [{"type": "function"}]}) is TurnKind.CHAT
    rag = {"stream": False, "messages": [{"role": "user", "content": RAG_TURN}]}
    assert classify("u", None, rag) is TurnKind.CHAT


def test_multimodal_text_parts() -> None:
    content = [{"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {"url": "data:..."}},
               {"type": "text", "text": "in this picture?"}]
    assert message_text(content) == "what is\nin this picture?"
    assert latest_user_text([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "a"


def _captures(name: str) -> list[dict]:
    rows = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]
    return [r for r in rows if r["path"] == "/v1/chat/completions"]


@pytest.mark.parametrize("index", range(len(_captures("openwebui-0.12.4-requests-task-headers.jsonl"))))
def test_heuristic_agrees_with_the_task_header_on_real_captures(index: int) -> None:
    """Both captures come from the same scripted session: the heuristic must classify every request
    of the default capture exactly as the reliable header classified its twin."""
    with_header = _captures("openwebui-0.12.4-requests-task-headers.jsonl")[index]
    headers = {k.lower(): v for k, v in with_header["headers"].items()}
    by_header = classify("u", headers.get("x-openwebui-task", ""), with_header["body"])
    by_heuristic = classify("u", None, with_header["body"])
    assert by_heuristic is by_header
    expected = TurnKind.TASK if headers.get("x-openwebui-task") else TurnKind.CHAT
    assert by_header is expected
