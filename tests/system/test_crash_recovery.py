"""SIGKILL the proxy while formation jobs are queued and running: after a restart all of them
complete, once each. The proxy runs as a real `memory-proxy serve` process; the upstream, embeddings
and memory LLM are one fake HTTP server in the test process."""

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM, asgi_app
from tests.support.data import BUN_MSG, PROXY_KEY
from tests.support.fakes import bun_llm, embeddings_reply, vector_for
from tests.support.proxy import job_states
from tests.support.servers import (
    free_port,
    proxy_command,
    restart_until_done,
    served,
    start_proxy,
    stop_process,
    until,
    wait_ready,
)

pytestmark = pytest.mark.slow

USERS = [f"user-{i}" for i in range(6)]


@pytest.fixture
async def fake_outside() -> AsyncIterator[tuple[str, FakeMemoryLLM]]:
    """The upstream, embeddings and memory LLM (which extracts BUN) as one fake HTTP server in this process."""
    llm = bun_llm()
    async with served(asgi_app(llm, embeddings_reply), lifespan="off") as url:
        try:
            yield f"{url}/v1", llm
        finally:
            if llm.hang:
                llm.hang.set()  # let any held request end, or the server would wait for it forever


async def test_sigkill_with_jobs_queued_and_running(database_url: str, tmp_path: Path,
                                                    fake_outside: tuple[str, FakeMemoryLLM]) -> None:
    fake_url, llm = fake_outside
    llm.hang = asyncio.Event()  # the first proxy's LLM calls never return: its jobs stay running
    env = {"DATABASE_URL": database_url, "MEMORY_PROXY_DATA_DIR": str(tmp_path), "PROXY_API_KEYS": PROXY_KEY,
           "UPSTREAM_BASE_URL": fake_url, "UPSTREAM_API_KEY": "x", "EMBEDDING_BASE_URL": fake_url,
           "MEMORY_LLM_BASE_URL": fake_url, "WORKER_CONCURRENCY": "2", "JOB_LEASE_SECONDS": "1",
           "LOG_LEVEL": "info"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = start_proxy(env, port)
    try:
        await wait_ready(base, first)
        async with httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {PROXY_KEY}"}) as client:
            for user in USERS:
                response = await client.post("/v1/chat/completions", headers={"x-openwebui-user-id": user},
                                             json={"model": "m", "messages": [{"role": "user", "content": BUN_MSG}]})
                assert response.status_code == 200  # accepted: from here on the job must not be lost
        await until(lambda: job_states(database_url) == {"queued": 4, "running": 2}, 20, interval=0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert job_states(database_url) == {"queued": 4, "running": 2}

    returncode, output = await restart_until_done(env, port, base, database_url, llm, done=6)
    # graceful stop (uvicorn re-raises the SIGTERM it handled, hence -15)
    assert returncode in (0, -signal.SIGTERM) and '"event": "stopped"' in output, output

    with psycopg.connect(database_url) as conn:
        per_user = conn.execute("SELECT user_id, count(*) FROM users_vectors GROUP BY user_id").fetchall()
        vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
        attempts = sorted(r[0] for r in conn.execute("SELECT attempts FROM memory_jobs").fetchall())
    # every job applied, none twice: its fact and its episode (the user's words, EPISODES on by default)
    assert sorted(per_user) == [(user, 2) for user in USERS]
    assert vectors == 12  # and no orphan vector from a half-done job
    assert attempts == [1, 1, 1, 1, 2, 2]  # the two running jobs were taken over after their lease
    assert output.count('"memory_decision"') == 6 and output.count('"status": "done"') == 6


async def test_a_separate_worker_process_drains_the_queue_and_stops_cleanly(
        database_url: str, tmp_path: Path, fake_outside: tuple[str, FakeMemoryLLM]) -> None:
    from datetime import UTC, datetime

    from memory_proxy.job_payload import FormationPayload
    from memory_proxy.store import jobs
    from memory_proxy.store.database import make_pool

    fake_url, _ = fake_outside
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        for user in USERS[:3]:
            await jobs.enqueue(conn, user_id=user, said_at=datetime.now(UTC), payload=FormationPayload(BUN_MSG))
    env = {**os.environ, "DATABASE_URL": database_url, "MEMORY_PROXY_DATA_DIR": str(tmp_path),
           "EMBEDDING_BASE_URL": fake_url, "MEMORY_LLM_BASE_URL": fake_url, "MISTRAL_API_KEY": "x"}
    process = proxy_command("worker", env=env)
    try:
        await until(lambda: job_states(database_url) == {"done": 3}, 30, interval=0.05)
    finally:
        output = stop_process(process)
    assert process.returncode == 0, output
    assert '"event": "worker_started"' in output and output.count('"memory_decision"') == 3


async def test_a_standalone_worker_runs_the_scheduled_maintenance(
        database_url: str, tmp_path: Path, fake_outside: tuple[str, FakeMemoryLLM]) -> None:
    """`memory-proxy worker` built its Worker without the maintenance settings, so only `serve`'s
    in-process worker ever ran the schedule the README promises."""
    from datetime import UTC, datetime, timedelta

    from memory_proxy.records import FactAttributes
    from memory_proxy.store import memories
    from memory_proxy.store.database import make_pool

    fake_url, _ = fake_outside
    text = "User has a cold today."
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        expired = await memories.add_or_find_memory(
            conn, user_id=USERS[0], content=text, embedding=vector_for(text), model="mistral-embed",
            attributes=FactAttributes(memory_type="temporary", expires_at=datetime.now(UTC) - timedelta(days=1)))

    def retired() -> bool:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT superseded_at FROM users_vectors WHERE vector_id = %s", [expired]).fetchone()
        return row is not None and row[0] is not None

    env = {**os.environ, "DATABASE_URL": database_url, "MEMORY_PROXY_DATA_DIR": str(tmp_path),
           "EMBEDDING_BASE_URL": fake_url, "MEMORY_LLM_BASE_URL": fake_url, "MISTRAL_API_KEY": "x",
           "MAINTENANCE_INTERVAL_SECONDS": "1"}
    process = proxy_command("worker", env=env)
    try:
        await until(retired, 30, interval=0.05)
    finally:
        output = stop_process(process)
    assert process.returncode == 0, output
