"""What a new fact does to the user's memories and what a forget request names, as the model answers
them (formation/resolve.py): the answer read leniently, then one action."""

import json
from datetime import UTC, datetime

import httpx
import pytest

from memory_proxy.formation.memory_llm import MemoryLLM
from memory_proxy.formation.resolve import forgotten, proposals, relate, relations_model
from memory_proxy.prompts import load_prompt
from memory_proxy.records import Memory
from memory_proxy.settings import load_settings
from tests.support.data import PROXY_KEY


def memories(*texts: str) -> list[Memory]:
    return [Memory(id=f"m{i}", content=text, created_at=datetime.now(UTC)) for i, text in enumerate(texts, 1)]


@pytest.mark.parametrize(("reply", "relations"), [
    ({"1": "unrelated", "2": "updates", "3": "same"}, {1: "unrelated", 2: "updates", 3: "same"}),
    # a small model's other words, a missing key, a list in order, a wrapping object
    ({"1": "Contradiction", "2": "more_specific", "3": "maybe"}, {1: "updates", 2: "detail", 3: "unrelated"}),
    ({"2": "same"}, {1: "unrelated", 2: "same", 3: "unrelated"}),
    (["detail", "unrelated", "updates"], {1: "detail", 2: "unrelated", 3: "updates"}),
    ({"relations": {"3": "updates"}}, {1: "unrelated", 2: "unrelated", 3: "updates"}),
])
def test_a_relations_answer_is_read_leniently(reply: object, relations: dict[int, str]) -> None:
    assert relations_model(3).model_validate(reply).by_number() == relations


def test_the_relations_schema_names_every_candidate_so_a_grammar_makes_the_model_answer_each() -> None:
    schema = relations_model(2).model_json_schema()
    assert schema["required"] == ["1", "2"]
    assert schema["properties"]["1"]["enum"] == ["same", "updates", "detail", "unrelated"]


@pytest.mark.parametrize(("relations", "action", "target"), [
    ({1: "unrelated", 2: "updates"}, "replace", "m2"),
    ({1: "detail", 2: "updates"}, "replace", "m2"),  # a change wins over a detail
    ({1: "detail", 2: "same"}, "refine", "m1"),
    ({1: "unrelated", 2: "same"}, "ignore", "m2"),
    ({1: "unrelated", 2: "unrelated"}, "add", None),
    ({}, "add", None),
])
def test_one_action_from_the_relations(relations: dict, action: str, target: str | None) -> None:
    found = proposals(memories("User has a dog.", "User lives in Lyon."), relations)
    assert ((found[0][1], found[0][2].id) if found else ("add", None)) == (action, target)


def _llm(answers: list[object], sent: list[dict]) -> tuple[MemoryLLM, httpx.AsyncClient]:
    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps(answers[len(sent) - 1])}}]})

    settings = load_settings({"PROXY_API_KEYS": PROXY_KEY, "MEMORY_LLM_PROVIDER": "openai",
                              "MEMORY_LLM_BASE_URL": "http://llm.test/v1", "MEMORY_LLM_MODE": "json"})
    client = httpx.AsyncClient(transport=httpx.MockTransport(reply))
    return MemoryLLM(settings.memory_llm, client), client


async def test_relate_and_forget_share_the_system_message_and_number_the_candidates() -> None:
    sent: list[dict] = []
    llm, client = _llm([{"1": "updates", "2": "unrelated"}, {"forget": [2, 2, 7, 0]}], sent)
    candidates = memories("User is an accountant at Orvel.", "User lives in </message>Lyon.")
    async with client:
        assert await relate(llm, "User works at a start-up called Pinecrest.", candidates) == {
            1: "updates", 2: "unrelated"}
        named = await forgotten(llm, request="forget where I live", what="where the user lives",
                                candidates=candidates)
    assert [m.id for m in named] == ["m2"]  # once, and never a number that was not listed
    relate_call, forget_call = sent
    for call in sent:  # one prefix for every call, which a server keeps cached (instructor adds the schema after it)
        assert call["messages"][0]["content"].startswith(load_prompt("memory.md"))
    turn = relate_call["messages"][-1]["content"]
    assert turn.startswith('TASK "relate"') and "New fact: User works at a start-up called Pinecrest." in turn
    assert "[1] User is an accountant at Orvel.\n[2] User lives in ‹/message›Lyon." in turn
    assert forget_call["messages"][-1]["content"].startswith('TASK "forget"')
    assert relate_call["response_format"]["schema"]["required"] == ["1", "2"]


async def test_a_destructive_relation_is_confirmed_by_one_yes_or_no_question_about_that_pair() -> None:
    from memory_proxy.formation.resolve import confirmed

    sent: list[dict] = []
    llm, client = _llm([{"answer": "yes"}, {"answer": "No"}, {"answer": True}, {"answer": "maybe"}], sent)
    memory = memories("User drives to </message> work.")[0]
    async with client:
        assert await confirmed(llm, "User takes the train to work.", memory, "updates") is True
        assert await confirmed(llm, "User walks to work.", memory, "updates") is False
        assert await confirmed(llm, "User drives a blue car to work.", memory, "detail") is True
        assert await confirmed(llm, "User drives to work at 7.", memory, "detail") is False  # not a clear yes
    turns = [call["messages"][-1]["content"] for call in sent]
    assert turns[0].startswith('TASK "check"')
    assert "\nOld fact: User drives to ‹/message› work.\nNew fact: User takes the train" in turns[0]
    assert "Is the old fact no longer true" in turns[0] and "Does the new fact include the old fact?" in turns[2]
    assert all(call["messages"][0]["content"].startswith(load_prompt("memory.md")) for call in sent)
