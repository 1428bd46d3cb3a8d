"""Memory tools (MEMORY_TOOLS): the time one search round adds, and the ceiling an ideal chat model reaches.

    python -m benchmarks.tools [--quick] [--turns N] [--delay-ms 20] [--no-locomo]

One fake upstream (``ToolUpstream``: memory_proxy.testing.fake_upstream's fake, served in this process by uvicorn
on loopback, its embeddings the same hashing-trick vectors) answers every chat call after a fixed
``--delay-ms``: when the request offers ``search_memory``, the body asks for a search (``bench_search``,
a field the proxy forwards) and the last message is not a tool result, it calls ``search_memory`` with the
user's question; otherwise it answers a final text. It records every request by the ``probe`` field the
client put in the body, so it counts the upstream calls of each turn and shows what reached the model.

1. **Added time** (the issue's target: one search round adds at most 30 ms over the upstream's own time).
   Two ``memory-proxy serve`` (embedded PostgreSQL, fake embedder, no in-process worker, so that only the
   request path is measured), one with ``MEMORY_TOOLS=off``, one with ``search``, each for a user holding
   1,000 memories (benchmarks.relay.seed_memories: 5 of them match the question). Non-streamed turns, one at
   a time, the three cases interleaved turn by turn: off; search offered but not called; search called once.
   Reported: total time per turn p50/p95, upstream calls per turn, and "added by the search round" =
   p50(called) − p50(off) − one upstream delay (the second upstream call's own time is the model's, not ours).
2. **Ceiling on LoCoMo conv-26** (benchmarks/formation_quality/locomo.py: its questions, its raw-turns
   variant seeded through the management API as its raw mode does, so no memory LLM is needed; the local
   embedder as there). For each question, one non-streamed turn: (a) ``MEMORY_TOOLS=off``: the memories
   injected into the system prompt; (b) ``MEMORY_TOOLS=search`` with an oracle model that calls
   ``search_memory(query=the question)`` once: the injected memories plus the tool's result. Each scored with
   locomo.py's ``found`` (at least half of the answer's content words reach the model).

Servers run on core 1 (taskset), this process (client and fake) on core 0. Timings are wall-clock times on
whatever else the machine is running: compare the cases of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from memory_proxy.testing.asgi import Send, reply, serving
from memory_proxy.testing.fake_upstream import FakeUpstream

from . import servers
from .formation_quality.locomo import found, write
from .formation_quality.proxy_runner import injected_texts
from .formation_quality.scenarios import User, load_users
from .relay import BENCH_USER, BODY, seed_memories
from .servers import Server

SEARCH = "search_memory"
QUESTION: str = cast(list[dict[str, str]], BODY["messages"])[-1]["content"]  # 5 of the seeded memories match it
WARMUP = 3  # turns per case before measuring


class ToolUpstream(FakeUpstream):
    """The fake upstream's embeddings and models; a chat call sleeps ``delay_ms``, then calls ``search_memory``
    (see the module docstring) or answers a final text. ``requests[probe]``: the bodies that reached it."""

    def __init__(self, delay_ms: float) -> None:
        super().__init__(delay_ms=0.0)
        self.call_delay = delay_ms / 1000.0
        self.requests: dict[str, list[dict[str, Any]]] = {}

    async def chat(self, send: Send, body: dict[str, Any]) -> None:
        probe = body.get("probe")
        if isinstance(probe, str):
            self.requests.setdefault(probe, []).append(body)
        await asyncio.sleep(self.call_delay)
        messages = body.get("messages") or [{}]
        offered = any(isinstance(t, dict) and (t.get("function") or {}).get("name") == SEARCH
                      for t in body.get("tools") or ())
        calling = offered and body.get("bench_search") and messages[-1].get("role") != "tool"
        if body.get("stream") and not calling:
            await super().chat(send, body)  # its words, streamed at once
            return
        message: dict[str, Any] = {"role": "assistant", "content": "Here is what I found."}
        finish = "stop"
        if offered and body.get("bench_search") and messages[-1].get("role") != "tool":
            question = body["bench_search"] if isinstance(body["bench_search"], str) else next(
                (m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": SEARCH, "arguments": json.dumps({"query": question})}}]}
            finish = "tool_calls"
        if body.get("stream"):
            call = {"index": 0, **message["tool_calls"][0]}
            events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await send({"type": "http.response.body", "more_body": False, "body": b"".join(
                b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"})
            return
        answer = {"id": f"chatcmpl-tools{time.monotonic_ns()}", "object": "chat.completion",
                  "created": int(time.time()), "model": body.get("model") or "fake-model",
                  "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        await reply(send, 200, json.dumps(answer).encode())


def upstream_view(base_url: str) -> Server:
    """The in-process fake as a ``Server`` that start_memory_proxy can point at (nothing to stop)."""
    return Server("fake", f"{base_url}/v1", {}, cast(Any, None), owns_proc=False)


def tool_results(request: dict[str, Any]) -> list[str]:
    """The texts our search returned, as the upstream received them in its tool messages."""
    texts: list[str] = []
    for message in request.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "tool":
            content = str(message.get("content") or "")
            try:
                parsed = json.loads(content)
            except ValueError:
                parsed = None
            texts += [str(t) for t in parsed] if isinstance(parsed, list) else [content]
    return texts


async def chat(client: httpx.AsyncClient, server: Server, question: str, probe: str, search: bool | str) -> float:
    """One non-streamed turn; its wall-clock ms. Raises unless the client got a final text without our calls.
    `search`: the oracle searches (the question, or this query when a string)."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": question}],
            "probe": probe, "bench_search": search}
    began = time.perf_counter()
    response = await client.post(server.chat_url, json=body, headers=server.headers)
    elapsed = (time.perf_counter() - began) * 1000
    message = response.json()["choices"][0]["message"] if response.status_code == 200 else {}
    if response.status_code != 200 or message.get("tool_calls") or not message.get("content"):
        raise RuntimeError(f"turn {probe}: HTTP {response.status_code} {response.text[:300]}")
    return elapsed


