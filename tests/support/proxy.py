"""Settings for the proxy under test, requests to it, and reading what it stored, counted or sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import psycopg
import respx
from prometheus_client import REGISTRY

from tests.support.data import (
    EMBED_KEY,
    EMBEDDINGS,
    MEMORY_LLM,
    MODEL,
    PROXY_KEY,
    UPSTREAM,
    UPSTREAM_KEY,
    USER_A,
)
from tests.support.fakes import vector_for


def make_env(database_url: str, data_dir: Path, **overrides: str) -> dict[str, str]:
    """The proxy's environment for a test: the test's database, the faked outside world, `overrides`."""
    env = {
        "DATABASE_URL": database_url,
        "MEMORY_PROXY_DATA_DIR": str(data_dir),
        "PROXY_API_KEYS": PROXY_KEY,
        "UPSTREAM_BASE_URL": UPSTREAM,
        "UPSTREAM_API_KEY": UPSTREAM_KEY,
        "EMBEDDING_PROVIDER": "mistral",
        "EMBEDDING_BASE_URL": EMBEDDINGS,
        "EMBEDDING_API_KEY": EMBED_KEY,
        "MEMORY_LLM_BASE_URL": MEMORY_LLM,
        "MEMORY_LLM_API_KEY": "llm-secret-key",
        "WORKER_IN_PROCESS": "false",  # tests drive the worker themselves (await it, never sleep)
        "JOB_RETRY_BASE_SECONDS": "0.01",
        # Tests of thresholds and isolation hold one or two memories per user: search them, as for a user
        # with many (the inject-all rule for few memories is tested on its own in test_retrieval.py).
        "RETRIEVAL_INJECT_ALL_BELOW": "0",
        # Tests of facts see the facts alone; the episodic tier (the user's words kept too) has its own tests,
        # tests/formation/test_episodes.py.
        "EPISODES": "false",
        "LOG_FORMAT": "console",
    }
    env.update(overrides)
    return env


def set_env(env: dict[str, str], monkeypatch: Any) -> None:
    """`env` into this process's environment for the test (as a `memory-proxy` command called in-process reads it)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# ---------------------------------------------------------------- requests

def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": text}], **extra}


def user_headers(user_id: str, **extra: str) -> dict[str, str]:
    return {"x-openwebui-user-id": user_id, **extra}


def sdk(base_url: str, api_key: str, user: str | None = USER_A) -> openai.AsyncOpenAI:
    """The official openai SDK as a client, with OpenWebUI's user header unless `user` is None."""
    headers = user_headers(user) if user else {}
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, default_headers=headers, max_retries=0)


async def collect(stream: Any) -> dict[str, Any]:
    """What a client makes of an SDK stream: text, tool calls, finish reason, usage."""
    text, calls, finish, usage = "", {}, None, None
    async for event in stream:
        if event.usage:
            usage = event.usage.model_dump()
        for choice in event.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    return {"text": text, "calls": calls, "finish": finish, "usage": usage}


# ---------------------------------------------------------------- what the proxy sent, counted, stored

def sent_body(router: respx.MockRouter, name: str = "chat") -> dict[str, Any]:
    """The JSON body of the last request the proxy sent to the faked route `name`."""
    return json.loads(router.routes[name].calls.last.request.content)  # type: ignore[no-any-return]


def system_text(body: dict[str, Any]) -> str:
    """The system messages of a request body, as one text (a list content as its JSON)."""
    return "\n".join(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
                     for m in body["messages"] if m["role"] == "system")


def metric(name: str, **labels: str) -> float:
    """A Prometheus sample's value through the registry's public API (0 before its first observation)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def add_memory(conn: psycopg.AsyncConnection[Any], user_id: str, content: str,
                     model: str = MODEL) -> str:
    """A memory of `user_id` with its fixture vector (vector_for), as the store adds one; its id."""
    from memory_proxy.store.memories import add_or_find_memory

    return await add_or_find_memory(conn, user_id=user_id, content=content, embedding=vector_for(content), model=model)


async def add_with_vector(conn: psycopg.AsyncConnection[Any], text: str, vector: list[float],
                          user: str = USER_A) -> str:
    """A memory with a vector of the test's choosing (see fakes.basis); its id."""
    from memory_proxy.store.memories import add_or_find_memory

    return await add_or_find_memory(conn, user_id=user, content=text, embedding=vector, model=MODEL)


async def fillers(conn: psycopg.AsyncConnection[Any], user: str, n: int = 6) -> None:
    """`n` memories unrelated to any query: a user with enough memories to be searched, not injected whole."""
    for i in range(n):
        await add_memory(conn, user, f"User filler fact number {i} about nothing.")


async def active_texts(conn: psycopg.AsyncConnection[Any], user_id: str) -> list[str]:
    """The texts of `user_id`'s current (not superseded) memories, sorted."""
    cur = await conn.execute("SELECT v.content FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                             " WHERE uv.user_id = %s AND uv.superseded_at IS NULL ORDER BY v.content", [user_id])
    return [row[0] for row in await cur.fetchall()]


def job_states(database_url: str) -> dict[str, int]:
    """How many formation jobs are in each status (a blocking read, for tests of whole processes)."""
    with psycopg.connect(database_url) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM memory_jobs GROUP BY status").fetchall())
