"""Profile memory-proxy under load with py-spy: where does the server's CPU go?

    python -m benchmarks.profile [--case anonymous|user|limits|team] [--seconds 15] [--concurrency 16]

Starts the fake upstream and one memory-proxy (case (b) anonymous or (c) a user with 1,000 memories,
as in benchmarks.relay, `limits`: (c) under relay's generous limits on key, user and model, or `team`: that user in 3 teams of 10,000 memories, as in benchmarks.team_relay), runs streaming load for a while, records the proxy with `py-spy record`
(speedscope JSON and a top-functions summary), and prints where the time went: proxy Python frames
(by own time) and the share of server CPU outside the proxy's own process (the embedded PostgreSQL, and the
secret scanner's worker processes).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import servers, team_relay
from .loadgen import run_load
from .relay import BENCH_USER, BODY, GENEROUS, memory_proxy_user_target, seed_memories

PY_SPY = Path(sys.executable).with_name("py-spy")


def top_frames(speedscope: Path, limit: int = 25) -> list[tuple[str, float]]:
    """Own-time share per frame (function @ file:line) from a py-spy speedscope profile."""
    data = json.loads(speedscope.read_text())
    frames = data["shared"]["frames"]
    own: collections.Counter[str] = collections.Counter()
    total = 0.0
    for profile in data["profiles"]:
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            if stack:
                frame = frames[stack[-1]]
                own[f"{frame['name']} ({Path(frame.get('file', '?')).name}:{frame.get('line', 0)})"] += weight
                total += weight
    return [(name, 100 * w / total) for name, w in own.most_common(limit)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["anonymous", "user", "limits", "team"], default="user")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    fake = servers.start_fake(chunks=6, delay_ms=20)
    if args.case == "anonymous":
        proxy = servers.start_memory_proxy(fake)
    elif args.case == "user":
        proxy = memory_proxy_user_target(fake, BENCH_USER, seed_memories)
    elif args.case == "limits":
        proxy = memory_proxy_user_target(fake, BENCH_USER, seed_memories,
                                         env={f"LIMITS_PER_{kind}": GENEROUS for kind in ("KEY", "USER", "MODEL")})
    else:
        proxy = memory_proxy_user_target(fake, BENCH_USER, lambda server: (
            seed_memories(server), team_relay.seed_teams(server, 3, 10_000)))
        team_relay.warm(proxy, 4)
    team_relay.settle(proxy)  # the seeding's wake (index loads, autovacuum's analyse) is not a turn's cost
    out = Path(tempfile.mkdtemp(prefix="mp-profile-")) / f"{args.case}.speedscope.json"
    try:
        recorder = subprocess.Popen([str(PY_SPY), "record", "--pid", str(proxy.proc.pid), "--rate", "250",
                                     "--duration", str(int(args.seconds)), "--format", "speedscope",
                                     "--output", str(out), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stop = threading.Event()
        result = None

        def load() -> None:
            nonlocal result
            result = run_load(proxy.chat_url, proxy.headers, BODY, requests=100_000,
                              concurrency=args.concurrency, time_limit=args.seconds)
            stop.set()

        before = servers.cpu_seconds(proxy)
        pg_before = sum(p.cpu_times().user + p.cpu_times().system for p in proxy.processes()
                        if p.pid != proxy.proc.pid)
        thread = threading.Thread(target=load)
        thread.start()
        thread.join()
        recorder.wait(timeout=args.seconds + 30)
        used = servers.cpu_seconds(proxy) - before
        pg_used = sum(p.cpu_times().user + p.cpu_times().system for p in proxy.processes()
                      if p.pid != proxy.proc.pid) - pg_before
    finally:
        proxy.stop()
        fake.stop()
    assert result is not None
    print(f"case {args.case}, c={args.concurrency}: {result.line()}")
    print(f"server CPU {used * 1000 / result.requests:.2f} ms/request, of which outside the proxy process "
          f"{pg_used * 1000 / result.requests:.2f} ms; profile: {out}")
    print("\nown time by frame (proxy process):")
    for name, share in top_frames(out):
        print(f"{share:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