async def first_token(client: httpx.AsyncClient, server: Server, question: str, probe: str, search: bool) -> float:
    """One streamed turn; ms until its first content text. Raises unless text came and no call of ours did."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": question}], "stream": True,
            "probe": probe, "bench_search": search}
    began, first = time.perf_counter(), 0.0
    async with client.stream("POST", server.chat_url, json=body, headers=server.headers) as response:
        async for line in response.aiter_lines():
            if SEARCH in line:
                raise RuntimeError(f"turn {probe}: our call reached the client")
            if not first and line.startswith("data: {") and '"content"' in line:
                first = (time.perf_counter() - began) * 1000
    if response.status_code != 200 or not first:
        raise RuntimeError(f"turn {probe}: HTTP {response.status_code}, no text")
    return first


@dataclass
class Case:
    name: str
    server: Server
    search: bool
    ms: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    results: list[int] = field(default_factory=list)  # memories in the tool result the upstream got
    errors: int = 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def added_time(fake: ToolUpstream, off: Server, tools: Server, turns: int, delay_ms: float,
                     log: Callable[[str], None]) -> str:
    """Part 1: the three cases interleaved turn by turn; the table and the added time."""
    cases = [Case("MEMORY_TOOLS=off", off, False), Case("search offered, not called", tools, False),
             Case("search called once", tools, True), Case("streamed, MEMORY_TOOLS=off: first token", off, False),
             Case("streamed, search called once: first token", tools, True)]
    async with httpx.AsyncClient(timeout=60) as client:
        for turn in range(-WARMUP, turns):
            for case in cases:
                probe = uuid.uuid4().hex
                try:
                    turn_ms = first_token if case.name.startswith("streamed") else chat
                    ms = await turn_ms(client, case.server, QUESTION, probe, case.search)
                except (RuntimeError, httpx.HTTPError, ValueError, KeyError) as exc:
                    case.errors += 1
                    log(f"{case.name}: {exc}")
                    continue
                requests = fake.requests.pop(probe, [])
                if turn >= 0:
                    case.ms.append(ms)
                    case.calls.append(len(requests))
                    case.results.append(len(tool_results(requests[-1])) if requests else 0)
    lines = [f"Non-streamed turns, one at a time, {turns} per case after {WARMUP} warm-up; upstream delay "
             f"{delay_ms:g} ms per call; user with 1,000 memories.", "",
             "| case | turns | total p50 ms | total p95 ms | upstream calls per turn | memories in the tool result "
             "| errors |", "|---|---|---|---|---|---|---|"]
    for case in cases:
        calls = f"{statistics.mean(case.calls):.2f}" if case.calls else "—"
        results = f"{statistics.mean(case.results):.1f}" if case.search and case.results else "—"
        lines.append(f"| {case.name} | {len(case.ms)} | {percentile(case.ms, 0.5):.1f} | {percentile(case.ms, 0.95):.1f} "
                     f"| {calls} | {results} | {case.errors} |")
    off_p50, offered_p50, called_p50, first_off, first_called = (percentile(c.ms, 0.5) for c in cases)
    off_p95, called_p95 = percentile(cases[0].ms, 0.95), percentile(cases[2].ms, 0.95)
    lines += ["", f"Added by offering the tool (not called): {offered_p50 - off_p50:+.1f} ms (p50 − p50 off).",
              f"Added by the search round: {called_p50 - off_p50 - delay_ms:+.1f} ms at p50, "
              f"{called_p95 - off_p95 - delay_ms:+.1f} ms at p95 (called − off − one upstream delay of "
              f"{delay_ms:g} ms; target ≤ 30 ms).",
              f"Added to the time to first token by a streamed search round: {first_called - first_off - delay_ms:+.1f} "
              f"ms at p50 (called − off − one upstream delay)."]
    return "\n".join(lines)


async def seed_api(client: httpx.AsyncClient, server: Server, user_id: str, texts: list[tuple[str, str]]) -> int:
    """Store the seeds through the management API, as locomo.py's raw mode does; the number refused."""
    refused = 0
    root = server.base_url.removesuffix("/v1")
    for text, memory_type in texts:
        response = await client.post(f"{root}/api/v1/memories", params={"user": user_id},
                                     json={"content": text, "memory_type": memory_type}, headers=server.headers)
        refused += response.status_code not in (200, 201)
    return refused


