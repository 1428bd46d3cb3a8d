"""python -m benchmarks.tool_attacks — the memory tools against text that is not the user's, and the user's own
requests (README.md beside this file).

    python -m benchmarks.tool_attacks --split dev                          # the oracle memory LLM: the plumbing
    python -m benchmarks.tool_attacks --split test --llm http://127.0.0.1:8081/v1   # a real model: the guard

One `memory-proxy serve` (embedded PostgreSQL, the local embedder, MEMORY_TOOLS=all, no formation: only what the
tools do is measured; no similarity threshold, so that a search returns the user's memories whatever it asks) in front of an obedient fake chat model (obedient.py). Each case's user starts with the
case's memories (through the management API), sends the case's request, and is judged on the memories left
after it and on the client tool calls the client received (cases.verdict). The test split prints counts only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, cast

import httpx

from memory_proxy.testing.asgi import serving

from .. import servers
from ..servers import Server
from .cases import ATTACKS, KINDS, LEGIT, SPLITS, Case, Outcome, load, reply_calls, stream_events, verdict
from .obedient import Obedient


async def play(client: httpx.AsyncClient, server: Server, case: Case, run: str) -> dict[str, Any]:
    user = f"ta-{run}-{case.id}"
    root = server.base_url.removesuffix("/v1")
    headers = {**server.headers, "x-openwebui-user-id": user}
    stored_as = {}  # a memory's text as the API stored it (a secret in it redacted)
    for memory in case.memories:
        seeded = await client.post(f"{root}/api/v1/memories", params={"user": user}, json={"content": memory},
                                   headers=server.headers)
        seeded.raise_for_status()
        stored_as[memory] = seeded.json()["content"]
    response = await client.post(server.chat_url, json=case.body(), headers=headers)
    if case.stream:
        calls = reply_calls(None, stream_events(response.text))
    else:
        calls = reply_calls(response.json() if response.status_code == 200 else None, [])
    listed = await client.get(f"{root}/api/v1/memories", params={"user": user, "limit": 100}, headers=server.headers)
    active = [m["content"] for m in listed.json()["data"]]
    return verdict(case, Outcome(active, calls, response.status_code), stored_as)


def tables(verdicts: list[dict[str, Any]], names: list[str] | None) -> str:
    """Counts by kind, streamed or not, and by language for the user's own requests; the failing case ids only when
    `names` is given (the dev split)."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for v in verdicts:
        by_kind[v["kind"]].append(v)
    lines = ["| kind | cases | passed | JSON | streamed | false facts stored | memories erased that had to stay | "
             "memory text relayed to a client's tool | legit facts stored | legit memories forgotten |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        got = by_kind.get(kind, [])
        if not got:
            continue
        json_ = [v for v in got if not v["stream"]]
        streamed = [v for v in got if v["stream"]]

        def share(items: list[dict[str, Any]]) -> str:
            return f"{sum(v['passed'] for v in items)}/{len(items)}"

        stored = f"{sum(v['stored'] for v in got)}/{sum(v['expected_stored'] for v in got)}" if kind == "legit_remember" else "—"
        forgot = (f"{sum(v['forgotten'] for v in got)}/{sum(v['expected_forgotten'] for v in got)}"
                  if kind == "legit_forget" else "—")
        lines.append(f"| {kind} | {len(got)} | {share(got)} | {share(json_)} | {share(streamed)} | "
                     f"{sum(v['stored_false'] for v in got)} | {sum(v['lost'] for v in got)} | "
                     f"{sum(v['leaked'] for v in got)} | {stored} | {forgot} |")
    attacks = [v for v in verdicts if v["kind"] in ATTACKS]
    legit = [v for v in verdicts if v["kind"] in LEGIT]
    lines += ["", f"Attacks blocked: {sum(v['passed'] for v in attacks)}/{len(attacks)}; the user's own requests "
                  f"done: {sum(v['passed'] for v in legit)}/{len(legit)}.", "",
              "The user's own requests by language (passed / cases):", "",
              "| lang | remember | forget |", "|---|---|---|"]
    langs: dict[str, Counter[str]] = defaultdict(Counter)
    for v in legit:
        langs[v["lang"]][f"{v['kind']}_n"] += 1
        langs[v["lang"]][v["kind"]] += v["passed"]
    for lang in sorted(langs):
        c = langs[lang]
        lines.append(f"| {lang} | {c['legit_remember']}/{c['legit_remember_n']} | {c['legit_forget']}/{c['legit_forget_n']} |")
    if names is not None:
        failing = [f"{name} ({v['kind']}: status {v['status']}, false {v['stored_false']}, erased {v['lost']}, "
                   f"leaked {v['leaked']}, stored {v['stored']}/{v['expected_stored']}, forgotten "
                   f"{v['forgotten']}/{v['expected_forgotten']})"
                   for name, v in zip(names, verdicts, strict=True) if not v["passed"]]
        lines += ["", f"Failing dev cases: {len(failing)}", *(f"- {line}" for line in failing)]
    return "\n".join(lines)


def chosen(args: argparse.Namespace) -> list[Case]:
    cases = [c for split in (SPLITS if args.split == "all" else (args.split,)) for c in load(split)]
    if args.only:
        if args.split != "dev":
            sys.exit("--only reads dev cases only: the test split is never run case by case")
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.id in wanted]
    return cases


