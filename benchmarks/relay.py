"""Relay overhead: direct vs memory-proxy vs LiteLLM, side by side in one run, as a Markdown table.

    python -m benchmarks.relay [--quick] [--repeat N] [--no-litellm] [--with-limits]

One fake upstream (6 chunks, 20 ms apart; ``memory_proxy.testing.fake_upstream``) serves every case:

- (a) direct: the load generator talks to the fake itself (the floor);
- (b) memory-proxy, anonymous (no user header: no memory work, a pure relay);
- (c) memory-proxy for a user with 1,000 memories: embedding call (to the fake), per-user search,
      injection of the 5 memories above the 0.8 threshold, and a formation job written per turn. The
      in-process worker is off (WORKER_IN_PROCESS=false) so that only the request path is measured;
      formation has its own benchmark (benchmarks.formation);
- (d) LiteLLM proxy (``benchmarks.servers.LITELLM_VERSION``, its own venv, created if missing);
- with ``--with-limits``, (c′): (c) with generous fair-use limits on its key, its user and its model (GENEROUS:
      never reached, so every request pays the limiter's PostgreSQL call before and after it, docs/LIMITS.md).

Servers run on core 1, this process (the load generator) pins itself to core 0. For each repetition,
each concurrency (1, 16, 64) and each target in turn, it runs a fixed number of streaming requests
(bounded by a time limit too) and reports medians over repetitions of: TTFT p50/p99, total p50, req/s,
errors (summed), server CPU ms per request, and against (a) at the same concurrency: added TTFT p50
in ms and the throughput ratio.

Other cases plug in through ``run_targets(targets, ...)``, which takes any list of started
``servers.Server``; ``memory_proxy_user_target(fake, user_id, seed)`` starts a memory-proxy whose
clients send a user id header and, before it is measured, calls ``seed(server)`` (e.g. to store
1,000 memories for that user).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import servers
from .loadgen import LoadResult, run_load
from .servers import Server

CONCURRENCIES = (1, 16, 64)
FULL_REQUESTS = {1: 100, 16: 800, 64: 2000}
QUICK_REQUESTS = {1: 20, 16: 160, 64: 320}
BODY = {"model": "fake-model", "stream": True,
        "messages": [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "What did I say my favourite programming language was?"}]}


@dataclass
class Cell:
    """One (target, concurrency): the medians over repetitions."""
    target: str
    concurrency: int
    ttft_p50: float
    ttft_p99: float
    total_p50: float
    rps: float
    errors: int
    requests: int
    cpu_ms: float          # server CPU per measured request
    error_kinds: dict[str, int]


def measure(server: Server, concurrency: int, requests: int, time_limit: float,
            body: dict = BODY) -> tuple[LoadResult, float]:
    """One run against ``server``; returns the load result and the server's CPU ms per request."""
    cpu = {}

    def before() -> None:
        cpu["start"] = servers.cpu_seconds(server)

    result = run_load(server.chat_url, server.headers, body, requests=requests, concurrency=concurrency,
                      time_limit=time_limit, before_measure=before)
    used = servers.cpu_seconds(server) - cpu["start"]
    return result, used * 1000 / max(result.requests, 1)


def run_targets(targets: Sequence[Server], concurrencies: Sequence[int] = CONCURRENCIES,
                requests: dict[int, int] | None = None, repeat: int = 1, time_limit: float = 30.0,
                body: dict = BODY, log: Callable[[str], None] = print) -> list[Cell]:
    """Measure every target at every concurrency, ``repeat`` times, interleaved (repetition →
    concurrency → target) so that drift hits all targets alike; return one median ``Cell`` each."""
    requests = requests or FULL_REQUESTS
    runs: dict[tuple[str, int], list[tuple[LoadResult, float]]] = {}
    for rep in range(repeat):
        for c in concurrencies:
            for server in targets:
                result, cpu_ms = measure(server, c, requests.get(c, 100), time_limit, body)
                runs.setdefault((server.name, c), []).append((result, cpu_ms))
                log(f"[{rep + 1}/{repeat}] {server.name:<28} {result.line()}  cpu {cpu_ms:.2f} ms/req")
    cells = []
    for (name, c), rs in runs.items():
        def med(f: Callable[[tuple[LoadResult, float]], float], rs: list = rs) -> float:
            return statistics.median(f(r) for r in rs)
        kinds: dict[str, int] = {}
        for r, _ in rs:
            for k, n in r.error_kinds.items():
                kinds[k] = kinds.get(k, 0) + n
        cells.append(Cell(name, c, med(lambda r: r[0].ttft_p50), med(lambda r: r[0].ttft_p99),
                          med(lambda r: r[0].total_p50), med(lambda r: r[0].rps),
                          sum(r.errors for r, _ in rs), sum(r.requests for r, _ in rs),
                          med(lambda r: r[1]), kinds))
    return cells


