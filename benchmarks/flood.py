"""One user floods the queue; does another user's formation job still start within one job plus the poll?

    .venv/bin/python -m benchmarks.flood [--turns 1000] [--job-ms 200] [--victims 5] [--late-victims 3]
    .venv/bin/python -m benchmarks.flood --quick          # 200 turns, 2 + 1 victims: ~1 minute
    .venv/bin/python -m benchmarks.flood --flooders 4     # the same turns from 4 flooding users

Issue 25's criterion: "While one user floods 1,000 turns, another user's formation job starts within the
time of one job (plus the worker's poll), measured."

Setup. `memory-proxy serve` (WORKER_IN_PROCESS=true, the README's default: the formation worker runs in
the serving process, WORKER_CONCURRENCY 4 unless `--concurrency`) on a fresh data dir, so it starts its
own embedded PostgreSQL (pgserver) as its child; proxy, PostgreSQL and the fake upstream are pinned to
core 1, this load generator to core 0 (benchmarks.servers). Upstream, embedder and memory LLM are the fake of
memory_proxy.testing.fake_upstream (streamed replies without delay between chunks; JSON mode memory LLM). Every
memory-LLM *extraction* call is answered after `--job-ms` (the fake's `--llm-delay-ms`), so that the
model time of a job is fixed and known; the rest of a job (embedding, neighbour search, the fake's
instant but unreadable `relate` answer and instructor's re-ask, the write transaction) is whatever it
costs, and "the time of one job" is *measured*: the worker's own `duration_ms` of each job, from its
`memory_decision` log lines (LOG_LEVEL=info, JSON).

Run.
1. Flood: user F sends `--turns` streamed chat turns, each distinct ("Flood turn i: ..."), from
   `--clients` concurrent clients, as fast as the proxy answers; each must end with HTTP 200.
2. Victims during the flood: once F has `--turns`×20 % turns accepted, victim user V0 sends one turn;
   V1.. follow at evenly spaced counts up to 90 % (one new user each, one turn each).
3. Late victims: after the flood, while F's backlog is still queued, `--late-victims` more users send
   one turn each, `--late-gap` seconds apart (the queue alone, without chat load on the core).
4. Drain: wait (with a deadline, polling the table) until no job is queued or running.

Measured per victim job, all from the database and the worker's log on one clock:
- enqueued: the job row's `created_at` (written before the turn's response ends);
- claimed: `locked_until − JOB_LEASE_SECONDS` of the running row (the claim transaction's now(); polled
  every 10 ms while a victim job is open), or the start of the worker's `process()` (log line time −
  `duration_ms`) if that is earlier (a lease renewal moved `locked_until`) or the running row was missed;
- done: the worker's `memory_decision` log line (after the job's commit);
- F's backlog at that moment: F's jobs created before it and finished after it.
The bound is the median duration of F's jobs (the job a victim could be stuck behind) plus the worker's
poll interval, `memory_proxy.formation.worker.POLL_S` (a constant, not a setting; NOTIFY normally wakes the worker first).
At the end every F job must be `done` exactly once: as many rows as accepted turns, all `done`, attempts
1, one `memory_decision` line each, and one active memory each (F's facts are all distinct).

Variants. `--flooders N` spreads the same turns over N flooding users (F = all of them) and
`--concurrency C` sets WORKER_CONCURRENCY: the fair claim keeps each user to one running job, so a
victim finds a free slot at once while C exceeds the number of users with a backlog; with N ≥ C
(e.g. `--concurrency 1`, or `--flooders 4` at the default 4) every slot is a flooder's, and which
head a freed slot goes to is decided by the claim's `ORDER BY run_after, id` (memory_proxy/store/jobs.py);
since a completed job sends its user's next job behind every job waiting then (round robin), a newcomer
takes the next freed slot (before that fix: waits of 15-60 s at `--flooders 4`).

Default run: ~4 minutes on 2 cores (1,000 F jobs of ~240 ms each, one at a time); `--quick` ~1 minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psycopg

from memory_proxy.testing.asgi import free_port
from memory_proxy.testing.fake_upstream import start_fake

from . import servers

LEASE_S = 120.0
FORMATION_ENV = {"MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_MODE": "json", "LOG_LEVEL": "info",
                 "LOG_FORMAT": "json", "LOG_USER_IDS": "raw", "JOB_LEASE_SECONDS": str(int(LEASE_S)),
                 "MAINTENANCE_INTERVAL_SECONDS": "0", "SHUTDOWN_TIMEOUT": "10"}
VICTIM_POLL_S = 0.01
BACKLOG_POLL_S = 0.5


@dataclass
class Victim:
    user: str
    phase: str                       # "flood" (sent while F's turns arrive) or "late" (after them)
    after_f_turns: int               # F's accepted turns when this victim's turn was sent
    reply_end: datetime | None = None
    status: int | None = None
    job_id: int | None = None
    created_at: datetime | None = None
    db_claimed: datetime | None = None   # locked_until − lease, first time the row was seen running
    log_start: datetime | None = None
    log_done: datetime | None = None
    finished_at: datetime | None = None
    backlog: int | None = None

    @property
    def claimed(self) -> datetime | None:
        known = [t for t in (self.db_claimed, self.log_start) if t is not None]
        return min(known) if known else None


@dataclass
class Flood:
    sent: int = 0
    accepted: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    started: float = 0.0
    ended: float = 0.0


def conninfo(server: servers.Server) -> str:
    return f"postgresql://postgres:@/postgres?host={server.tmpdir}/postgres"


def headers(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {servers.PROXY_KEY}", "x-openwebui-user-id": user}


def turn_body(text: str) -> dict[str, Any]:
    return {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": text}]}


async def send_turn(client: httpx.AsyncClient, server: servers.Server, user: str, text: str) -> int:
    """One streamed turn to its end; the HTTP status (the job is written before the response ends)."""
    request = client.stream("POST", server.chat_url, json=turn_body(text), headers=headers(user))
    async with request as response:
        async for _ in response.aiter_bytes():
            pass
    return response.status_code


def flooder_ids(count: int) -> list[str]:
    return ["flood-user"] if count == 1 else [f"flood-user-{j}" for j in range(count)]


async def run_flood(server: servers.Server, turns: int, clients: int, flooders: list[str], flood: Flood,
                    progress: asyncio.Condition) -> None:
    numbers = iter(range(turns))
    flood.started = time.monotonic()

    async def client_loop(client: httpx.AsyncClient) -> None:
        for i in numbers:  # one shared iterator: each turn is sent exactly once
            flood.sent += 1
            text = f"Flood turn {i}: I am planning trip number {i} to city {i % 97} with {i % 13} friends."
            try:
                status = await send_turn(client, server, flooders[i % len(flooders)], text)
            except httpx.HTTPError as exc:
                flood.failed[type(exc).__name__] += 1
                continue
            if status == 200:
                flood.accepted += 1
            else:
                flood.failed[f"HTTP {status}"] += 1
            async with progress:
                progress.notify_all()

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    flood.ended = time.monotonic()
    async with progress:
        progress.notify_all()


async def send_victim(server: servers.Server, victim: Victim, index: int) -> None:
    text = f"My name is Vera {index} and I keep {index + 2} cats at home in Lyon."
    async with httpx.AsyncClient(timeout=120) as client:
        victim.status = await send_turn(client, server, victim.user, text)
    victim.reply_end = datetime.now(UTC)


async def run_victims(server: servers.Server, flood: Flood, progress: asyncio.Condition,
                      thresholds: list[int], late: int, late_gap: float, backlog: dict[str, int],
                      victims: list[Victim]) -> None:
    """Victims at F's accepted-turn thresholds, then `late` more after the flood, while F has a backlog."""
    for k, threshold in enumerate(thresholds):
        def reached(t: int = threshold) -> bool:
            return flood.accepted >= t or flood.ended > 0

        async with progress:
            await progress.wait_for(reached)
        victim = Victim(f"victim-{k}", "flood", flood.accepted)
        victims.append(victim)
        await send_victim(server, victim, k)
    async with progress:
        await progress.wait_for(lambda: flood.ended > 0)
    for k in range(len(thresholds), len(thresholds) + late):
        await asyncio.sleep(late_gap)
        if backlog.get("open", 0) == 0:
            break  # F's backlog is gone: a victim now measures nothing about a flood
        victim = Victim(f"victim-{k}", "late", flood.accepted)
        victims.append(victim)
        await send_victim(server, victim, k)


