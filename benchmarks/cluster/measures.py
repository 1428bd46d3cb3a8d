"""The six measurements (see the package docstring), and stale injection's team variant (2b), each returning
a dict for the report and the JSON."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

import httpx
from psycopg.conninfo import conninfo_to_dict

from memory_proxy.testing.asgi import free_port

from ..loadgen import LoadResult, percentile, run_load_async, summarise
from ..relay import BODY
from .client import (
    PROBE_TEXT,
    Turn,
    create_memory,
    create_team,
    create_team_memory,
    delete_memory,
    leave_team,
    marker,
    probe,
    seed,
    seen,
    user_headers,
    warm,
)
from .cluster import Cluster
from .parts import Node, Relay, wait_until

QUESTION = cast(list[dict[str, str]], BODY["messages"])[-1]["content"]  # the 5 relevant memories match it


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))


def spread(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    return {"n": len(values), "p50": percentile(finite, 50), "p99": percentile(finite, 99),
            "max": max(values) if values else math.nan}


async def until_injected(http: httpx.AsyncClient, cl: Cluster, node: Node, user: str, mark: str, since: float,
                         within: float) -> tuple[float, int]:
    """Probe ``node`` back to back until ``mark`` is injected: (seconds from ``since`` to the end of that
    turn, or inf; turns before it that did not inject it)."""
    misses = 0
    while time.monotonic() - since < within:
        turn = await probe(http, node.url, user)
        await seen(http, cl.fake_url, [turn])
        if mark in turn.markers:
            return turn.end - since, misses
        misses += 1
    return math.inf, misses


# ---------------------------------------------------------------- 1. cross-replica visibility

async def visibility(cl: Cluster, samples: int) -> dict[str, Any]:
    """A pinned memory written through one replica's API, and a memory formed by a worker from a chat turn
    through one replica: time until every (other) replica's turns inject it."""
    out: dict[str, Any] = {}
    async with client() as http:
        for kind in ("api", "formed"):
            lags, misses, cold, form_s, by_worker = [], 0, 0, [], 0
            for i in range(samples):
                user = f"{cl.run}-vis-{kind}-{i}"
                await seed(cl.direct, [user])
                cold += not await warm(http, cl.replicas, user)
                await asyncio.to_thread(cl.drain, user, 30)  # the warm-up turns' jobs: not ahead of this one
                writer, mark = cl.replicas[i % len(cl.replicas)], marker()
                began = time.time()
                if kind == "api":
                    await create_memory(http, writer, user, f"User's code word is {mark}.")
                    readers = [n for n in cl.replicas if n is not writer]
                else:
                    turn = await probe(http, writer.url, user, f"Please remember that my code word is {mark}.")
                    assert turn.ok, turn
                    readers = cl.replicas
                since, wall = time.monotonic(), time.time()
                found = await asyncio.gather(*(until_injected(http, cl, n, user, mark, since, 30) for n in readers))
                lags.append(max(lag for lag, _ in found) * 1000)
                misses += sum(m for _, m in found)
                if kind == "formed":
                    done = cl.rows("SELECT extract(epoch FROM finished_at) FROM memory_jobs WHERE user_id = %s"
                                   " AND created_at >= to_timestamp(%s) ORDER BY id LIMIT 1", [user, began])[0][0]
                    form_s.append((float(done) - wall) * 1000 if done else math.nan)
                    by_worker += _formed_by_a_worker(cl, user, began)
            out[kind] = {"lag_ms": spread(lags), "stale_turns": misses, "not_warmed": cold, "readers": len(readers)}
            if kind == "formed":
                out[kind]["job_done_ms"] = spread(form_s)
                out[kind]["formed_by_a_worker"] = by_worker
    return out


def _formed_by_a_worker(cl: Cluster, user: str, began: float) -> int:
    """1 when the first job of ``user`` written after ``began`` is in a worker process's log, which holds
    memory decisions (the replicas run no job), else 0."""
    ids = cl.rows("SELECT id FROM memory_jobs WHERE user_id = %s AND created_at >= to_timestamp(%s)"
                  " ORDER BY id LIMIT 1", [user, began])
    logs = [w.proc.log.read_text(errors="replace") for w in cl.workers]
    return int(bool(ids) and any(f'"job_id": {ids[0][0]}' in log and '"memory_decision"' in log for log in logs))


