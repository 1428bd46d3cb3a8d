"""Memory over a sustained run: does the proxy's resident memory stay flat after warm-up?

    python -m benchmarks.soak [--minutes 10] [--concurrency 16]

Case (c) of benchmarks.relay (a user with 1,000 memories: retrieval, injection, a job per turn) with
its in-process worker on (fake memory LLM), streaming at `--concurrency` for `--minutes`. The proxy
process's RSS is sampled every 10 s; growth is judged from the end of the first minute (warm-up:
pools, caches, prepared statements) to the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import psutil

from . import servers
from .formation import FORMATION_ENV
from .loadgen import run_load
from .relay import BENCH_USER, BODY, seed_memories


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    seconds = args.minutes * 60
    fake = servers.start_fake(chunks=6, delay_ms=20)
    proxy = servers.start_memory_proxy(fake, user_id=BENCH_USER, env=FORMATION_ENV)
    samples: list[tuple[float, float]] = []  # (elapsed s, RSS MiB)
    result = None
    try:
        seed_memories(proxy)
        process = psutil.Process(proxy.proc.pid)

        def load() -> None:
            nonlocal result
            result = run_load(proxy.chat_url, proxy.headers, BODY, requests=10**8,
                              concurrency=args.concurrency, time_limit=seconds)

        started = time.monotonic()
        thread = threading.Thread(target=load)
        thread.start()
        while thread.is_alive():
            samples.append((time.monotonic() - started, process.memory_info().rss / 2**20))
            thread.join(10.0)
    finally:
        proxy.stop()
        fake.stop()
    assert result is not None
    warm = next((rss for t, rss in samples if t >= 60), samples[-1][1])
    end = samples[-1][1]
    print(f"\n{result.line()}")
    print(f"RSS after warm-up (60 s) {warm:.1f} MiB, at the end ({samples[-1][0]:.0f} s) {end:.1f} MiB, "
          f"growth {end - warm:+.1f} MiB ({(end - warm) / warm * 100:+.1f} %); max {max(r for _, r in samples):.1f} MiB")
    print("samples (s: MiB): " + ", ".join(f"{t:.0f}: {rss:.1f}" for t, rss in samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