async def monitor(dsn: str, flooders: list[str], victims: list[Victim], backlog: dict[str, int],
                  stop: asyncio.Event) -> None:
    """Poll victims' job rows (every 10 ms while one is open) and F's backlog (every 0.5 s)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        next_backlog = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_backlog:
                row = await (await conn.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')), max(id) FROM memory_jobs"
                    " WHERE user_id = ANY(%s)", [flooders])).fetchone()
                backlog["open"] = int(row[0]) if row else 0
                backlog["peak"] = max(backlog.get("peak", 0), backlog["open"])
                next_backlog = now + BACKLOG_POLL_S
            users = {v.user: v for v in victims if v.finished_at is None}
            if users:
                cur = await conn.execute(
                    "SELECT id, user_id, status, locked_until, created_at, finished_at FROM memory_jobs"
                    " WHERE user_id = ANY(%s)", [list(users)])
                for job_id, user, status, locked_until, created_at, finished_at in await cur.fetchall():
                    victim = users[user]
                    victim.job_id, victim.created_at = job_id, created_at
                    if status == "running" and victim.db_claimed is None and locked_until is not None:
                        victim.db_claimed = datetime.fromtimestamp(locked_until.timestamp() - LEASE_S, UTC)
                    if status == "done":
                        victim.finished_at = finished_at
            await asyncio.sleep(VICTIM_POLL_S if users else 0.05)


async def wait_drained(dsn: str, expected: int, deadline_s: float) -> tuple[bool, float]:
    """Poll until `expected` jobs exist and none is queued or running; (drained, seconds waited)."""
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        while time.monotonic() - started < deadline_s:
            row = await (await conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE status IN ('queued', 'running')) FROM memory_jobs"
            )).fetchone()
            if row and row[0] >= expected and row[1] == 0:
                return True, time.monotonic() - started
            await asyncio.sleep(0.5)
    return False, time.monotonic() - started


def decisions(log_path: Path) -> dict[int, list[dict[str, Any]]]:
    """The worker's `memory_decision` lines by job id."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for raw in log_path.read_text(errors="replace").splitlines():
        if '"memory_decision"' not in raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if line.get("event") == "memory_decision" and "job_id" in line:
            lines.setdefault(int(line["job_id"]), []).append(line)
    return lines


