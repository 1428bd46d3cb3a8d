"""Can one request stall everybody? Latency of /healthz and of another user's chat turn, quiet and while
each of the worst inputs we know runs.

    python -m benchmarks.stall [--seconds 8] [--cases NAME,...] [--core 1 | --core none]
    python -m benchmarks.stall --quick                     # 4 s a case
    python -m benchmarks.stall --cases key_flood_compose --repeat 3   # probes of three floods pooled

Setup. `memory-proxy serve` (WORKER_IN_PROCESS=true, the default: formation runs in the serving process)
on a fresh data dir with its own embedded PostgreSQL, upstream, embedder and memory LLM the fake of
memory_proxy.testing.fake_upstream; proxy, PostgreSQL and fake pinned to `--core` (default 1, as benchmarks.servers does:
the proxy's secret-scan worker processes inherit it, so they share that core with the event loop), this
load generator on the other.

Probes, each sequential, all through the run, from a process of their own (`probing`): GET /healthz every
20 ms, and a non-streamed one-line chat turn of user `probe-user` every 100 ms (it retrieves, relays and enqueues its own formation job).
A case runs its attack in a loop for `--seconds` (then waits for the formation jobs it caused to be
done, probing on); the table gives, per case and probe, p50 / p99 / max and what each adds to the
quiet run's. Target: at most 50 ms added at p99. With `--repeat N` each case runs N times and its probes are
pooled (the quiet run lasts N times as long): a p99 of one run's ~150 chat probes is their second slowest, decided
by a single slow turn.

Cases (the first four are the attack run's findings; the rest the worst input found per slow rule):
- api_256k: POST /api/v1/memories with 256 KB of AWS credential-file text;
- api_2k_generic: the same route, 2 KB of Docker `auths` JSON (generic-api-key's per-scan filter cost);
- reason_128k: PATCH an edit with a 128 KB reason;
- turns_16x16k: 16 users at once, each a streamed turn of 16,000 characters of credential-file text;
  turns_16x16k_plain: the same with plain words (no secret, no keyword): what such turns cost anyway;
- facts_40: turns whose memory-LLM reply is 40 facts of 24 words full of names no text holds, after a
  16,000-character message of distinct words (grounding's near-spelling match over every word);
- rule_aws_ids / rule_pem_headers / rule_docker_auths: 4 users at once, streamed turns of 16,000
  characters of AWS key ids, PEM headers without END, Docker auth lines;
- key_flood / key_flood_compose / key_flood_unlimited (issue 52, docs/LIMITS.md): one API key of its own (FLOOD_KEY,
  beside the probes' key) sends 1,000 streamed chat turns, 64 at once, from 64 users; `key_flood` with that key's
  own limits set first through the API (FLOOD_LIMITS: the flood gets 429s), `key_flood_compose` with the limits
  docker-compose.yml gives each user (`compose_limits`), `key_flood_unlimited` with them removed.

The machine is shared: figures taken while other work runs are noisy; run it on a quiet machine for
the record.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from memory_proxy.limits.limiter import key_id
from memory_proxy.settings.limits_settings import limit_values
from memory_proxy.testing.fake_upstream import MANY_FACTS

from . import servers
from .flood import conninfo

PROBE_USER = "probe-user"
HEALTH_EVERY_S = 0.02
CHAT_EVERY_S = 0.1
DRAIN_MAX_S = 120.0
DRAIN_POLL_S = 0.5
TARGET_MS = 50.0
PROBES_START_S = 1.5

AWS_FILE = "[default]\naws_access_key_id = AKIAZ7QW3RTY5UIOP2LK\naws_secret_access_key = 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\n"
DOCKER_AUTH = '{"auths":{"https://index.docker.io/v1/":{"auth":"dXNlcjpwYXNzd29yZA=="}}}\n'
AWS_IDS = "aws_access_key_id = AKIAZ7QW3RTY5UIOP2LK\n"
PEM_HEADER = "-----BEGIN RSA PRIVATE KEY-----\n"
FLOOD_KEY = "bench-flood-key-0123456789abcdef"
COMPOSE_KEY = "bench-flood-key-compose-0123456"  # its own: the minute FLOOD_KEY's case used is not counted against it
FLOOD_TURNS, FLOOD_AT_ONCE = 1000, 64
FLOOD_LIMITS = {"rpm": 120, "concurrent": 8}


def compose_limits() -> dict[str, int]:
    """The limits docker-compose.yml gives each user (its default of LIMITS_PER_USER)."""
    found = re.search(r"LIMITS_PER_USER:-([^}]*)\}", (Path(__file__).parents[1] / "docker-compose.yml").read_text())
    assert found, "docker-compose.yml no longer sets LIMITS_PER_USER"
    return limit_values(found.group(1))


def filled(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def distinct_words(size: int) -> str:
    words, i = [], 0
    while sum(len(w) + 1 for w in words) < size:
        words.append(f"w{i:05d}{'abcdefghij'[i % 10]}ord")
        i += 1
    return " ".join(words)[:size]


@dataclass
class Probes:
    health: list[float] = field(default_factory=list)
    chat: list[float] = field(default_factory=list)
    failed: int = 0


def repeated(key: str, repetition: int) -> str:
    """The API key of one repetition of a flood: a key of its own, whose minute no earlier repetition spent."""
    return key if repetition == 0 else f"{key}-{repetition}"


class Run:
    def __init__(self, server: servers.Server) -> None:
        self.server = server
        self.repetition = 0
        self.base = server.base_url.removesuffix("/v1")
        self.client = httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {servers.PROXY_KEY}"},
                                        limits=httpx.Limits(max_connections=200))
        self.counts: dict[str, int] = {}

    def user(self, name: str) -> dict[str, str]:
        return {"x-openwebui-user-id": name}

    async def turn(self, user: str, text: str, stream: bool = True) -> int:
        body = {"model": "fake-model", "stream": stream, "messages": [{"role": "user", "content": text}]}
        async with self.client.stream("POST", self.server.chat_url, json=body, headers=self.user(user)) as reply:
            async for _ in reply.aiter_bytes():
                pass
        return reply.status_code

    def count(self, status: int) -> None:
        self.counts[str(status)] = self.counts.get(str(status), 0) + 1

    async def open_jobs(self) -> int:
        async with await psycopg.AsyncConnection.connect(conninfo(self.server)) as conn:
            row = await (await conn.execute(
                "SELECT count(*) FROM memory_jobs WHERE status IN ('queued', 'running')")).fetchone()
        return int(row[0]) if row else 0


# ---------------------------------------------------------------- probes, in a process of their own

def probing(base: str, chat_url: str, stop: Any, results: Any) -> None:
    """The probes until `stop` is set, then their figures sent on `results`. In a process of their own: in the
    attack's event loop (64 streams at once, a thousand 429s) the probes' own timing waited on the client, and a
    turn the server answered in 10 ms could be recorded as 150."""
    probes = Probes()

    async def main() -> None:
        async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {servers.PROXY_KEY}"}) as client:
            def record(into: list[float], started: float, ok: bool) -> None:
                into.append((time.perf_counter() - started) * 1000)
                probes.failed += not ok

            async def health() -> None:
                while not stop.is_set():
                    started = time.perf_counter()
                    record(probes.health, started, (await client.get(base + "/healthz")).status_code == 200)
                    await asyncio.sleep(HEALTH_EVERY_S)

            async def chat() -> None:
                n = 0
                while not stop.is_set():
                    started = time.perf_counter()
                    body = {"model": "fake-model", "stream": False,
                            "messages": [{"role": "user", "content": f"I water my fern every {n % 7 + 2} days."}]}
                    reply = await client.post(chat_url, json=body, headers={"x-openwebui-user-id": PROBE_USER})
                    record(probes.chat, started, reply.status_code == 200)
                    n += 1
                    await asyncio.sleep(CHAT_EVERY_S)

            await asyncio.gather(health(), chat())

    asyncio.run(main())
    results.send(probes)


class Probing:
    """The probes' process, for one measurement: started (and through its first probes) on entry, stopped on exit."""

    def __init__(self, run: Run) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results, sending = context.Pipe(duplex=False)
        self._process = context.Process(target=probing, args=(run.base, run.server.chat_url, self._stop, sending))
        self.probes = Probes()

    async def __aenter__(self) -> Probing:
        self._process.start()
        await asyncio.sleep(PROBES_START_S)  # its interpreter up, its first probes sent
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        self.probes = await asyncio.to_thread(self._results.recv)
        await asyncio.to_thread(self._process.join)