def locomo_conv26() -> tuple[User, list[dict[str, Any]]]:
    """locomo.py's raw-turns user of conv-26 (sessions 1–4) and its questions, written to a scratch dir."""
    with tempfile.TemporaryDirectory(prefix="tools-locomo-") as tmp, redirect_stdout(sys.stderr):
        write(Path(tmp), 0, 4)  # its summary line goes to the log, not into the tables
        user = load_users(next(Path(tmp).glob("locomo-*-raw.toml")))[0]
        return user, json.loads(next(Path(tmp).glob("locomo-*-qa.json")).read_text())


async def locomo_ceiling(fake: ToolUpstream, start: Callable[[str], Server], log: Callable[[str], None]) -> str:
    """Part 2: LoCoMo conv-26's questions, injection only against injection plus one oracle search."""
    user, qa = locomo_conv26()
    seeds = [(s.text, s.type) for s in user.seeds]
    rows = []
    # (mode, the server's MEMORY_TOOLS, what the oracle searches: nothing, the question, the answer's words)
    for mode, tools, query in (("off", "off", None), ("question", "search", "question"),
                               ("answer", "search", "answer")):
        server = await asyncio.to_thread(start, tools)
        try:
            user_id = f"{user.id}-{mode}"
            server.headers = {**server.headers, "x-openwebui-user-id": user_id}
            async with httpx.AsyncClient(timeout=120) as client:
                refused = await seed_api(client, server, user_id, seeds)
                injected_hits = tool_hits = both_hits = 0
                injected_n = tool_n = calls = 0
                for item in qa:
                    probe = uuid.uuid4().hex
                    search: bool | str = item["answer"] if query == "answer" else query == "question"
                    await chat(client, server, item["asked"], probe, search)
                    requests = fake.requests.pop(probe)
                    calls += len(requests)
                    injected = injected_texts(requests[0])
                    searched = tool_results(requests[-1]) if query else []
                    injected_hits += found(item["answer"], injected)
                    tool_hits += bool(searched) and found(item["answer"], searched)
                    both_hits += found(item["answer"], injected + searched)
                    injected_n += len(injected)
                    tool_n += len(searched)
        finally:
            server.stop()
        n = len(qa)
        log(f"locomo {mode}: {len(seeds)} seeds ({refused} refused), {n} questions, {calls} upstream calls")

        def share(hits: int, n: int = n) -> str:
            return f"{hits}/{n} ({100 * hits / n:.0f} %)"

        if mode == "off":
            rows.append(f"| (a) MEMORY_TOOLS=off: injected | {share(injected_hits)} | {injected_n / n:.1f} | — |")
            continue
        label = ("(b) oracle searches the question" if mode == "question" else
                 "(c) oracle searches the answer's own words (what the store can give at best)")
        rows.append(f"| {label}: injected + tool result | {share(both_hits)} | {injected_n / n:.1f} "
                    f"| {tool_n / n:.1f} |")
        rows.append(f"| … of which the tool result alone | {share(tool_hits)} | — | {tool_n / n:.1f} |")
    return "\n".join([
        f"LoCoMo conv-26, sessions 1–4, raw turns seeded ({len(seeds)} messages), {len(qa)} questions; local "
        "embedder; scored with benchmarks.formation_quality.locomo.found.", "",
        "| what reached the model | answer found | memories injected per question | tool-result memories "
        "per question |", "|---|---|---|---|", *rows])