def line_times(line: dict[str, Any]) -> tuple[datetime, datetime]:
    """(start of `process()`, end) of one `memory_decision` line."""
    end = datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00"))
    return datetime.fromtimestamp(end.timestamp() - float(line["duration_ms"]) / 1000, UTC), end


def seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    return None if later is None or earlier is None else (later - earlier).total_seconds()


def fmt_ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f} ms"


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


async def scenario(server: servers.Server, args: argparse.Namespace) -> dict[str, Any]:
    dsn = conninfo(server)
    flood, progress = Flood(), asyncio.Condition()
    victims: list[Victim] = []
    backlog: dict[str, int] = {}
    stop = asyncio.Event()
    first, last = 0.2 * args.turns, 0.9 * args.turns
    thresholds = [round(first + (last - first) * k / max(args.victims - 1, 1)) for k in range(args.victims)]
    flooders = flooder_ids(args.flooders)
    watcher = asyncio.create_task(monitor(dsn, flooders, victims, backlog, stop))
    started = time.monotonic()
    try:
        await asyncio.gather(run_flood(server, args.turns, args.clients, flooders, flood, progress),
                             run_victims(server, flood, progress, thresholds, args.late_victims,
                                         args.late_gap, backlog, victims))
        expected = flood.accepted + sum(1 for v in victims if v.status == 200)
        budget = 120 + 3 * args.turns * (args.job_ms / 1000 + 0.1)
        drained, drain_s = await wait_drained(dsn, expected, budget)
        await asyncio.sleep(3 * VICTIM_POLL_S)  # one more look at the victims' rows
    finally:
        stop.set()
        await asyncio.gather(watcher, return_exceptions=True)
    return {"flood": flood, "victims": victims, "drained": drained, "drain_s": drain_s,
            "peak_backlog": backlog.get("peak", 0), "wall_s": time.monotonic() - started}


