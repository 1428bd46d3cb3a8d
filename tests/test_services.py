"""The long-lived resources (memory_proxy/services.py): the embedded database kept running, and the breaker that
stops a down database from costing every chat turn its whole retrieval budget."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from litestar.testing import AsyncTestClient

from memory_proxy.breaker import Breaker
from memory_proxy.chat.outbox import Outbox
from memory_proxy.services import open_services
from memory_proxy.settings import load_settings
from memory_proxy.store.embedded import EmbeddedPostgres
from tests.support.data import CHAT, PROXY_KEY, USER_A
from tests.support.fakes import chunk, completion, sse
from tests.support.proxy import chat_body, make_env, metric, user_headers
from tests.support.servers import running

pytestmark = pytest.mark.slow


async def test_a_killed_embedded_database_is_started_again(tmp_path: Path) -> None:
    """SIGKILL to the embedded postmaster: nothing restarted it, and only a proxy restart (which lost the
    held jobs) brought memory back. Now the supervisor starts it again and says so."""
    settings = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path), "PROXY_API_KEYS": PROXY_KEY,
                              "EMBEDDING_PROVIDER": "local"})
    restarted = metric("memory_proxy_database_restarts_total", outcome="restarted")
    async with open_services(settings) as services:
        pid = int((tmp_path / "postgres" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(60):  # the supervisor looks every second; backends take a moment to go
            while metric("memory_proxy_database_restarts_total", outcome="restarted") == restarted:
                await asyncio.sleep(0.2)
            while True:
                try:
                    async with services.pool.connection() as conn:
                        await conn.execute("SELECT 1")
                    break
                except psycopg.Error:
                    await asyncio.sleep(0.2)
        restarted_pid = int((tmp_path / "postgres" / "postmaster.pid").read_text().split()[0])
        assert restarted_pid != pid
    # the restarted postmaster is stopped with the proxy too (it was left running: an orphan)
    assert not running(restarted_pid), f"the restarted postmaster {restarted_pid} outlived the proxy"


async def test_a_stop_during_a_restart_leaves_no_postmaster_running(tmp_path: Path) -> None:
    """SIGTERM while the supervisor is starting the postmaster again: the stop waits for that start, then
    stops what it started (it stopped the dead one and left the new one running, an orphan)."""
    embedded = await asyncio.to_thread(EmbeddedPostgres, tmp_path / "postgres")
    pid = int((tmp_path / "postgres" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    async with asyncio.timeout(30):  # gone, not a zombie: PostgreSQL takes a zombie's pid file for a live server
        while psutil.pid_exists(pid):
            await asyncio.sleep(0.05)
    restart = asyncio.create_task(asyncio.to_thread(embedded.restart_if_stopped))
    async with asyncio.timeout(10):  # the restart is under way (pg_ctl start takes a second or two)
        while not embedded._turn.locked():
            await asyncio.sleep(0.001)
    await asyncio.to_thread(embedded.stop)
    assert await restart is True
    started = int((tmp_path / "postgres" / "postmaster.pid").read_text().split()[0]) \
        if (tmp_path / "postgres" / "postmaster.pid").exists() else None
    assert started is None or not running(started), f"postmaster {started} outlived the stop"
    assert await asyncio.to_thread(embedded.restart_if_stopped) is False  # never again once stopped


BUDGET_MS = 500
# A bound against the flaw these tests guard against (a turn waited 10-13 s for a hung database), far enough
# from the budget that a busy machine does not fail it.
SLACK_S = 5.0


def database_processes(pgdata: Path) -> list[psutil.Process]:
    postmaster = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


async def test_a_hung_database_costs_a_turn_at_most_its_retrieval_budget(
        tmp_path: Path, outside: Any, app_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process of the database stopped (SIGSTOP: alive but silent, as when overloaded or partitioned).
    Each turn, the first included, plain or streamed, ends within RETRIEVAL_TIMEOUT_MS (+ slack): psycopg's
    cancellation of a timed-out query waited up to 10 s more, and the job write 2 s more before the reply
    ended (counted here, not timed: every turn while the database is stopped holds its job at once, never
    trying the write). The turns' jobs are spooled, and written once the database answers again."""
    holds: list[bool] = []
    put = Outbox.put

    async def put_recorded(self: Outbox, job: Any, *, hold: bool = False) -> None:
        holds.append(hold)
        await put(self, job, hold=hold)

    monkeypatch.setattr(Outbox, "put", put_recorded)

    def streamed_or_not(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=b"".join(sse(chunk({"content": "Hi"}), chunk({}, "stop"))))
        return httpx.Response(200, json=completion())

    outside.routes["chat"].mock(side_effect=streamed_or_not)
    embedded = await asyncio.to_thread(EmbeddedPostgres, tmp_path / "postgres")
    try:
        settings = load_settings(make_env(embedded.uri, tmp_path / "data", RETRIEVAL_TIMEOUT_MS=str(BUDGET_MS)))
        async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as client:
            client.headers["authorization"] = f"Bearer {PROXY_KEY}"
            async with asyncio.timeout(30):
                while (await client.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.05)
            assert (await client.post(CHAT, json=chat_body("I live in Lyon."), headers=user_headers(USER_A))
                    ).status_code == 200
            stopped = database_processes(tmp_path / "postgres")
            holds.clear()
            for process in stopped:
                process.suspend()
            took = []
            try:
                for i in range(6):
                    started = time.perf_counter()
                    response = await client.post(CHAT, json=chat_body(f"I have {i + 2} cats.", stream=i % 2 == 1),
                                                 headers=user_headers(USER_A))
                    assert response.status_code == 200 and (b"[DONE]" in response.content) == (i % 2 == 1)
                    took.append(time.perf_counter() - started)
            finally:
                for process in stopped:
                    process.resume()
            assert max(took) < BUDGET_MS / 1000 + SLACK_S, [round(t, 2) for t in took]
            assert holds == [True] * 6  # no turn waited out a job write to the stopped database
            async with asyncio.timeout(60):  # the held jobs are written once the database answers
                while await job_count(embedded.uri) < 7:
                    await asyncio.sleep(0.1)
            assert await job_count(embedded.uri) == 7
    finally:
        await asyncio.to_thread(embedded.stop)


