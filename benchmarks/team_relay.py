"""A team member's chat turn against a user's alone: the CPU the teams add, side by side in one run.

    python -m benchmarks.team_relay [--quick] [--repeat N] [--teams 3] [--team-memories 10000] [--relevant 5]

Two memory-proxies on one fake upstream (benchmarks.relay's), each with its own embedded PostgreSQL:

- "user": benchmarks.relay's case (c): a user with 1,000 memories, 5 of them close to the question;
- "user in 3 teams": the same user, also a member of 3 teams holding 10,000 memories each, `--relevant` of
  each team's close to the question too (default 5: RETRIEVAL_TEAM_TOP_K team memories are injected on every
  turn, beside the user's own; 0: the teams are searched and nothing of theirs qualifies).

Before measuring, each proxy is sent turns until one is searched wholly in its in-process indexes (the
user's and every team's: ``memory_proxy_index_lookups_total{result="hit"}`` grows by 1 + teams), as a
proxy that has been serving a while would. The figure is the server CPU (the proxy and its PostgreSQL) per
turn, and its ratio to the user's alone; issue 37 asks for at most 1.15.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import httpx
import psycopg

from memory_proxy.store import teams
from memory_proxy.store.database import make_pool
from memory_proxy.store.memories import add_or_find_memory
from memory_proxy.testing.fake_upstream import embed

from . import relay, servers
from .servers import Server

QUESTION = relay.BODY["messages"][-1]["content"]
WARM_TURNS = 200


def seed_teams(server: Server, count: int, per_team: int, relevant: int = relay.RELEVANT) -> None:
    """`count` teams of `per_team` memories each, `relevant` of them close to the question, the bench user a
    member of all."""
    async def insert() -> None:
        conninfo = f"postgresql://postgres:@/postgres?host={server.tmpdir}/postgres"
        async with make_pool(conninfo, 1) as pool, pool.connection() as conn:
            await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
            for t in range(count):
                team = f"team-{t}"
                await teams.create_team(conn, team, f"Team {t}")
                await teams.set_member(conn, team, relay.BENCH_USER)
                texts = [f"{QUESTION} The team {t} uses Go, note {i}, {marker(t, i)}." for i in range(relevant)]
                texts += [f"Team {t} fact {i}: service {i % 97} runs in region {i % 89} on cluster {i % 83}."
                          for i in range(per_team - relevant)]
                for text in texts:
                    await add_or_find_memory(conn, user_id=teams.Holder.team(team).principal, content=text,
                                             embedding=embed(text, 1024), model="fake-embed")

    asyncio.run(insert())


def marker(team: int, note: int) -> str:
    """The tag of a team's relevant memory, as the fake upstream finds it in a system prompt (`MARKER`)."""
    return "mk" + "teamnote" + chr(ord("a") + team % 26) + chr(ord("a") + note % 26)


def injected(server: Server, fake: Server) -> list[str]:
    """The markers of the team memories one turn of the bench question injects (`GET /seen` of the fake)."""
    probe = f"team-relay-{time.monotonic_ns()}"
    httpx.post(server.chat_url, headers=server.headers, json={**relay.BODY, "probe": probe},
               timeout=30).raise_for_status()
    seen = httpx.get(fake.base_url.removesuffix("/v1") + "/seen", params={"probe": probe}, timeout=10)
    return sorted(seen.raise_for_status().json()["markers"])


def warm(server: Server, indexes: int) -> None:
    """Send turns until one is searched in `indexes` in-process indexes, or fail."""
    metrics = server.base_url.removesuffix("/v1") + "/metrics"

    def hits() -> float:
        text = httpx.get(metrics, headers=server.headers, timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith('memory_proxy_index_lookups_total{result="hit"}'))

    for _ in range(WARM_TURNS):
        before = hits()
        httpx.post(server.chat_url, headers=server.headers, json=relay.BODY, timeout=30).raise_for_status()
        if hits() - before == indexes:
            return
        time.sleep(0.5)  # the indexes load in the background
    raise RuntimeError(f"{server.name}: no turn was searched in {indexes} in-process indexes")


def settle(server: Server, idle_share: float = 0.05, limit_s: float = 120.0) -> None:
    """Vacuum and analyse the seeded rows, then wait until the server (and its PostgreSQL) is idle: the loads,
    autovacuum's work on the new rows (run at a throttled pace, it looked idle and went on for minutes, its CPU
    counted as the turns') and the secret scanner's start are not a turn's cost."""
    with psycopg.connect(f"postgresql://postgres:@/postgres?host={server.tmpdir}/postgres", autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = servers.cpu_seconds(server)
        time.sleep(2.0)
        if servers.cpu_seconds(server) - before < 2.0 * idle_share:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.team_relay", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, short time limit")
    parser.add_argument("--repeat", type=int, help="repetitions, medians reported (default 1 quick, 3 full)")
    parser.add_argument("--teams", type=int, default=3)
    parser.add_argument("--team-memories", type=int, default=10_000)
    parser.add_argument("--relevant", type=int, default=relay.RELEVANT, help="of each team's, close to the question")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # load generator on core 0; servers are started on core 1

    started: list[Server] = []
    try:
        fake = servers.start_fake(chunks=6, delay_ms=20)
        started.append(fake)
        alone = relay.memory_proxy_user_target(fake, relay.BENCH_USER, relay.seed_memories)
        alone.name = "user (1,000 memories)"
        started.append(alone)

        def seed_both(server: Server) -> None:
            relay.seed_memories(server)
            seed_teams(server, args.teams, args.team_memories, args.relevant)

        member = relay.memory_proxy_user_target(fake, relay.BENCH_USER, seed_both)
        member.name = f"user in {args.teams} teams × {args.team_memories:,} ({args.relevant} relevant each)"
        started.append(member)
        warm(alone, 1)
        warm(member, 1 + args.teams)
        shown = injected(member, fake)  # what the member's turns cost includes the team memories they inject
        print(f"team memories injected in a member's turn: {len(shown)} ({', '.join(shown)})", file=sys.stderr)
        if args.relevant and not shown:
            raise RuntimeError("the member's turn injects no team memory: the benchmark would not measure one")
        for server in (alone, member):
            settle(server)
        cells = relay.run_targets([alone, member], concurrencies=(1, 16),
                                  requests=relay.QUICK_REQUESTS if args.quick else relay.FULL_REQUESTS,
                                  repeat=repeat, time_limit=10.0 if args.quick else 30.0,
                                  log=lambda line: print(line, file=sys.stderr))
        print(relay.markdown(cells, baseline=alone.name))
        by = {(c.target, c.concurrency): c for c in cells}
        for c in (1, 16):
            ratio = by[(member.name, c)].cpu_ms / by[(alone.name, c)].cpu_ms
            print(f"c={c}: server CPU per turn, member ÷ alone = {ratio:.3f}")
    finally:
        for server in reversed(started):
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