# ---------------------------------------------------------------- attacks: each runs until `until`

Attack = Callable[[Run, float], Awaitable[None]]


async def repeat(until: float, times: int, once: Callable[[int], Awaitable[int]], run: Run) -> None:
    """`times` loops in parallel, each calling `once(i)` until the deadline."""
    async def loop(k: int) -> None:
        i = 0
        while time.monotonic() < until:
            run.count(await once(k * 100_000 + i))
            i += 1
    await asyncio.gather(*(loop(k) for k in range(times)))


async def api_create(run: Run, until: float, content: str, parallel: int = 1) -> None:
    async def once(i: int) -> int:
        response = await run.client.post(f"{run.base}/api/v1/memories", params={"user": f"api-{i % 50}"},
                                          json={"content": f"{i} {content}"})
        return response.status_code
    await repeat(until, parallel, once, run)


async def api_256k(run: Run, until: float) -> None:
    await api_create(run, until, filled(AWS_FILE, 256 * 1024))


async def api_2k_generic(run: Run, until: float) -> None:
    await api_create(run, until, filled(DOCKER_AUTH, 2000), parallel=4)


async def reason_128k(run: Run, until: float) -> None:
    created = await run.client.post(f"{run.base}/api/v1/memories", params={"user": "reason-user"},
                                    json={"content": "User likes tea."})
    current = [created.json()["id"]]  # an edit is a new version with a new id
    reason = filled(AWS_FILE, 128 * 1024)

    async def once(i: int) -> int:
        response = await run.client.patch(f"{run.base}/api/v1/memories/{current[0]}", params={"user": "reason-user"},
                                          json={"content": f"User likes tea, cup {i}.", "reason": reason})
        if response.status_code == 200:
            current[0] = response.json()["id"]
        return response.status_code
    await repeat(until, 1, once, run)