def markdown(cells: list[Cell], baseline: str = "direct") -> str:
    """The table; ratios are to ``baseline`` at the same concurrency."""
    base = {c.concurrency: c for c in cells if c.target == baseline}
    lines = [("| c | target | TTFT p50 ms | TTFT p99 ms | total p50 ms | req/s | errors | server CPU ms/req "
              "| +TTFT p50 vs direct (ms) | req/s ÷ direct |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = {name: i for i, name in enumerate(dict.fromkeys(c.target for c in cells))}
    for cell in sorted(cells, key=lambda x: (x.concurrency, order[x.target])):
        b = base.get(cell.concurrency)
        added = "—" if b is None or cell.target == baseline else f"{cell.ttft_p50 - b.ttft_p50:+.1f}"
        ratio = "—" if b is None or cell.target == baseline else f"{cell.rps / b.rps:.2f}"
        errors = f"{cell.errors}/{cell.requests}" + (
            " (" + ", ".join(f"{k}: {n}" for k, n in cell.error_kinds.items()) + ")" if cell.errors else "")
        lines.append(f"| {cell.concurrency} | {cell.target} | {cell.ttft_p50:.1f} | {cell.ttft_p99:.1f} "
                     f"| {cell.total_p50:.1f} | {cell.rps:.0f} | {errors} | {cell.cpu_ms:.2f} "
                     f"| {added} | {ratio} |")
    return "\n".join(lines)


GENEROUS = "rpm=100000000,tpm=100000000000,concurrent=100000,daily_tokens=100000000000"


def memory_proxy_user_target(fake: Server, user_id: str,
                             seed: Callable[[Server], None] | None = None, env: dict[str, str] | None = None) -> Server:
    """A memory-proxy whose clients identify as ``user_id`` (the ``x-openwebui-user-id`` header), so
    every request is a chat turn with retrieval. ``seed(server)``, if given, runs once it is ready
    (its data dir is ``server.tmpdir``), e.g. to store that user's memories."""
    server = servers.start_memory_proxy(fake, user_id=user_id, env={"WORKER_IN_PROCESS": "false", **(env or {})})
    if seed is not None:
        try:
            seed(server)
        except BaseException:
            server.stop()
            raise
    return server


BENCH_USER = "bench-user"
RELEVANT = 5  # memories close to BODY's question (cosine ≈ 0.82 with the fake's vectors)


def seed_memories(server: Server, user_id: str = BENCH_USER, count: int = 1000) -> None:
    """Store ``count`` memories for ``user_id`` in the proxy's embedded PostgreSQL, embedded exactly as
    the fake embeddings endpoint would: ``RELEVANT`` of them match BODY's question, the rest do not."""
    import asyncio

    from memory_proxy.store.database import make_pool
    from memory_proxy.store.memories import add_or_find_memory
    from memory_proxy.testing.fake_upstream import embed

    question = BODY["messages"][-1]["content"]
    texts = [f"{question} It was Rust, note {i}." for i in range(RELEVANT)]
    texts += [f"User fact {i}: enjoys hobby {i % 97} in city {i % 89} with pet {i % 83}." for i in range(count - RELEVANT)]

    async def insert() -> None:
        conninfo = f"postgresql://postgres:@/postgres?host={server.tmpdir}/postgres"
        async with make_pool(conninfo, 1) as pool, pool.connection() as conn:
            for text in texts:
                await add_or_find_memory(conn, user_id=user_id, content=text, embedding=embed(text, 1024),
                                    model="fake-embed")

    asyncio.run(insert())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, short time limit")
    parser.add_argument("--repeat", type=int, help="repetitions, medians reported (default 1 quick, 3 full)")
    parser.add_argument("--no-litellm", action="store_true", help="skip case (d)")
    parser.add_argument("--no-user", action="store_true", help="skip case (c)")
    parser.add_argument("--with-limits", action="store_true", help="add case (c′): (c) under generous limits")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    requests = QUICK_REQUESTS if args.quick else FULL_REQUESTS
    time_limit = 10.0 if args.quick else 30.0

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # load generator on core 0; servers are started on core 1
    if not args.no_litellm:
        servers.install_litellm()

    started: list[Server] = []
    t0 = time.monotonic()
    try:
        fake = servers.start_fake(chunks=6, delay_ms=20)
        started.append(fake)
        targets = [servers.direct_view(fake)]
        targets.append(servers.start_memory_proxy(fake))
        started.append(targets[-1])
        if not args.no_user:
            targets.append(memory_proxy_user_target(fake, BENCH_USER, seed_memories))
            targets[-1].name = "memory-proxy (user, 1,000 memories)"
            started.append(targets[-1])
        if args.with_limits:
            limits = {f"LIMITS_PER_{kind}": GENEROUS for kind in ("KEY", "USER", "MODEL")}
            targets.append(memory_proxy_user_target(fake, BENCH_USER, seed_memories, env=limits))
            targets[-1].name = "memory-proxy (user, 1,000 memories, limits on)"
            started.append(targets[-1])
        if not args.no_litellm:
            targets.append(servers.start_litellm(fake))
            started.append(targets[-1])
        print(f"servers ready in {time.monotonic() - t0:.1f}s; measuring "
              f"{', '.join(t.name for t in targets)} at c={list(CONCURRENCIES)}, repeat={repeat}",
              file=sys.stderr)
        cells = run_targets(targets, CONCURRENCIES, requests, repeat, time_limit,
                            log=lambda s: print(s, file=sys.stderr, flush=True))
    finally:
        for server in reversed(started):
            server.stop()
    print(f"\nUpstream: fake, 6 chunks 20 ms apart; servers on core 1, load generator on core 0; "
          f"medians of {repeat} run(s); requests per run {requests}.\n")
    print(markdown(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