# ---------------------------------------------------------------- 2. stale injection after delete / erase

async def stale(cl: Cluster, rounds: int, per_replica: int = 2) -> dict[str, Any]:
    """Per round: a user's pinned memory injected by every replica; turns of that user arriving at every
    replica at once; the memory deleted (or the user erased) through one replica. Violations: turns
    started after the delete returned whose upstream request still held the memory."""
    return await _rounds(cl, rounds, partial(_stale_round, per_replica=per_replica))


async def _rounds(cl: Cluster, rounds: int,
                  play: Callable[[httpx.AsyncClient, Cluster, int], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """`rounds` rounds played one after another: their counts added up, and the first 20 with a violation."""
    totals: Counter[str] = Counter()
    worst: list[dict[str, Any]] = []
    async with client() as http:
        for i in range(rounds):
            result = await play(http, cl, i)
            totals.update({k: v for k, v in result.items() if isinstance(v, int)})
            if result["violations"]:
                worst.append(result)
    return {**totals, "violating_rounds": worst[:20]}


async def _stale_round(http: httpx.AsyncClient, cl: Cluster, i: int, *, per_replica: int) -> dict[str, Any]:
    user, mark, erase = f"{cl.run}-stale-{i}", marker(), i % 2 == 1
    await seed(cl.direct, [user])
    writer, deleter = cl.replicas[i % len(cl.replicas)], cl.replicas[(i + 1) % len(cl.replicas)]
    warmed = await warm(http, cl.replicas, user)
    memory_id = await create_memory(http, writer, user, f"User's code word is {mark}.")
    since = time.monotonic()
    await asyncio.gather(*(until_injected(http, cl, n, user, mark, since, 10) for n in cl.replicas))
    loaded, returned = await _load_while(http, cl, {user: per_replica},
                                         partial(delete_memory, http, deleter, user, memory_id, erase))
    turns = loaded[user]
    after = [t for t in turns if t.start > returned]
    bad = [t for t in after if mark in t.markers]
    return {"rounds": 1, "erase": int(erase), "delete": int(not erase), "not_warmed": int(not warmed),
            "turns_after": len(after), "violations": len(bad), "errors": sum(not t.ok for t in turns),
            "in_flight_injected": sum(t.start <= returned < t.end and mark in t.markers for t in turns),
            "round": str(i), "late_ms": round(max((t.start - returned for t in bad), default=0) * 1000, 1),
            "replicas": sorted({t.node for t in bad})}


# ---------------------------------------------------------------- 2b. stale team memory after a removal

async def team_stale(cl: Cluster, rounds: int, per_replica: int = 2) -> dict[str, Any]:
    """Per round: a team memory injected by every replica into two members' turns; turns of both arriving at
    every replica at once; one member removed (or the team deleted) through one replica. Violations: turns
    of a user no longer in the team, started after the removal returned, whose upstream request still held
    the team's memory."""
    return await _rounds(cl, rounds, partial(_team_stale_round, per_replica=per_replica))


async def _team_stale_round(http: httpx.AsyncClient, cl: Cluster, i: int, *, per_replica: int) -> dict[str, Any]:
    team, user, mark, whole = f"{cl.run}-team-{i}", f"{cl.run}-tstale-{i}", marker(), i % 2 == 1
    control = f"{user}-control"  # a member who stays (on odd rounds the team's deletion removes them too)
    writer, remover = cl.replicas[i % len(cl.replicas)], cl.replicas[(i + 1) % len(cl.replicas)]
    warmed, injected = await _team_ready(http, cl, writer, team, [user, control], mark)
    turns, returned = await _load_while(http, cl, {user: per_replica, control: 1},
                                        partial(leave_team, http, remover, team, None if whole else user))
    gone = [t for u in ([user, control] if whole else [user]) for t in turns[u]]  # turns of users out of the team
    after = [t for t in gone if t.start > returned]
    bad = [t for t in after if mark in t.markers]
    kept: list[Turn] = [] if whole else [t for t in turns[control] if t.start > returned and t.ok]
    return {"rounds": 1, "team_deleted": int(whole), "member_removed": int(not whole), "not_warmed": int(not warmed),
            "not_injected": int(not injected), "turns_after": len(after), "violations": len(bad),
            "errors": sum(not t.ok for ts in turns.values() for t in ts),
            "in_flight_injected": sum(t.start <= returned < t.end and mark in t.markers for t in gone),
            "control_turns_after": len(kept), "control_missing": sum(mark not in t.markers for t in kept),
            "round": str(i), "late_ms": round(max((t.start - returned for t in bad), default=0) * 1000, 1),
            "replicas": sorted({t.node for t in bad})}


async def _team_ready(http: httpx.AsyncClient, cl: Cluster, writer: Node, team: str, members: list[str],
                      mark: str) -> tuple[bool, bool]:
    """A new team of ``members`` (each with memories of their own, so that replicas index them) holding one
    memory with ``mark``: (every replica searched each member's turns wholly in its indexes, the member's
    and the team's; every replica injected the memory into each member's turns)."""
    await seed(cl.direct, members)
    await create_team(http, writer, team, members)
    # Team memories are never always-on, only searched: the text holds the probe's question, so that the
    # probe's search finds it (cosine 0.89 with the fake's embeddings, above RETRIEVAL_MIN_SCORE's 0.8).
    await create_team_memory(http, writer, team, f"{PROBE_TEXT} The team's code word is {mark}.")
    warmed = [await warm(http, cl.replicas, m, lookups=2) for m in members]  # one at a time: counters are per node
    since = time.monotonic()
    found = await asyncio.gather(*(until_injected(http, cl, n, m, mark, since, 10)
                                   for n in cl.replicas for m in members))
    return all(warmed), all(math.isfinite(lag) for lag, _ in found)


async def _load_while(http: httpx.AsyncClient, cl: Cluster, clients: dict[str, int],
                      act: Callable[[], Awaitable[object]]) -> tuple[dict[str, list[Turn]], float]:
    """``clients[user]`` clients per replica sending ``user``'s turns back to back, ``act`` done meanwhile;
    each client goes on until its replica served 3 of its user's turns started after ``act`` returned (or
    3 s passed). Returns each user's turns (markers filled in) and when ``act`` returned."""
    turns: dict[str, list[Turn]] = {user: [] for user in clients}
    returned = math.inf

    async def load(node: Node, user: str) -> None:
        mine = turns[user]
        while time.monotonic() < returned + 3:
            mine.append(await probe(http, node.url, user))
            if sum(t.start > returned and t.node == node.url for t in mine) >= 3:
                return

    tasks = [asyncio.create_task(load(n, u)) for n in cl.replicas for u, k in clients.items() for _ in range(k)]
    try:
        await asyncio.sleep(0.05)  # the load is on
        await act()
        returned = time.monotonic()
        await asyncio.gather(*tasks)
    finally:  # a failed act ends the load too, so that its error is the one reported, not the closed client's
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await seen(http, cl.fake_url, [t for ts in turns.values() for t in ts])
    return turns, returned


# ---------------------------------------------------------------- 3. LISTEN dropped, or partitioned

def _relistened(cl: Cluster, node: Node, old: int | None) -> bool:
    return listener_pid(cl, node) not in (None, old)


def listener_pid(cl: Cluster, node: Node) -> int | None:
    rows = cl.rows("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN memory_changed%%'",
                   [node.name])
    return int(rows[0][0]) if rows else None


async def _ready_user(http: httpx.AsyncClient, cl: Cluster, user: str, writer: Node, reader: Node
                      ) -> tuple[str, str, bool]:
    """A user whose pinned memory ``reader`` injects from its index: (memory id, marker, warmed)."""
    await seed(cl.direct, [user])
    mark = marker()
    memory_id = await create_memory(http, writer, user, f"User's code word is {mark}.")
    await until_injected(http, cl, reader, user, mark, time.monotonic(), 10)
    return memory_id, mark, await warm(http, [reader], user)


async def _stale_on(http: httpx.AsyncClient, cl: Cluster, reader: Node, user: str, mark: str, since: float,
                    seconds: float, settle: float = 2.0) -> dict[str, Any]:
    """Probe ``reader`` for ``seconds`` (or until ``settle`` seconds without injecting ``mark`` once it had
    stopped): the turns that still injected it, and when the last one started."""
    turns: list[Turn] = []
    last_stale = None
    while time.monotonic() - since < seconds:
        turn = await probe(http, reader.url, user)
        await seen(http, cl.fake_url, [turn])
        turns.append(turn)
        if mark in turn.markers:
            last_stale = turn.start
        elif time.monotonic() - (last_stale or since) > settle:
            break
    stale_turns = [t for t in turns if mark in t.markers]
    return {"turns": len(turns), "stale": len(stale_turns), "errors": sum(not t.ok for t in turns),
            "stale_for_ms": round((last_stale - since) * 1000, 1) if last_stale else 0.0}


async def listen_drop(cl: Cluster, rounds: int) -> list[dict[str, Any]]:
    """pg_terminate_backend on a replica's LISTEN connection, then the memory deleted through another
    replica: does the first replica still inject it?"""
    reader, writer = cl.replicas[-1], cl.replicas[0]
    results = []
    async with client() as http:
        for i in range(rounds):
            user = f"{cl.run}-listen-{i}"
            memory_id, mark, warmed = await _ready_user(http, cl, user, writer, reader)
            pid = listener_pid(cl, reader)
            cl.rows("SELECT pg_terminate_backend(%s)", [pid])
            await delete_memory(http, writer, user, memory_id, erase=False)
            since = time.monotonic()
            result = await _stale_on(http, cl, reader, user, mark, since, 3.0)
            wait_until(partial(_relistened, cl, reader, pid), 30, "a new listener")
            results.append({**result, "warmed": warmed, "relisten_s": round(time.monotonic() - since, 2)})
    return results


def partition(cl: Cluster, rounds: int) -> list[dict[str, Any]]:
    """The replica's LISTEN connection silenced (a relay stops forwarding, no error on either side), then
    the memory deleted through another replica: how long does the first replica still inject it?"""
    reader, writer = cl.replicas[-1], cl.replicas[0]
    target = conninfo_to_dict(cl.direct)
    if str(target.get("host", "")).startswith("/") or target.get("host") not in ("127.0.0.1", "localhost"):
        return []  # the relay is on loopback TCP: a database on a unix socket (or elsewhere) is not relayed
    relay = Relay(int(target.get("port") or 5432))
    results = []
    try:
        cl.restart([reader], cl.node_env(listen_port=relay.port))

        async def one(i: int) -> dict[str, Any]:
            async with client() as http:
                user = f"{cl.run}-partition-{i}"
                memory_id, mark, warmed = await _ready_user(http, cl, user, writer, reader)
                frozen = relay.freeze()
                await delete_memory(http, writer, user, memory_id, erase=False)
                result = await _stale_on(http, cl, reader, user, mark, time.monotonic(), 40.0)
                return {**result, "warmed": warmed, "frozen_connections": frozen}
        for i in range(rounds):
            results.append(asyncio.run(one(i)))
    finally:
        cl.restart([reader], cl.node_env())
        relay.close()
    return results


# ---------------------------------------------------------------- 4. faults under load

class Load:
    """Streamed chat turns through nginx at a fixed concurrency, in a thread of its own (its own event loop),
    each turn of a new user (so that each user's jobs are one turn's). Records every turn."""

    TEXT = "I have started learning the cello and I practise every evening after work."

    def __init__(self, cl: Cluster, prefix: str, concurrency: int) -> None:
        self.cl, self.prefix, self.concurrency = cl, prefix, concurrency
        self.turns: list[tuple[str, Turn]] = []  # (user, turn)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True, name="load")

    async def _run(self) -> None:
        async def one_client(c: int) -> None:
            async with httpx.AsyncClient(timeout=30) as http:
                n = 0
                while not self.stop.is_set():
                    user, n = f"{self.prefix}-{c}-{n}", n + 1
                    turn = Turn("", "", time.monotonic())
                    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": self.TEXT}]}
                    try:
                        async with http.stream("POST", self.cl.entry + "/v1/chat/completions", json=body,
                                               headers=user_headers(user)) as reply:
                            turn.status = reply.status_code
                            turn.node = reply.headers.get("x-upstream-addr", "")
                            raw = b"".join([chunk async for chunk in reply.aiter_bytes()])
                        if turn.status == 200 and (b"data: [DONE]" not in raw or b'"error"' in raw):
                            turn.error = "stream broken"
                    except httpx.HTTPError as exc:
                        turn.error = type(exc).__name__
                    turn.end = time.monotonic()
                    self.turns.append((user, turn))
        await asyncio.gather(*(one_client(c) for c in range(self.concurrency)))

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(60)


def _jobs_running_on(cl: Cluster, node: Node) -> int:
    return int(cl.rows("SELECT count(*) FROM memory_jobs WHERE status = 'running' AND locked_by LIKE %s",
                       [f"%:{node.proc.pid}:%"])[0][0])


class Events:
    """The faults of a run: what, when (monotonic and wall clock), back after, which replica it hit."""

    def __init__(self) -> None:
        self.list: list[dict[str, Any]] = [{"event": "steady load, before any fault", "at": 0.0, "wall": 0.0,
                                            "back_s": 0.0, "victim": ""}]

    def __call__(self, what: str, *steps: Callable[[], object], victim: str = "") -> None:
        at, wall = time.monotonic(), time.time()
        for step in steps:
            step()
        self.list.append({"event": what, "at": at, "wall": wall, "back_s": round(time.monotonic() - at, 1),
                          "victim": victim})


def faults(cl: Cluster, steady: float) -> dict[str, Any]:
    """Steady load through nginx while, in turn: a worker is killed (-9) mid-job and restarted; a replica
    is killed (-9) mid-stream and restarted on its data dir; PgBouncer restarts; PostgreSQL restarts."""
    prefix, event = f"{cl.run}-fault", Events()
    load = Load(cl, prefix, concurrency=6)
    with load:
        time.sleep(steady)
        worker = cl.workers[0]
        wait_until(lambda: _jobs_running_on(cl, worker) > 0, 10, f"{worker.name} running a job", every=0.01)
        event(f"kill -9 {worker.name} ({_jobs_running_on(cl, worker)} jobs running), restarted",
              worker.proc.kill, partial(cl.start_nodes, [worker]))
        time.sleep(steady)
        victim = cl.replicas[1 % len(cl.replicas)]
        event(f"kill -9 {victim.name} mid-stream, restarted on its data dir",
              victim.proc.kill, partial(cl.start_nodes, [victim]), victim=f"127.0.0.1:{victim.port}")
        time.sleep(steady)
        if cl.bouncer is not None:
            event("PgBouncer restarted (SIGTERM, start)", cl.bouncer.stop, cl.bouncer.start)
            time.sleep(steady)
        if cl.postgres is not None:
            event("PostgreSQL restarted (fast shutdown, start)", cl.postgres.stop, cl.postgres.start)
            time.sleep(steady * 2)  # PgBouncer waits server_login_retry (15 s) after failed logins
    drained = cl.drain(f"{prefix}-%", 120)
    return {**_tally(cl, prefix, load.turns, event.list), "drain_s": round(drained, 1)}


def _log_lines(node: Node, event: str) -> list[dict[str, Any]]:
    """The node's JSON log lines of ``event`` (every incarnation's), with ``wall`` (POSIX seconds) added."""
    from datetime import datetime

    found = []
    for line in node.proc.log.read_text(errors="replace").splitlines():
        if f'"{event}"' in line and line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == event:
                entry["wall"] = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
                found.append(entry)
    return found


def _tally(cl: Cluster, prefix: str, turns: list[tuple[str, Turn]], events: list[dict[str, Any]]) -> dict[str, Any]:
    jobs: dict[str, list[tuple[str, int]]] = {}
    created: dict[str, list[str]] = {}  # the job rows' ids and times, for the turns with two
    for user, status, attempts, job_id, at in cl.rows(
            "SELECT user_id, status, attempts, id, created_at FROM memory_jobs WHERE user_id LIKE %s ORDER BY id",
            [f"{prefix}-%"]):
        jobs.setdefault(user, []).append((status, attempts))
        created.setdefault(user, []).append(f"{job_id} at {at.isoformat()}")
    applied = Counter(int(e["job_id"]) for n in cl.workers for e in _log_lines(n, "memory_decision")
                      if e.get("status") == "done" and str(e.get("user_id", "")).startswith(prefix))
    fail_open = [e["wall"] for n in cl.replicas for e in _log_lines(n, "memory_retrieval")
                 if str(e.get("user_id", "")).startswith(prefix)]  # logged at warning: turns without memory
    held = [(e["wall"], e.get("held", 0)) for n in cl.replicas for e in _log_lines(n, "job_write_failed")]
    phases = []
    for k, ev in enumerate(events):
        until, until_wall = ((events[k + 1]["at"], events[k + 1]["wall"]) if k + 1 < len(events) else (math.inf, math.inf))
        inside = [t for _, t in turns if ev["at"] <= t.end < until]  # a turn belongs to the last fault before its end
        failed = [t for t in inside if not t.ok]
        blind = [w for w in fail_open if ev["wall"] <= w < until_wall]
        phases.append({**{k: v for k, v in ev.items() if k not in ("at", "wall")}, "turns": len(inside),
                       "failed": len(failed),
                       "failed_on_victim": sum(t.node == ev["victim"] for t in failed) if ev["victim"] else None,
                       "failed_elsewhere": sum(t.node != ev["victim"] for t in failed) if ev["victim"] else None,
                       "kinds": dict(Counter(t.error or f"HTTP {t.status}" for t in failed)),
                       "without_memory": len(blind),
                       "memory_back_s": round(max(blind) - ev["wall"], 1) if blind and k else None,
                       "held_max": max((n for w, n in held if ev["wall"] <= w < until_wall), default=0)})
    accepted = [u for u, t in turns if t.ok]
    rows = [j for js in jobs.values() for j in js]
    return {
        "turns": len(turns), "accepted": len(accepted), "failed": len(turns) - len(accepted),
        "jobs_written": len(rows), "jobs_done": sum(s == "done" for s, _ in rows),
        "jobs_dead": sum(s == "dead" for s, _ in rows), "jobs_pending": sum(s in ("queued", "running") for s, _ in rows),
        "jobs_retried": sum(a > 1 for _, a in rows), "turns_with_two_jobs": sum(len(js) > 1 for js in jobs.values()),
        "jobs_applied_twice": sum(n > 1 for n in applied.values()),
        "lost": sum(not any(s == "done" for s, _ in jobs.get(u, [])) for u in accepted),
        "lost_no_job_row": sum(u not in jobs for u in accepted),
        "jobs_of_failed_turns": sum(u in jobs for u, t in turns if not t.ok),
        "phases": phases,
        "odd_turns": [{"user": u, "node": t.node, "status": t.status, "error": t.error, "jobs": created.get(u, []),
                       "sent_at": time.time() - (time.monotonic() - t.start)}
                      for u, t in turns if len(jobs.get(u, [])) > 1 or (not t.ok and u in jobs)][:20],
    }


# ---------------------------------------------------------------- 5 and 6. volume: latency, throughput, CPU

async def _volume(url: str, users: list[str], requests: int, time_limit: float) -> LoadResult:
    """``len(users)`` concurrent streams of relay.BODY, one per user, ``requests`` in all (or ``time_limit``)."""
    per = max(requests // len(users), 1)
    results = await asyncio.gather(*(run_load_async(url, user_headers(u), BODY, requests=per, concurrency=1,
                                                    time_limit=time_limit, warmup=1) for u in users))
    return summarise([s for r in results for s in r.samples], len(users), max(r.wall_s for r in results))


def volume(cl: Cluster, url: str, users: list[str], requests: int, time_limit: float,
           cpu: Callable[[], dict[str, float]] | None = None, database: str | None = None,
           nodes: list[Node] | None = None) -> dict[str, Any]:
    """A volume run and the CPU it cost (``cpu()`` by role, read before the run and once the bench users'
    jobs are done, in ``database`` with ``nodes``' outboxes empty: by default the cluster's)."""
    cpu = cpu or cl.cpu
    before = cpu()
    try:
        import uvloop
        result = uvloop.run(_volume(url + "/v1/chat/completions", users, requests, time_limit))
    except ImportError:
        result = asyncio.run(_volume(url + "/v1/chat/completions", users, requests, time_limit))
    drained = cl.drain(f"{cl.run}-bench-%", 300, database, nodes)
    used = {k: (v - before[k]) * 1000 / max(result.ok, 1) for k, v in cpu().items()}
    return {"turns": result.requests, "ok": result.ok, "errors": result.errors, "error_kinds": result.error_kinds,
            "rps": result.rps, "ttft_p50": result.ttft_p50, "ttft_p99": result.ttft_p99,
            "total_p50": result.total_p50, "total_p99": result.total_p99, "drain_s": round(drained, 1),
            "cpu_ms_per_turn": {k: round(v, 2) for k, v in used.items()}}


def bench_users(cl: Cluster, count: int) -> list[str]:
    users = [f"{cl.run}-bench-{i}" for i in range(count)]
    asyncio.run(seed(cl.direct, users, count=50, relevant_to=QUESTION))
    return users


def pgbouncer_vs_direct(cl: Cluster, users: list[str], turns: int) -> dict[str, Any]:
    """``turns`` memory turns through nginx with DATABASE_URL through PgBouncer, then the same direct."""
    out = {}
    for mode in ("pgbouncer", "direct"):
        if cl.mode != mode:
            cl.use(mode)
        out[mode] = volume(cl, cl.entry, users, turns, 3600)
    return out


def throughput(cl: Cluster, users: list[str], seconds: float) -> dict[str, Any]:
    """Through nginx over 1, 2, …, all replicas (the workers apart), then one ``serve`` with its worker in
    process on a database of its own; CPU billed until the queue drained."""
    out: dict[str, Any] = {}
    assert cl.nginx is not None
    for n in range(1, len(cl.replicas) + 1):
        cl.nginx.configure([r.port for r in cl.replicas[:n] if r.port])
        out[f"{n} replica{'s' if n > 1 else ''}"] = volume(cl, cl.nginx.url, users, 10**6, seconds)
    cl.nginx.configure([r.port for r in cl.replicas if r.port])
    out["single serve (worker in process)"] = single(cl, users, seconds)
    return out


def single(cl: Cluster, users: list[str], seconds: float) -> dict[str, Any]:
    """One ``serve`` with WORKER_IN_PROCESS=true on a database of its own (the cluster's workers cannot take
    its jobs), DATABASE_URL direct, no load balancer; the cluster's replicas and workers stopped meanwhile."""
    from psycopg.conninfo import make_conninfo

    from .cluster import DATABASE
    database = f"{DATABASE}_single"
    with cl.db() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
    url = make_conninfo(cl.direct, dbname=database)
    node = Node("single", cl.work, {**cl.node_env("direct"), "DATABASE_URL": url, "WORKER_IN_PROCESS": "true"},
                port=free_port())
    for n in cl.nodes:
        n.proc.stop()
    try:
        node.start()
        node.wait_ready()
        asyncio.run(seed(url, users, count=50, relevant_to=QUESTION))

        def cpu() -> dict[str, float]:
            return {"serve": node.proc.cpu(), "postgres": cl.postgres.proc.cpu() if cl.postgres else 0.0}
        return volume(cl, node.url, users, 10**6, seconds, cpu=cpu, database=url, nodes=[node])
    finally:
        node.proc.stop()
        cl.start_nodes(cl.nodes)