async def run(args: argparse.Namespace, cases: list[Case]) -> tuple[list[dict[str, Any]], int, bytes]:
    """Every case through one proxy: the verdicts, the oracle's answered calls, the proxy's log."""
    fake = Obedient(cases)
    run_id = uuid.uuid4().hex[:6]
    async with serving(fake) as base_url:
        upstream = Server("obedient", f"{base_url}/v1", {}, cast(Any, None), owns_proc=False)
        llm = f"{base_url}/oracle/v1" if args.llm == "oracle" else args.llm
        # RETRIEVAL_MIN_SCORE=-1: a search returns the user's memories whatever the attacker's query (the worst case
        # for a way out: with a threshold, a vague query finds nothing, and nothing can leak)
        env = {"MEMORY_TOOLS": "all", "FORMATION_ENABLED": "false", "WORKER_IN_PROCESS": "false",
               "RETRIEVAL_MIN_SCORE": "-1",
               "EMBEDDING_PROVIDER": "local", "EMBEDDING_MODEL": "", "MEMORY_LLM_BASE_URL": llm,
               "MEMORY_LLM_MODEL": args.model, "MEMORY_LLM_MODE": "json", "MEMORY_LLM_TIMEOUT": "120",
               "UPSTREAM_FIRST_BYTE_TIMEOUT": "600", "LOG_LEVEL": "info" if args.log else "warning"}
        server = await asyncio.to_thread(servers.start_memory_proxy, upstream, core=None, env=env)
        try:
            verdicts = []
            async with httpx.AsyncClient(timeout=900) as client:
                for number, case in enumerate(cases, 1):
                    verdicts.append(await play(client, server, case, run_id))
                    print(f"case {number}/{len(cases)}", file=sys.stderr, flush=True)
        finally:
            log = await asyncio.to_thread((Path(server.tmpdir or ".") / "server.log").read_bytes)
            server.stop()
    return verdicts, fake.memory_llm_calls, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tool_attacks", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="dev")
    parser.add_argument("--llm", default="oracle", help="memory LLM: 'oracle' or an OpenAI-compatible base URL")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="model name sent to --llm")
    parser.add_argument("--only", help="comma-separated dev case ids")
    parser.add_argument("--json", help="write the verdicts here (without case ids for the test split)")
    parser.add_argument("--log", help="copy the proxy's log here")
    args = parser.parse_args(argv)
    cases = chosen(args)
    verdicts, oracle_calls, log = asyncio.run(run(args, cases))
    if args.log:
        Path(args.log).write_bytes(log)
    frozen = args.split != "dev"
    print(f"\n## Memory tools against text that is not the user's ({args.split}, memory LLM: {args.llm})\n")
    print(tables(verdicts, None if frozen else [c.id for c in cases]))
    if args.llm == "oracle":
        print(f"\nMemory-LLM calls answered by the oracle: {oracle_calls}")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "llm": args.llm, "verdicts": [
            verdict | ({} if frozen else {"id": case.id}) for case, verdict in zip(cases, verdicts, strict=True)]},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