def collect(server: servers.Server, run: dict[str, Any], flooders: list[str]) -> dict[str, Any]:
    """Everything else from the database and the log, once the queue is drained."""
    by_job = decisions(Path(server.tmpdir or "", "server.log"))
    with psycopg.connect(conninfo(server), autocommit=True) as conn:
        conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        rows = conn.execute("SELECT id, status, attempts, created_at, finished_at, user_id FROM memory_jobs"
                            " WHERE user_id = ANY(%s) ORDER BY id", [flooders]).fetchall()
        memories = conn.execute("SELECT count(*) FROM users_vectors"
                                " WHERE user_id = ANY(%s) AND superseded_at IS NULL", [flooders]).fetchone()
        for victim in run["victims"]:
            row = conn.execute("SELECT id, created_at, finished_at FROM memory_jobs"
                               " WHERE user_id = %s ORDER BY id", [victim.user]).fetchall()
            if not row:
                continue
            victim.job_id, victim.created_at, victim.finished_at = row[0]
            lines = by_job.get(victim.job_id, [])
            if lines:
                victim.log_start, victim.log_done = line_times(lines[-1])
            enqueued = victim.created_at
            victim.backlog = sum(1 for _, _, _, created, finished, _ in rows
                                 if created <= enqueued and (finished is None or finished > enqueued))
    f_ids = [r[0] for r in rows]
    durations = [float(line["duration_ms"]) / 1000 for i in f_ids for line in by_job.get(i, [])]
    gaps = []  # per flooder: its jobs run one at a time, so these are its job-to-job intervals
    for user in flooders:
        finished = sorted(r[4] for r in rows if r[4] is not None and r[5] == user)
        gaps += [(b - a).total_seconds() for a, b in pairwise(finished)]
    return {
        "f_rows": len(rows), "f_status": Counter(r[1] for r in rows),
        "f_max_attempts": max((r[2] for r in rows), default=0),
        "f_retried": sum(1 for r in rows if r[2] > 1),
        "f_lines": Counter(len(by_job.get(i, [])) for i in f_ids),
        "f_memories": int(memories[0]) if memories else 0,
        "job_s": durations, "gap_s": gaps,
    }