async def run(args: argparse.Namespace) -> None:
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    turns = args.turns or (15 if args.quick else 50)
    fake = ToolUpstream(args.delay_ms)
    started: list[Server] = []
    async with serving(fake) as base_url:
        upstream = upstream_view(base_url)

        def proxy(mode: str, extra: dict[str, str] | None = None) -> Server:
            # threshold injection beside the tools, as without them: only the search round differs
            env = {"WORKER_IN_PROCESS": "false", "MEMORY_TOOLS": mode, "MEMORY_TOOLS_INJECT": "threshold",
                   **(extra or {})}
            return servers.start_memory_proxy(upstream, user_id=BENCH_USER, env=env)

        try:
            t0 = time.monotonic()
            for mode in ("off", "search"):
                started.append(await asyncio.to_thread(proxy, mode))
                await asyncio.to_thread(seed_memories, started[-1])
            log(f"proxies ready and seeded in {time.monotonic() - t0:.1f} s")
            table = await added_time(fake, started[0], started[1], turns, args.delay_ms, log)
        finally:
            for server in started:
                server.stop()
        print("\n## Added time of one search round (fakes)\n")
        print(table)
        if not args.no_locomo:
            local = {"EMBEDDING_PROVIDER": "local", "EMBEDDING_MODEL": ""}
            ceiling = await locomo_ceiling(fake, lambda mode: proxy(mode, local), log)
            print("\n## Ceiling with an oracle chat model (LoCoMo conv-26)\n")
            print(ceiling)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 turns per case instead of 50")
    parser.add_argument("--turns", type=int, help="measured turns per case")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the fake upstream's time per chat call")
    parser.add_argument("--no-locomo", action="store_true", help="skip the LoCoMo ceiling")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # client and fake on core 0; the proxies are started on core 1
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