def turns(text: str, users: int) -> Attack:
    async def attack(run: Run, until: float) -> None:
        await repeat(until, users, lambda i: run.turn(f"turns-{i // 100_000}", f"{i} {text}"), run)
    return attack


async def facts_40(run: Run, until: float) -> None:
    text = f"{MANY_FACTS} " + distinct_words(15_900)
    await repeat(until, 1, lambda i: run.turn(f"facts-{i % 20}", f"{i} {text}"), run)


def key_flood(limits: Callable[[], dict[str, int]] | None, key: str = FLOOD_KEY) -> Attack:
    """FLOOD_TURNS turns of one key, FLOOD_AT_ONCE at once (to the end, whatever `until`), under that key's `limits`
    or none."""
    async def attack(run: Run, until: float) -> None:
        flooding = repeated(key, run.repetition)
        subject = {"kind": "key", "subject": key_id(flooding)}
        if limits:
            assert (await run.client.put(f"{run.base}/api/v1/limits", json={**subject, **limits()})).is_success
        else:
            await run.client.delete(f"{run.base}/api/v1/limits", params=subject)
        left = iter(range(FLOOD_TURNS))

        async def one_at_a_time() -> None:
            for i in left:
                body = {"model": "fake-model", "stream": True,
                        "messages": [{"role": "user", "content": f"Flood turn {i}: tell me about ferns."}]}
                async with run.client.stream("POST", run.server.chat_url, json=body, headers={
                        "authorization": f"Bearer {flooding}", "x-openwebui-user-id": f"flood-{i % 64}"}) as reply:
                    async for _ in reply.aiter_bytes():
                        pass
                run.count(reply.status_code)
        await asyncio.gather(*(one_at_a_time() for _ in range(FLOOD_AT_ONCE)))
    return attack


CASES: dict[str, Attack] = {
    "api_256k": api_256k,
    "api_2k_generic": api_2k_generic,
    "reason_128k": reason_128k,
    "turns_16x16k": turns(filled(AWS_FILE, 16_000), 16),
    "turns_16x16k_plain": turns(distinct_words(16_000), 16),
    "facts_40": facts_40,
    "rule_aws_ids": turns(filled(AWS_IDS, 16_000), 4),
    "rule_pem_headers": turns(filled(PEM_HEADER, 16_000), 4),
    "rule_docker_auths": turns(filled(DOCKER_AUTH, 16_000), 4),
    "key_flood": key_flood(lambda: FLOOD_LIMITS),
    "key_flood_compose": key_flood(compose_limits, COMPOSE_KEY),
    "key_flood_unlimited": key_flood(None),
}