def report(args: argparse.Namespace, run: dict[str, Any], db: dict[str, Any], poll_s: float) -> None:
    flood: Flood = run["flood"]
    victims: list[Victim] = run["victims"]
    job_p50 = statistics.median(db["job_s"]) if db["job_s"] else float("nan")
    gap_p50 = statistics.median(db["gap_s"]) if db["gap_s"] else float("nan")
    bound = job_p50 + poll_s
    who = "one user" if args.flooders == 1 else f"{args.flooders} users (F, round-robin)"
    print(f"\n## Flood: {args.turns} turns of {who} vs one turn each of {len(victims)} other users\n")
    print(f"settings: extraction call {args.job_ms:.0f} ms (fake memory LLM), worker in `serve`, "
          f"WORKER_CONCURRENCY {args.concurrency}, poll {poll_s:.1f} s (memory_proxy.formation.worker.POLL_S; "
          f"NOTIFY wakes first), JOB_LEASE_SECONDS {LEASE_S:.0f}, {args.clients} flood clients, "
          f"servers on core {servers.SERVER_CORE}\n")
    print("| victim | sent | F turns accepted | F backlog at enqueue | enqueue → claim | claim → done "
          "| enqueue → done | turn end → done | wait ≤ one job + poll |")
    print("|---|---|---|---|---|---|---|---|---|")
    waits = []
    for v in victims:
        wait = seconds(v.claimed, v.created_at)
        done = v.log_done or v.finished_at
        if wait is not None:
            waits.append(wait)
        ok = "—" if wait is None else ("yes" if wait <= bound else "**no**")
        print(f"| {v.user} | {v.phase} | {v.after_f_turns} | {v.backlog if v.backlog is not None else '—'} "
              f"| {fmt_ms(wait)} | {fmt_ms(seconds(done, v.claimed))} "
              f"| {fmt_ms(seconds(done, v.created_at))} "
              f"| {fmt_ms(seconds(done, v.reply_end))} | {ok} |")
    both = [(v.log_start - v.db_claimed).total_seconds() for v in victims if v.log_start and v.db_claimed]
    print(f"\nclaim time read from the running row (locked_until − lease) for {len(both)}/{len(victims)} "
          "victims; "
          f"the worker's process() began {fmt_ms(statistics.median(both)) if both else '—'} (p50) after it")
    status = db["f_status"]
    lines = db["f_lines"]
    lost = flood.accepted - status.get("done", 0)
    duplicated = max(db["f_rows"] - flood.accepted, 0) + db["f_retried"] + sum(
        n for count, n in lines.items() if count > 1)
    print("\n| measure | value |\n|---|---|")
    if waits:
        print(f"| victim wait enqueue → claim, p50 / max | {fmt_ms(statistics.median(waits))} / "
              f"{fmt_ms(max(waits))} "
              f"({sum(w <= bound for w in waits)}/{len(waits)} within the bound) |")
    else:
        print("| victim wait enqueue → claim | not measured |")
    if db["job_s"]:
        print(f"| one job (F's, worker `duration_ms`) p50 / p95 / max | {fmt_ms(job_p50)} / "
              f"{fmt_ms(quantile(db['job_s'], 0.95))} / {fmt_ms(max(db['job_s']))} |")
    print(f"| F's jobs finished one after another, interval p50 | {fmt_ms(gap_p50)} |")
    print(f"| bound: one job p50 + poll | {fmt_ms(bound)} |")
    print(f"| F's backlog (queued + running), peak | {run['peak_backlog']} |")
    failed = ", ".join(f"{k} ×{n}" for k, n in flood.failed.items())
    print(f"| flood turns accepted (HTTP 200) / sent | {flood.accepted} / {flood.sent}"
          f"{f' (failed: {failed})' if failed else ''} |")
    print(f"| flood turns/s | {flood.accepted / max(flood.ended - flood.started, 1e-9):.1f} "
          f"({flood.ended - flood.started:.1f} s) |")
    print(f"| F's job rows / done / queued+running / dead | {db['f_rows']} / {status.get('done', 0)} / "
          f"{status.get('queued', 0) + status.get('running', 0)} / {status.get('dead', 0)} |")
    print(f"| F's jobs lost / duplicated (extra rows, retried, >1 decision line) | {lost} / {duplicated} |")
    print(f"| F's `memory_decision` lines per job | {dict(sorted(lines.items()))} |")
    print(f"| F's active memories (one distinct fact per turn) | {db['f_memories']} |")
    drained = "yes" if run["drained"] else "**no**"
    print(f"| drained | {drained} ({run['drain_s']:.1f} s after the last victim's turn) |")
    print(f"| wall time (flood start → drained) | {run['wall_s']:.1f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000, help="flood turns of user F")
    parser.add_argument("--job-ms", type=float, default=200.0, help="fake memory-LLM extraction time per job")
    parser.add_argument("--clients", type=int, default=4, help="concurrent flood clients")
    parser.add_argument("--flooders", type=int, default=1,
                        help="users sharing the flood's turns round-robin (F = all of them; default 1)")
    parser.add_argument("--victims", type=int, default=5,
                        help="victims during the flood (20 %%..90 %% of it)")
    parser.add_argument("--late-victims", type=int, default=3,
                        help="victims after the flood, F's backlog left")
    parser.add_argument("--late-gap", type=float, default=15.0, help="seconds between late victims")
    parser.add_argument("--concurrency", type=int, default=4, help="WORKER_CONCURRENCY")
    parser.add_argument("--quick", action="store_true", help="200 turns, 2 victims during, 1 after (~1 min)")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.victims, args.late_victims, args.late_gap = 200, 2, 1, 5.0
    from memory_proxy.formation.worker import POLL_S

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # the load generator on core 0, the servers on core 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop what we started
    port = free_port()
    fake_proc = start_fake(port, chunks=6, delay_ms=0, core=servers.SERVER_CORE, llm_delay_ms=args.job_ms)
    fake = servers.Server("fake", f"http://127.0.0.1:{port}/v1", {}, fake_proc)
    proxy = None
    try:
        env = {**FORMATION_ENV, "WORKER_IN_PROCESS": "true", "WORKER_CONCURRENCY": str(args.concurrency)}
        proxy = servers.start_memory_proxy(fake, env=env)
        try:
            run = asyncio.run(scenario(proxy, args))
            db = collect(proxy, run, flooder_ids(args.flooders))
        except BaseException:
            log = Path(proxy.tmpdir or "", "server.log")
            if log.exists():
                tail = log.read_text(errors="replace")[-4000:]
                print("--- server.log (tail) ---\n" + tail, file=sys.stderr)
            raise
        report(args, run, db, POLL_S)
    finally:
        if proxy is not None:
            proxy.stop()
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