async def test_a_black_holed_database_port_costs_turns_nothing(tmp_path: Path, outside: Any, app_factory: Any) -> None:
    """An external DATABASE_URL whose port takes connections and never answers (a black hole, a partition):
    the proxy starts, relays every turn without memory at once, and holds the jobs on disk."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # the kernel completes the handshakes; nobody ever reads
    url = f"postgresql://postgres@127.0.0.1:{hole.getsockname()[1]}/postgres"
    try:
        settings = load_settings(make_env(url, tmp_path, RETRIEVAL_TIMEOUT_MS=str(BUDGET_MS)))
        async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as client:
            client.headers["authorization"] = f"Bearer {PROXY_KEY}"
            for i in range(4):
                started = time.perf_counter()
                response = await client.post(CHAT, json=chat_body(f"I have {i + 2} cats."), headers=user_headers(USER_A))
                assert response.status_code == 200
                assert time.perf_counter() - started < BUDGET_MS / 1000 + SLACK_S
            assert (await client.get("/readyz")).status_code == 503
        assert len(list((tmp_path / "outbox").glob("*.json"))) == 4  # spooled: a restart will write them
    finally:
        hole.close()


async def job_count(uri: str) -> int:
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        return int((await (await conn.execute("SELECT count(*) FROM memory_jobs")).fetchone())[0])


async def test_after_repeated_database_failures_turns_skip_the_memory_side(
        client: Any, outside: Any, pg_server: Any, database_url: str) -> None:
    name = database_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    tried = metric("memory_proxy_fail_open_total", reason="database_error") + metric(
        "memory_proxy_fail_open_total", reason="database_timeout")
    skipped = metric("memory_proxy_fail_open_total", reason="breaker_open")
    for _ in range(6):
        response = await client.post(CHAT, json=chat_body("Where do I live?"), headers=user_headers(USER_A))
        assert response.status_code == 200  # chat goes on, without memory
    after = metric("memory_proxy_fail_open_total", reason="database_error") + metric(
        "memory_proxy_fail_open_total", reason="database_timeout")
    assert after - tried == Breaker().threshold  # three turns tried the database …
    assert metric("memory_proxy_fail_open_total", reason="breaker_open") - skipped == 3  # … the others did not


async def test_with_the_local_embedder_held_indexes_rank_by_late_interaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EMBEDDING_PROVIDER=local: the index a turn searches holds its memories' word states, and a query
    brings its own, so the late-interaction arm (retrieval/late_interaction.py) runs in the fusion."""
    from memory_proxy.embedding.memory_document import embedding_text
    from memory_proxy.retrieval.indexes import UserIndex
    from memory_proxy.retrieval.retrieve import retrieve_memories
    from memory_proxy.store.memories import add_memory

    settings = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path), "PROXY_API_KEYS": PROXY_KEY,
                              "EMBEDDING_PROVIDER": "local"})
    facts = ["User's daughter plays the cello.", "User bought a red bicycle.", "User works night shifts.",
             "User is allergic to cats.", "User grows tomatoes on the balcony.", "User reads Russian novels."]
    async with open_services(settings, search_index=True) as services:
        async with asyncio.timeout(30):
            while not services.indexes.listening:
                await asyncio.sleep(0.01)
        vectors = await services.embedder.embed([embedding_text(f, datetime.now(UTC)) for f in facts])
        async with services.pool.connection() as conn:
            for fact, vector in zip(facts, vectors, strict=True):
                await add_memory(conn, user_id=USER_A, content=fact, embedding=vector, model=services.embedder.model)
        await services.indexes.caught_up()
        held = await services.indexes.ready(USER_A)
        assert held is not None and all(t is not None and len(t.codes) > 3 for t in held.tokens)
        searched: list[Any] = []
        search = UserIndex.search
        monkeypatch.setattr(UserIndex, "search", lambda self, *a, **k: searched.append(s := search(self, *a, **k)) or s)
        found = await retrieve_memories(pool=services.pool, embedder=services.embedder, user_id=USER_A,
                                        query="What instrument does my kid play?", settings=settings.retrieval,
                                        indexes=services.indexes)
        assert searched[-1].late_weight == settings.retrieval.ranking.late_weight == 8.0
        assert found[0].content == facts[0]
