"""A database outage as an operator meets it: what each chat turn costs, and whether any job is lost.

    python -m benchmarks.outage [--turns 20]

memory-proxy runs as `serve` against its own PostgreSQL (a pgserver instance of this run, given as
DATABASE_URL, so that the proxy does not restart it) with the fake upstream and embedder of
memory_proxy.testing.fake_upstream. Phases, each of `--turns` sequential streamed turns of one user:

1. database up: the time to the end of each turn (the baseline);
2. the database stopped (its owner stops it): the same, turn by turn — the first turns pay the
   retrieval budget until the breaker opens, then a turn costs about the relay alone;
3. the proxy restarted (SIGTERM, start) while the database is still down, a few more turns;
4. the database started again: every job accepted during the outage must reach `memory_jobs`.

    python -m benchmarks.outage --hang [--turns 30]

The database hangs instead (every postgres process SIGSTOPped: alive but silent, as when overloaded or
partitioned): `--turns` plain and as many streamed turns, each beside the same turn with memory off (no user:
no retrieval, no job), at the default RETRIEVAL_TIMEOUT_MS; then the proxy restarted while the database still
hangs, SIGCONT, and every accepted job counted in `memory_jobs`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import psycopg

from memory_proxy.store.embedded import EmbeddedPostgres
from memory_proxy.testing.asgi import stop_process

from . import servers

USER = "outage-user"
BUDGET_MS = 1500  # RETRIEVAL_TIMEOUT_MS's default


async def turns(server: servers.Server, count: int, label: str, stream: bool = True,
                headers: dict[str, str] | None = None) -> list[float]:
    """Sequential turns; the time of each to the last byte of its reply."""
    seconds = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(count):
            started = time.perf_counter()
            body = {"model": "fake-model", "stream": stream,
                    "messages": [{"role": "user", "content": f"I like topic {label}-{i} and my dog Rex."}]}
            async with client.stream("POST", server.chat_url, json=body,
                                     headers=server.headers if headers is None else headers) as response:
                async for _ in response.aiter_bytes():
                    pass
            assert response.status_code == 200, response.status_code
            seconds.append(time.perf_counter() - started)
    return seconds


def jobs_written(database: EmbeddedPostgres, expected: int, seconds: float = 60) -> int:
    """Jobs of USER in memory_jobs, polled until `expected` or the deadline."""
    deadline = time.monotonic() + seconds
    while True:
        with psycopg.connect(database.uri, autocommit=True) as conn:
            conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
            row = conn.execute("SELECT count(*) FROM memory_jobs WHERE user_id = %s", [USER]).fetchone()
        written = row[0] if row else 0
        if written >= expected or time.monotonic() > deadline:
            return written
        time.sleep(0.5)


def hang(database: EmbeddedPostgres, pgdata: Path, fake: servers.Server, proxy: servers.Server, count: int,
         env: dict[str, str]) -> servers.Server:
    """The --hang run; returns the proxy running at its end (restarted), for the caller to stop."""
    anonymous = {k: v for k, v in proxy.headers.items() if k != "x-openwebui-user-id"}
    asyncio.run(turns(proxy, 3, "warm"))
    postmaster = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))
    stopped = [postmaster, *postmaster.children(recursive=True)]
    for process in stopped:
        process.suspend()
    try:
        print(f"| turn (database hung by SIGSTOP, RETRIEVAL_TIMEOUT_MS={BUDGET_MS}) | memory on | memory off "
              "(same turn, no user) | on − off, worst turn |\n|---|---|---|---|")
        for stream in (False, True):
            on = asyncio.run(turns(proxy, count, f"hung-{stream}", stream))
            off = asyncio.run(turns(proxy, count, f"off-{stream}", stream, headers=anonymous))
            print(f"| {'streamed' if stream else 'plain'}, {count} turns | {ms(on)} (first "
                  f"{on[0] * 1000:.0f} ms) | {ms(off)} | {(max(on) - statistics.median(off)) * 1000:.0f} ms |")
        started = time.perf_counter()
        stop_process(proxy.proc, timeout=30)
        held = len(list(Path(str(proxy.tmpdir), "outbox").glob("*.json")))
        print(f"\nproxy stopped (SIGTERM) while the database hangs, in {time.perf_counter() - started:.1f} s: "
              f"{held} jobs spooled in the data dir")
        proxy = servers.start_memory_proxy(fake, user_id=USER, env={**env, "MEMORY_PROXY_DATA_DIR": str(proxy.tmpdir)},
                                           timeout=60, wait_for="/healthz")
    finally:
        for process in stopped:
            process.resume()
    expected = 3 + 2 * count
    written = jobs_written(database, expected)
    print(f"SIGCONT, proxy restarted: {written} of {expected} accepted jobs in memory_jobs ({expected - written} lost)")
    return proxy


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--hang", action="store_true", help="SIGSTOP the database instead of stopping it")
    args = parser.parse_args(argv)

    pgdata = Path(tempfile.mkdtemp(prefix="outage-pg-")) / "postgres"
    database = EmbeddedPostgres(pgdata)
    fake = servers.start_fake(delay_ms=0)
    env = {"DATABASE_URL": database.uri, "WORKER_IN_PROCESS": "false", "LOG_LEVEL": "error"}
    proxy = servers.start_memory_proxy(fake, user_id=USER, env=env)
    try:
        if args.hang:
            proxy = hang(database, pgdata, fake, proxy, args.turns, env)
            return
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
        database = EmbeddedPostgres(pgdata)  # a stopped instance never restarts itself: a new one starts it
        expected = 2 * args.turns + 3
        written = jobs_written(database, expected, seconds=30)
        print(f"database back: {written} of {expected} accepted jobs in memory_jobs ({expected - written} lost)")
    finally:
        stop_process(proxy.proc)
        stop_process(fake.proc)
        database.stop()


if __name__ == "__main__":
    main()
