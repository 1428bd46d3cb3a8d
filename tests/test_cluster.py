"""benchmarks/cluster at CI size: two `memory-proxy serve` replicas (WORKER_IN_PROCESS=false) and one
`memory-proxy worker`, real processes, on the test's PostgreSQL (through PgBouncer in transaction mode when
it is installed, as CI installs it), with benchmarks.fakes as upstream, embedder and memory LLM. Clients
talk to each replica directly; what a turn injected is read at the fake upstream (GET /seen)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from benchmarks.cluster.client import create_memory, delete_memory, marker, probe, seed, seen, warm
from benchmarks.cluster.cluster import Cluster, Options
from benchmarks.cluster.measures import until_injected
from benchmarks.cluster.parts import PGBOUNCER
from tests.conftest import TEMPLATE_DB


@pytest.fixture(scope="module")
def cluster(pg_server: Any) -> Iterator[Cluster]:
    """One cluster for this module's tests (each uses users of its own), on a migrated database of its own."""
    name = "t_cluster_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    cl = Cluster(Options(replicas=2, workers=1, pgbouncer=PGBOUNCER is not None, nginx=False,
                         database_url=pg_server.get_uri(name)))
    try:
        yield cl.up()
    finally:
        cl.down()
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_a_memory_written_through_one_replica_is_injected_by_the_other_until_deleted_there(
        cluster: Cluster) -> None:
    a, b = cluster.replicas
    user = f"{cluster.run}-ci"
    await seed(cluster.direct, [user])  # enough memories for B to hold them in its in-process index
    async with httpx.AsyncClient(timeout=10) as http:
        assert await warm(http, [b], user), "replica B never searched the user in its index"
        mark = marker()
        memory_id = await create_memory(http, a, user, f"User's code word is {mark}.")
        lag, missed = await until_injected(http, cluster, b, user, mark, time.monotonic(), within=1.0)
        assert lag < 1.0, f"B did not inject A's pinned memory within 1 s ({missed} turns without it)"

        await delete_memory(http, a, user, memory_id, erase=False)
        turn = await probe(http, b.url, user)
        await seen(http, cluster.fake_url, [turn])
        assert turn.ok and mark not in turn.markers


async def test_a_chat_turn_through_one_replica_is_formed_by_the_worker_process(cluster: Cluster) -> None:
    a, b = cluster.replicas
    user, said = f"{cluster.run}-formed", marker()
    async with httpx.AsyncClient(timeout=10) as http:
        turn = await probe(http, b.url, user, f"Please remember that my code word is {said}.")
        assert turn.ok
        async with asyncio.timeout(20):  # the worker's job done: polled, never slept on
            while not cluster.rows("SELECT 1 FROM memory_jobs WHERE user_id = %s AND status = 'done'", [user]):
                await asyncio.sleep(0.05)
        job_id = cluster.rows("SELECT id FROM memory_jobs WHERE user_id = %s", [user])[0][0]
        worker_log = cluster.workers[0].proc.log.read_text()
        assert f'"job_id": {job_id}' in worker_log and '"memory_decision"' in worker_log  # that process did it
        lag, _ = await until_injected(http, cluster, a, user, said, time.monotonic(), within=5.0)
        assert lag < 5.0, "the formed memory was not injected by the other replica"
