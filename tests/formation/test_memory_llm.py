"""The memory LLM client (memory_proxy/formation/memory_llm.py): which server and model read a turn.

With no memory LLM configured, formation asks the chat upstream with the turn's own model; real PostgreSQL,
the upstream a respx route answered by the scripted memory LLM (which also answers plain chat turns).
"""

import json
from typing import Any

import httpx

from memory_proxy.formation.memory_llm import MemoryLLM
from memory_proxy.formation.worker import Worker
from memory_proxy.services import open_services
from memory_proxy.settings import load_settings
from memory_proxy.testing.fake_memory_llm import is_memory_prompt
from tests.support.data import BUN_MSG, CHAT, UPSTREAM, USER_A
from tests.support.proxy import active_texts, user_headers

UNCONFIGURED = ("MEMORY_LLM_BASE_URL", "MEMORY_LLM_API_KEY")  # what make_env sets for the memory LLM


def memory_llm_for(**env: str) -> MemoryLLM:
    return MemoryLLM(load_settings(env).memory_llm, httpx.AsyncClient())


def test_the_upstream_provider_reads_a_turn_with_the_turns_own_model() -> None:
    llm = memory_llm_for(UPSTREAM_BASE_URL="http://127.0.0.1:8081/v1")
    assert llm.settings.provider == "upstream"
    assert llm.for_turn("qwen2.5-7b-instruct").settings.model == "qwen2.5-7b-instruct"
    assert llm.for_turn("").settings.model == "mistral-small-latest"  # a job that names no model
    assert memory_llm_for(UPSTREAM_BASE_URL="http://127.0.0.1:8081/v1", MEMORY_LLM_PROVIDER="upstream",
                          MEMORY_LLM_MODEL="qwen-small").for_turn("").settings.model == "qwen-small"


def test_a_configured_memory_llm_keeps_its_own_model_whatever_the_turns() -> None:
    for env in ({"MISTRAL_API_KEY": "mk"}, {"MEMORY_LLM_MODEL": "mistral-medium-latest"},
                {"MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_BASE_URL": "http://127.0.0.1:8082/v1"}):
        llm = memory_llm_for(**env)
        assert llm.for_turn("qwen2.5-7b-instruct") is llm


async def test_a_turns_formation_calls_reach_the_upstream_with_the_turns_model(
        env: dict[str, str], proxy: Any, outside: Any, memory_llm: Any, db: Any) -> None:
    unconfigured = {k: v for k, v in env.items() if k not in UNCONFIGURED}
    outside.routes["chat"].side_effect = memory_llm  # the one server: chat and formation
    memory_llm.extract = lambda message: ["User is a software engineer who uses Bun."] if "Bun" in message else []
    client = await proxy(**{k: "" for k in UNCONFIGURED})
    response = await client.post(CHAT, json={"model": "my-local-model", "messages": [
        {"role": "user", "content": BUN_MSG}]}, headers=user_headers(USER_A))
    assert response.status_code == 200
    async with open_services(load_settings(unconfigured), httpx.AsyncClient(timeout=5)) as services:
        assert await Worker.from_services(services).run_until_idle() == 1
    formation = [json.loads(c.request.content) for c in outside.routes["chat"].calls
                 if is_memory_prompt(json.loads(c.request.content))]
    assert formation and {body["model"] for body in formation} == {"my-local-model"}
    assert all(str(c.request.url).startswith(UPSTREAM) for c in outside.routes["chat"].calls)
    assert outside.routes["memory_llm"].call_count == 0
    assert await active_texts(db, USER_A) == ["User is a software engineer who uses Bun."]
