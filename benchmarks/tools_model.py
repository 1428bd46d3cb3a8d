"""Memory tools with a real chat model: Qwen2.5-Coder-1.5B on llama.cpp's own server, beside mem0's search.

    python -m benchmarks.tools_model [--llm URL] [--questions N] [--max-tokens 100] [--out DIR]

The questions of LoCoMo conv-26 (benchmarks/formation_quality/locomo.py, sessions 1–4: categories 1, 3 and 4,
the speaker's name turned into "I"), asked one by one, streamed, as a client of the proxy would, with the same
memories behind every system: the conversation's raw messages (benchmarks/tools.py's seeding through the
management API, so no memory LLM is involved and every system holds the same texts). The chat model is
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) served by llama.cpp's `llama-server` (setup_llama.sh, native: built from
source, the GGUF's own chat template, `--jinja`), reached through a recording relay (benchmarks/openwebui/
stack.ModelsShim) that keeps every request the model got and the end of every reply (its usage).

Systems, each on the same questions:
- `off`: memory-proxy with MEMORY_TOOLS=off: the memories injected for the question;
- `search_threshold`: MEMORY_TOOLS=search, MEMORY_TOOLS_INJECT=threshold (injection as without tools, plus
  the model may search);
- `search_always_on`: MEMORY_TOOLS=search, MEMORY_TOOLS_INJECT=always_on (the default: only pinned/identity
  memories injected, which these raw messages are not, so the model must search);
- `mem0`: mem0 2.2.1's `search(question, top_k=10)` over the same texts (formation_quality/mem0_search.py, the
  same local embedder), put before the question in mem0's documented prompt, sent to the same model directly.

Per system: answers reached (the answer's content words found, locomo.py's `found`, in what the model was given:
injected memories and tool results), answers given (the same test on the model's reply), tool calls per turn
(read from the proxy's metrics: by outcome, and how many the model wrote as text), replies that still show a
call as text, upstream requests and tokens (prompt + completion, from the server's usage) per turn, time to the
first answer token and whole-turn time (means; the model runs on the same 2 cores as everything else).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from . import servers
from .formation_quality.embed_server import serve_in_background
from .formation_quality.locomo import found
from .formation_quality.proxy_runner import injected_texts
from .openwebui.stack import ModelsShim, served_model, start_llama
from .servers import ROOT, Server
from .tools import locomo_conv26, seed_api, tool_results

SYSTEMS = {"off": {"MEMORY_TOOLS": "off"},
           "search_threshold": {"MEMORY_TOOLS": "search", "MEMORY_TOOLS_INJECT": "threshold"},
           "search_always_on": {"MEMORY_TOOLS": "search", "MEMORY_TOOLS_INJECT": "always_on"}}
MEM0_PROMPT = "You are a helpful AI. Answer the question based on query and memories.\nUser Memories:\n{memories}"
WRITTEN_CALL = re.compile(r'"name"\s*:\s*"(search_memory|remember|forget)"')


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Turn:
    reached: bool
    answered: bool
    shown_call: bool
    requests: int
    tokens: int
    ttft_ms: float
    total_ms: float
    calls: list[str] = field(default_factory=list)  # the calls the model made, as the upstream saw them next
    reply: str = ""


@dataclass
class System:
    name: str
    turns: list[Turn] = field(default_factory=list)
    calls: dict[str, float] = field(default_factory=dict)  # tool_calls_total by outcome, and "written"
    errors: int = 0


def reply_usage(tail: str) -> tuple[int, int]:
    """(prompt, completion) tokens of one reply, from the last event of its end that carries a usage."""
    for line in reversed(tail.splitlines()):
        if line.startswith("data:") and '"usage"' in line:
            try:
                usage = json.loads(line[5:]).get("usage") or {}
            except ValueError:
                continue
            return int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return 0, 0


def usage_tokens(tail: str) -> int:
    """prompt + completion tokens of one reply."""
    return sum(reply_usage(tail))


def made_calls(request: dict[str, Any]) -> list[str]:
    """The calls of the assistant messages in a request: `name(arguments)`."""
    return [f"{c['function']['name']}({c['function']['arguments']})" for m in request.get("messages", ())
            if m.get("role") == "assistant" for c in m.get("tool_calls") or ()]


async def streamed(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                   body: dict[str, Any]) -> tuple[str, float, float]:
    """One streamed turn: (the reply's text, ms to its first text, ms in all)."""
    began = time.perf_counter()
    first, text = 0.0, []
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            for choice in event.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    first = first or (time.perf_counter() - began) * 1000
                    text.append(piece)
    return "".join(text), first, (time.perf_counter() - began) * 1000


def proxy_metrics(server: Server) -> dict[str, float]:
    """memory_proxy_tool_calls_total by outcome, and the calls written as text."""
    text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", headers=server.headers, timeout=30).text
    calls: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("memory_proxy_tool_calls_total{"):
            outcome = re.search(r'outcome="([^"]+)"', line)
            key = outcome.group(1) if outcome else "?"
            calls[key] = calls.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("memory_proxy_tool_calls_written_total "):
            calls["written as text"] = float(line.rsplit(" ", 1)[1])
    return calls


async def ask(system: System, shim: ModelsShim, client: httpx.AsyncClient, url: str, headers: dict[str, str],
              body: dict[str, Any], answer: str, given: list[str] | None) -> None:
    """One question; `given`: what the model was given, when known without reading its requests (mem0)."""
    probe = uuid.uuid4().hex
    shim.requests.clear()
    try:
        reply, ttft, total = await streamed(client, url, headers, {**body, "probe": probe})
    except (RuntimeError, httpx.HTTPError, ValueError) as exc:
        system.errors += 1
        log(f"{system.name}: {exc}")
        return
    requests = [n for n in shim.requests if (n.get("body") or {}).get("probe") == probe]
    bodies = [n["body"] for n in requests]
    if given is None:  # injected before the turn, and every search result of its rounds
        given = [*(injected_texts(bodies[0]) if bodies else []), *(r for b in bodies for r in tool_results(b))]
    system.turns.append(Turn(found(answer, given), found(answer, [reply]), bool(WRITTEN_CALL.search(reply)),
                             len(requests), sum(usage_tokens(n.get("tail", "")) for n in requests), ttft, total,
                             max((made_calls(b) for b in bodies), key=len, default=[]), reply))


def mem0_found(texts: list[str], questions: list[str], embed_url: str) -> list[list[str]]:
    """mem0's search results per question (formation_quality/mem0_search.py in mem0's venv)."""
    mem0_py = subprocess.run(["bash", str(ROOT / "benchmarks/formation_quality/setup_mem0.sh")], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory(prefix="tools-mem0-") as tmp:
        given, out = Path(tmp) / "in.json", Path(tmp) / "out.json"
        given.write_text(json.dumps({"texts": texts, "questions": questions}))
        subprocess.run([mem0_py, str(ROOT / "benchmarks/formation_quality/mem0_search.py"), "--embed-base-url",
                        embed_url, "--input", str(given), "--out", str(out)], check=True)
        return list(json.loads(out.read_text())["found"])


def table(systems: list[System], n: int) -> str:
    def mean(values: list[float]) -> str:
        return f"{statistics.mean(values):.0f}" if values else "—"

    rows = ["| system | answer reached the model | answer in the reply | calls shown as text | tool calls "
            "(by outcome) | upstream requests / turn | tokens / turn | time to first token ms | turn ms | "
            "errors |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in systems:
        t = s.turns
        calls = ", ".join(f"{k} {v:g}" for k, v in sorted(s.calls.items())) or "—"
        rows.append(f"| {s.name} | {sum(x.reached for x in t)}/{n} | {sum(x.answered for x in t)}/{n} | "
                    f"{sum(x.shown_call for x in t)} | {calls} | {statistics.mean([x.requests for x in t]):.2f} | "
                    f"{mean([x.tokens for x in t])} | {mean([x.ttft_ms for x in t if x.ttft_ms])} | "
                    f"{mean([x.total_ms for x in t])} | {s.errors} |")
    return "\n".join(rows)


async def run(args: argparse.Namespace) -> str:
    user, qa = locomo_conv26()
    qa = qa[:args.questions] if args.questions else qa
    seeds = [(s.text, s.type) for s in user.seeds]
    out = args.out or Path(tempfile.mkdtemp(prefix="tools-model-"))
    out.mkdir(parents=True, exist_ok=True)
    llama = None
    base = args.llm
    if not base:
        llama, base = await start_llama("llama", out, server="native")
    shim = ModelsShim(base, keep=True)
    systems: list[System] = []
    try:
        shim_url = await shim.start()
        model = served_model(base)
        upstream = Server("llama-server", shim_url, {}, cast(Any, None), owns_proc=False)
        body = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                "max_tokens": args.max_tokens, "temperature": 0}
        local = {"EMBEDDING_PROVIDER": "local", "EMBEDDING_MODEL": "", "FORMATION_ENABLED": "false",
                 "WORKER_IN_PROCESS": "false"}
        async with httpx.AsyncClient(timeout=900) as client:
            for name, extra in SYSTEMS.items():
                if name not in args.systems:
                    continue
                server = await asyncio.to_thread(servers.start_memory_proxy, upstream,
                                                 user_id=f"{user.id}-{name}", env={**local, **extra})
                try:
                    await seed_api(client, server, f"{user.id}-{name}", seeds)
                    system = System(name)
                    for i, item in enumerate(qa):
                        messages = [{"role": "user", "content": item["asked"]}]
                        await ask(system, shim, client, server.chat_url, server.headers,
                                  {**body, "messages": messages}, item["answer"], None)
                        log(f"{name} {i + 1}/{len(qa)}: {system.turns[-1] if system.turns else 'error'}")
                    system.calls = proxy_metrics(server)
                    systems.append(system)
                finally:
                    server.stop()
            if "mem0" not in args.systems:
                return finish(systems, qa, seeds, model, args, out)
            with serve_in_background() as embed_url:
                hits = await asyncio.to_thread(mem0_found, [t for t, _ in seeds], [q["asked"] for q in qa],
                                               embed_url)
            system = System("mem0")
            for item, given in zip(qa, hits, strict=True):
                memories = "\n".join(f"- {m}" for m in given)
                messages = [{"role": "system", "content": MEM0_PROMPT.format(memories=memories)},
                            {"role": "user", "content": item["asked"]}]
                await ask(system, shim, client, f"{shim_url}/chat/completions", {}, {**body, "messages": messages},
                          item["answer"], given)
            systems.append(system)
    finally:
        await shim.stop()
        if llama:
            llama.stop()
    return finish(systems, qa, seeds, model, args, out)


def finish(systems: list[System], qa: list[dict[str, Any]], seeds: list[tuple[str, str]], model: str,
           args: argparse.Namespace, out: Path) -> str:
    """The table, written to `out` with the per-turn JSON; returned."""
    result = "\n".join([
        f"LoCoMo conv-26 (sessions 1–4), {len(qa)} questions, {len(seeds)} raw messages as memories; chat model "
        f"{model} on llama.cpp's llama-server; streamed, max_tokens {args.max_tokens}, temperature 0.", "",
        table(systems, len(qa))])
    (out / "tools_model.md").write_text(result + "\n")
    (out / "tools_model.json").write_text(json.dumps([{"name": s.name, "calls": s.calls, "errors": s.errors,
                                                       "turns": [t.__dict__ for t in s.turns]} for s in systems]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools_model",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--llm", help="a running OpenAI-compatible server up to /v1 (default: start llama-server)")
    parser.add_argument("--questions", type=int, help="only the first N questions")
    parser.add_argument("--max-tokens", type=int, default=100, help="of each answer")
    parser.add_argument("--systems", default=",".join([*SYSTEMS, "mem0"]),
                        help="comma-separated, of: " + ", ".join([*SYSTEMS, "mem0"]))
    parser.add_argument("--out", type=Path, help="where the table and the per-turn JSON go")
    args = parser.parse_args(argv)
    args.systems = args.systems.split(",")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
