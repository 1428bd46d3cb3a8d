"""A database outage as an operator meets it: what each chat turn costs, and whether any job is lost.

    python -m benchmarks.outage [--turns 20]

memory-proxy runs as `serve` against its own PostgreSQL (a pgserver instance of this run, given as
DATABASE_URL, so that the proxy does not restart it) with the fake upstream and embedder of
benchmarks.fakes. Phases, each of `--turns` sequential streamed turns of one user:

1. database up: the time to the end of each turn (the baseline);
2. the database stopped (pg_ctl stop -m immediate): the same, turn by turn — the first turns pay the
   retrieval budget until the breaker opens, then a turn costs about the relay alone;
3. the proxy restarted (SIGTERM, start) while the database is still down, a few more turns;
4. the database started again: every job accepted during the outage must reach `memory_jobs`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from proxy.store.embedded import EmbeddedPostgres

from . import servers
from .fakes import stop_process

USER = "outage-user"


async def turns(server: servers.Server, count: int, label: str) -> list[float]:
    seconds = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(count):
            started = time.perf_counter()
            body = {"model": "fake-model", "stream": True,
                    "messages": [{"role": "user", "content": f"I like topic {label}-{i} and my dog Rex."}]}
            async with client.stream("POST", server.chat_url, json=body, headers=server.headers) as response:
                async for _ in response.aiter_bytes():
                    pass
            assert response.status_code == 200, response.status_code
            seconds.append(time.perf_counter() - started)
    return seconds


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args(argv)

    database = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="outage-pg-")) / "postgres")
    fake = servers.start_fake(delay_ms=0)
    env = {"DATABASE_URL": database.uri, "WORKER_IN_PROCESS": "false", "LOG_LEVEL": "error"}
    proxy = servers.start_memory_proxy(fake, user_id=USER, env=env)
    try:
        up = asyncio.run(turns(proxy, args.turns, "up"))
        print(f"database up:      {ms(up)}")
        database.stop()
        down = asyncio.run(turns(proxy, args.turns, "down"))
        print(f"database down:    first 3 turns {[round(s * 1000) for s in down[:3]]} ms; "
              f"after the breaker opened {ms(down[3:])}")
        proxy.proc.terminate()
        proxy.proc.wait(60)
        data_dir = proxy.tmpdir
        held = len(list(Path(data_dir, "outbox").glob("*.json")))
        print(f"proxy stopped during the outage: {held} jobs spooled in the data dir")
        restarted = servers.start_memory_proxy(fake, user_id=USER, env={**env, "MEMORY_PROXY_DATA_DIR": data_dir},
                                               timeout=60, wait_for="/healthz")
        proxy = restarted
        after = asyncio.run(turns(proxy, 3, "restarted"))
        print(f"restarted, still down: {ms(after)}")
        database.restart_if_stopped()
        expected = 2 * args.turns + 3
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(database.uri, autocommit=True) as conn:
                conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
                written = conn.execute("SELECT count(*) FROM memory_jobs WHERE user_id = %s", [USER]).fetchone()
            if (written and written[0] >= expected) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print(f"database back: {written[0] if written else 0} of {expected} accepted jobs in memory_jobs "
              f"({expected - (written[0] if written else 0)} lost)")
    finally:
        stop_process(proxy.proc)
        stop_process(fake.proc)
        database.stop()


if __name__ == "__main__":
    main()
