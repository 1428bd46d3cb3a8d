"""Formation throughput and queue depth under sustained chat load.

    python -m benchmarks.formation [--jobs 1000] [--seconds 60] [--concurrency 8]

Against an instant fake memory LLM and embedder (memory_proxy.testing.fake_upstream, JSON mode: one fact per message,
in the user's words, so it is kept and resolved against the user's neighbours):

1. Throughput: `--jobs` jobs (20 users, distinct messages; one LLM call each) are written to the queue, then one `memory-proxy worker` (pinned to core 1)
   drains it; jobs/s = jobs / time from the first job finished to the last (start-up excluded).
2. Sustained load: a memory-proxy with its in-process worker serves streaming chat turns of 20
   identified users at `--concurrency` for `--seconds` (each turn writes a job); the queue depth is
   sampled every second. Bounded means it stays near the worker's concurrency instead of growing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime

import psycopg

from . import servers
from .loadgen import run_load
from .relay import BODY

USERS = 20
FORMATION_ENV = {"MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_MODE": "json", "WORKER_CONCURRENCY": "4"}


def conninfo(server: servers.Server) -> str:
    return f"postgresql://postgres:@/postgres?host={server.tmpdir}/postgres"


def queue_depth(server: servers.Server) -> dict[str, int]:
    with psycopg.connect(conninfo(server)) as conn:
        rows = conn.execute("SELECT status, count(*) FROM memory_jobs GROUP BY status").fetchall()
    return {status: int(count) for status, count in rows}


def enqueue_jobs(server: servers.Server, count: int) -> None:
    from memory_proxy.job_payload import FormationPayload
    from memory_proxy.store import jobs
    from memory_proxy.store.database import make_pool

    async def insert() -> None:
        async with make_pool(conninfo(server), 1) as pool, pool.connection() as conn:
            for i in range(count):
                await jobs.enqueue(conn, user_id=f"user-{i % USERS}", said_at=datetime.now(UTC),
                                   payload=FormationPayload(f"I like topic {i} and hobby {i * 7 % 101}"))

    asyncio.run(insert())


def throughput(fake: servers.Server, count: int) -> tuple[float, float]:
    """(jobs/s between the first and the last job finished, wall seconds including start-up) for one
    separate worker process draining `count` queued jobs."""
    proxy = servers.start_memory_proxy(fake, env={**FORMATION_ENV, "WORKER_IN_PROCESS": "false"})
    worker = None
    try:
        enqueue_jobs(proxy, count)
        env = {**os.environ, "DATABASE_URL": conninfo(proxy), "MEMORY_PROXY_DATA_DIR": proxy.tmpdir or "",
               "EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": fake.base_url, "EMBEDDING_MODEL": "fake-embed",
               "MEMORY_LLM_BASE_URL": fake.base_url, "MEMORY_LLM_API_KEY": "x", "LOG_LEVEL": "warning",
               **FORMATION_ENV}
        started = time.monotonic()
        import subprocess
        worker = subprocess.Popen(["taskset", "-c", str(servers.SERVER_CORE), str(servers.PROXY_BIN), "worker"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = started + 600
        while queue_depth(proxy).get("done", 0) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"queue not drained: {queue_depth(proxy)}")
            time.sleep(0.2)
        with psycopg.connect(conninfo(proxy)) as conn:  # from the first job finished to the last:
            span = conn.execute(  # worker start-up is not formation work
                "SELECT extract(epoch FROM max(finished_at) - min(finished_at)) FROM memory_jobs").fetchone()[0]
        return (count - 1) / float(span), time.monotonic() - started
    finally:
        if worker:
            worker.terminate()
            worker.wait(30)
        proxy.stop()


def sustained(fake: servers.Server, seconds: float, concurrency: int) -> tuple[list[int], float, int]:
    """Queue depth samples (queued + running, once a second), chat req/s, jobs done."""
    proxy = servers.start_memory_proxy(fake, user_id="user-0", env=FORMATION_ENV)
    samples: list[int] = []
    result = None
    try:
        def load() -> None:
            nonlocal result
            result = run_load(proxy.chat_url, proxy.headers, BODY, requests=10**7,
                              concurrency=concurrency, time_limit=seconds)

        thread = threading.Thread(target=load)
        thread.start()
        while thread.is_alive():
            depth = queue_depth(proxy)
            samples.append(depth.get("queued", 0) + depth.get("running", 0))
            time.sleep(1.0)
        done = queue_depth(proxy).get("done", 0)
    finally:
        proxy.stop()
    assert result is not None
    return samples, result.rps, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    fake = servers.start_fake(chunks=6, delay_ms=20)
    try:
        rate, elapsed = throughput(fake, args.jobs)
        samples, rps, done = sustained(fake, args.seconds, args.concurrency)
    finally:
        fake.stop()
    print(f"\nthroughput: {args.jobs} jobs drained by one worker (concurrency 4) at {rate:.0f} jobs/s "
          f"(first to last job finished; {elapsed:.1f} s wall with worker start-up)")
    quarter = max(len(samples) // 4, 1)
    print(f"sustained: {rps:.0f} chat turns/s for {args.seconds:.0f} s at c={args.concurrency}; {done} jobs done; "
          f"queue depth (queued+running) median {statistics.median(samples):.0f}, max {max(samples)}, "
          f"first quarter max {max(samples[:quarter])}, last quarter max {max(samples[-quarter:])}")
    print("depth samples: " + " ".join(map(str, samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