# ---------------------------------------------------------------- running and reporting

async def measure(run: Run, attack: Attack | None, seconds: float) -> tuple[Probes, dict[str, int], float]:
    run.counts = {}
    async with Probing(run) as probes:
        started = time.monotonic()
        if attack is None:
            await asyncio.sleep(seconds)
        else:
            await attack(run, started + seconds)
            for _ in range(int(DRAIN_MAX_S / DRAIN_POLL_S)):  # the formation jobs it caused, done
                if not await run.open_jobs():
                    break
                await asyncio.sleep(DRAIN_POLL_S)
        elapsed = time.monotonic() - started
    return probes.probes, run.counts, elapsed


def stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values) or [0.0]
    return (statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], ordered[-1])


async def main_async(args: argparse.Namespace) -> None:
    core = None if args.core == "none" else int(args.core)
    fake = servers.start_fake(core=core)
    proxy = None
    try:
        keys = [servers.PROXY_KEY] + [repeated(k, r) for k in (FLOOD_KEY, COMPOSE_KEY) for r in range(args.repeat)]
        proxy = servers.start_memory_proxy(fake, core=core, env={"LOG_LEVEL": "warning",
                                                                  "PROXY_API_KEYS": ",".join(keys),
                                                                  "MEMORY_LLM_MODE": "json",
                                                                  "MAINTENANCE_INTERVAL_SECONDS": "0"})
        run = Run(proxy)
        await measure(run, None, 2.0)  # warm-up: first turns, first scans, the scanner's workers
        quiet, _, _ = await measure(run, None, args.seconds * args.repeat)
        base = {"healthz": stats(quiet.health), "chat": stats(quiet.chat)}
        rows = [("quiet", probe, *base[probe], 0.0, 0.0, 0.0, "", quiet.failed) for probe in base]
        for name in args.cases:
            probes, counts, elapsed = Probes(), {}, 0.0
            for run.repetition in range(args.repeat):
                once, counted, took = await measure(run, CASES[name], args.seconds)
                probes.health += once.health
                probes.chat += once.chat
                probes.failed += once.failed
                counts = {k: counts.get(k, 0) + counted.get(k, 0) for k in counts.keys() | counted.keys()}
                elapsed += took
            outcome = " ".join(f"{k}×{v}" for k, v in sorted(counts.items()))
            for probe, values in (("healthz", probes.health), ("chat", probes.chat)):
                p50, p99, top = stats(values)
                rows.append((name, probe, p50, p99, top, p50 - base[probe][0], p99 - base[probe][1],
                             top - base[probe][2], f"{outcome} in {elapsed:.0f}s", probes.failed))
            print(f"  {name}: done ({outcome})", flush=True)
        await run.client.aclose()
    finally:
        if proxy:
            proxy.stop()
        fake.stop()
    print(f"\nms; added = under the attack minus quiet; target ≤ {TARGET_MS:.0f} ms added at p99\n")
    print("| case | probe | p50 | p99 | max | added p50 | added p99 | added max | attack requests | probe errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, probe, p50, p99, top, a50, a99, amax, outcome, failed in rows:
        print(f"| {case} | {probe} | {p50:.1f} | {p99:.1f} | {top:.1f} | {a50:+.1f} | {a99:+.1f} | {amax:+.1f} "
              f"| {outcome} | {failed} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stall", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="how long each attack runs")
    parser.add_argument("--quick", action="store_true", help="4 s a case")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case, their probes pooled")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--core", default=str(servers.SERVER_CORE), help="core to pin the servers to, or none")
    args = parser.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    if unknown := [c for c in args.cases if c not in CASES]:
        parser.error(f"unknown cases: {', '.join(unknown)}")
    if args.quick:
        args.seconds = 4.0
    if args.core != "none" and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0 if int(args.core) else 1})  # the load generator on the other core
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
