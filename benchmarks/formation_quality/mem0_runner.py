"""mem0 OSS (mem0ai 2.2.1) as the peer in the formation-quality benchmark.

Plays each scripted user of a scenario TOML through mem0's own memory formation and records what
mem0 ends up holding and injecting, plus what each turn cost. It runs in mem0's venv (made by
setup_mem0.sh), never the project's, and imports only mem0 (with its openai client) and the
standard library. From the project root:

    MEM0_PY=$(bash benchmarks/formation_quality/setup_mem0.sh | tail -n 1)
    .venv/bin/python -m benchmarks.formation_quality.embed_server --port 8082 &
    $MEM0_PY benchmarks/formation_quality/mem0_runner.py --users FILE.toml \\
        --llm-base-url http://127.0.0.1:8083/v1 --embed-base-url http://127.0.0.1:8082/v1 \\
        --out results.json [--only id1,id2] [--category X]

The LLM server needs a context window of at least ~12k tokens: every add sends mem0's ~8k-token
extraction prompt and asks for up to 2,000 completion tokens (a llama-cpp-python server started with
`--n_ctx 4096` answers 400 to every add). For example, the same model with a larger window:

    python -m llama_cpp.server --model qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --host 127.0.0.1 \\
        --port 8083 --n_ctx 16384 --n_threads 2 --interrupt_requests false

mem0 is configured with its `openai` LLM provider on `--llm-base-url` (temperature 0, otherwise
mem0's defaults), its `openai` embedder on `--embed-base-url` (the project's all-MiniLM-L6-v2 int8
served by embed_server.py, 384 dims) and its default vector store, Qdrant, in local mode. Each user
gets a fresh Memory whose Qdrant path and history SQLite live in a temporary directory of its own,
under a fresh mem0 user id, so users and runs never see each other's data.

Per user: seeds are stored verbatim (`add(seed, infer=False)`); each turn is `add([user, assistant])`
with inference, timed, with its LLM calls, prompt/completion tokens (from each response's `usage`)
and embedding calls counted by wrapping the two OpenAI clients mem0 holds; then `get_all` (the active
memories), `search(probe, top_k=10)` with mem0's default threshold (what would be injected) and
`history` of every memory seen (UPDATE/DELETE rows = the replacement/retirement trail; 2.2.1's add
is ADD-only, one extraction call that never updates or deletes, so expect 0). Before the
first user, one untimed call primes the server's prompt cache with mem0's system prompt (`--no-warmup`
skips it).

Nothing leaves the machine: telemetry is off (MEM0_TELEMETRY=false, which also stops mem0's notices
from fetching their remote config), MEM0_DIR points into the temporary directory (no ~/.mem0), and an
audit hook refuses any socket connection that is not to a loopback address.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
import uuid
from collections import Counter
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

EMBED_TIMEOUT_S = 60.0
PROBE_TOP_K = 10
PROBE_THRESHOLD = 0.1  # mem0 2.2.1's default for search(): minimum semantic (cosine) score
AUDIT_EVENTS = ("UPDATE", "DELETE")


def _loopback_only(event: str, args: tuple) -> None:
    """Audit hook: refuse socket connections to anything but loopback (and Unix sockets)."""
    if event != "socket.connect":
        return
    address = args[1]
    if not isinstance(address, tuple):  # AF_UNIX path
        return
    try:
        loopback = ipaddress.ip_address(address[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConnectionRefusedError(f"mem0_runner: refusing a connection off this machine: {address!r}")


class Meter:
    """Counts what mem0 asks of its LLM and embedder by wrapping the `create` of both OpenAI clients.

    The clients are replaced by copies with our timeouts and no retries, so one counted call is one
    HTTP request. A call counts when it is made, even if it then fails."""

    def __init__(self, memory: Any, llm_timeout: float) -> None:
        self.reset()
        llm = memory.llm.client.with_options(timeout=llm_timeout, max_retries=0)
        embedder = memory.embedding_model.client.with_options(timeout=EMBED_TIMEOUT_S, max_retries=0)
        llm.chat.completions.create = self._count_llm(llm.chat.completions.create)
        embedder.embeddings.create = self._count_embed(embedder.embeddings.create)
        memory.llm.client = llm
        memory.embedding_model.client = embedder

    def reset(self) -> None:
        self.llm_calls = self.prompt_tokens = self.completion_tokens = self.embed_calls = 0
        self.finish_reasons: list[str | None] = []

    def snapshot(self) -> dict[str, Any]:
        return {"llm_calls": self.llm_calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "embed_calls": self.embed_calls,
                "finish_reasons": list(self.finish_reasons)}

    def _count_llm(self, create):
        def counted(*args, **kwargs):
            self.llm_calls += 1
            response = create(*args, **kwargs)
            if response.usage is not None:
                self.prompt_tokens += response.usage.prompt_tokens or 0
                self.completion_tokens += response.usage.completion_tokens or 0
            self.finish_reasons.extend(choice.finish_reason for choice in response.choices)
            return response
        return counted

    def _count_embed(self, create):
        def counted(*args, **kwargs):
            self.embed_calls += 1
            return create(*args, **kwargs)
        return counted


def mem0_config(args: argparse.Namespace, user_dir: Path) -> dict[str, Any]:
    """The Memory.from_config dict: only what must differ from mem0's defaults."""
    return {
        "llm": {"provider": "openai", "config": {
            "model": args.llm_model, "openai_base_url": args.llm_base_url, "api_key": "unused",
            "temperature": 0.0}},
        "embedder": {"provider": "openai", "config": {
            "model": "all-minilm-l6-v2-int8", "openai_base_url": args.embed_base_url, "api_key": "unused",
            "embedding_dims": 384}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "mem0", "embedding_model_dims": 384, "path": str(user_dir / "qdrant")}},
        "history_db_path": str(user_dir / "history.db"),
    }


def warm_up(args: argparse.Namespace) -> float:
    """One 1-token call led by mem0's extraction system prompt (~8k tokens, the same on every add), so
    a server that reuses a cached prompt prefix (llama-cpp-python does) has it before the first
    timed add; otherwise the first add alone pays the whole prefix (~6 min on 2 busy cores).
    Returns its wall seconds; exits if the server cannot take the prompt, as every add would fail."""
    from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT
    from openai import APIError, OpenAI

    client = OpenAI(base_url=args.llm_base_url, api_key="unused", timeout=args.llm_timeout, max_retries=0)
    started = time.perf_counter()
    try:
        client.chat.completions.create(model=args.llm_model, temperature=0.0, max_tokens=1, messages=[
            {"role": "system", "content": ADDITIVE_EXTRACTION_PROMPT},
            {"role": "user", "content": "## Summary"}])
    except APIError as exc:
        raise SystemExit(f"mem0_runner: {args.llm_base_url} failed mem0's extraction prompt ({exc}); "
                         "mem0 2.2.1 needs a context window of ~12k tokens (see --help)") from exc
    return round(time.perf_counter() - started, 3)


def run_user(Memory: Any, user: dict[str, Any], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One scripted user through a fresh Memory; exceptions land in `errors`, never propagate."""
    result: dict[str, Any] = {"id": user["id"], "category": user.get("category", ""), "active": [],
                              "injected": [], "injected_scores": [], "audit_rows": 0, "turns": [],
                              "errors": []}
    user_dir = Path(tempfile.mkdtemp(prefix="user-", dir=workdir))
    mem0_user = f"fq-{uuid.uuid4().hex[:12]}"
    memory = None

    def log(line: str) -> None:
        print(f"[{user['id']}] {line}", file=sys.stderr, flush=True)

    try:
        memory = Memory.from_config(mem0_config(args, user_dir))
        meter = Meter(memory, args.llm_timeout)
        seen_ids: set[str] = set()
        for seed in user.get("seed", []):
            text = seed if isinstance(seed, str) else seed["text"]  # a string, or {text, type}
            added = memory.add(text, user_id=mem0_user, infer=False)["results"]
            seen_ids.update(item["id"] for item in added)
        for number, turn in enumerate(user.get("turn", []), 1):
            meter.reset()
            started = time.perf_counter()
            record: dict[str, Any] = {"day": turn.get("day")}
            try:
                changes = memory.add([{"role": "user", "content": turn["user"]},
                                      {"role": "assistant", "content": turn["assistant"]}],
                                     user_id=mem0_user)["results"]
                seen_ids.update(item["id"] for item in changes)
                record["events"] = dict(Counter(item.get("event") for item in changes))
            except Exception as exc:  # noqa: BLE001 - a failed add (LLM error, timeout) does not end the user
                result["errors"].append(f"turn {number}: {exc!r}")
                record["error"] = repr(exc)
            record = {"seconds": round(time.perf_counter() - started, 3), **meter.snapshot(), **record}
            result["turns"].append(record)
            log(f"turn {number}: {record['seconds']:.1f} s, {record['llm_calls']} LLM call(s), "
                f"{record['prompt_tokens']}+{record['completion_tokens']} tokens, "
                f"{record.get('events') or record.get('error')}")
        active = sorted(memory.get_all(filters={"user_id": mem0_user}, top_k=10_000)["results"],
                        key=lambda item: item.get("created_at") or "")
        result["active"] = [item["memory"] for item in active]
        seen_ids.update(item["id"] for item in active)
        probe = user.get("probe")
        if probe:
            hits = memory.search(probe["user"], filters={"user_id": mem0_user}, top_k=PROBE_TOP_K,
                                 threshold=PROBE_THRESHOLD)["results"]
            result["injected"] = [hit["memory"] for hit in hits]
            result["injected_scores"] = [round(hit["score"], 4) for hit in hits]
        result["asked"] = [[hit["memory"] for hit in memory.search(
            question, filters={"user_id": mem0_user}, top_k=PROBE_TOP_K, threshold=PROBE_THRESHOLD)["results"]]
            for question in user.get("questions", [])]
        result["audit_rows"] = sum(1 for memory_id in sorted(seen_ids)
                                   for row in memory.history(memory_id) if row["event"] in AUDIT_EVENTS)
        log(f"{len(result['active'])} active, {len(result['injected'])} injected, "
            f"{result['audit_rows']} audit rows")
    except Exception as exc:  # noqa: BLE001 - one user's failure is recorded, the run goes on
        result["errors"].append(repr(exc))
        log(f"failed: {exc!r}")
    finally:
        if memory is not None:
            memory.close()
            memory.vector_store.client.close()
        shutil.rmtree(user_dir, ignore_errors=True)
    return result


def load_users(paths: list[Path], only: str | None, category: str | None) -> list[dict[str, Any]]:
    users: list[dict[str, Any]] = []
    for path in paths:
        for file in sorted(path.glob("*.toml")) if path.is_dir() else [path]:
            with file.open("rb") as f:
                users += tomllib.load(f).get("user", [])
    path = paths[0]
    ids = [user["id"] for user in users]
    if len(ids) != len(set(ids)):
        raise SystemExit(f"{path}: user ids are not unique")
    if only:
        wanted = set(only.split(","))
        if unknown := wanted - set(ids):
            raise SystemExit(f"{path}: no user {', '.join(sorted(unknown))}")
        users = [user for user in users if user["id"] in wanted]
    if category:
        users = [user for user in users if user.get("category") == category]
    return users


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=Path, nargs="+", required=True,
                        help="scenario TOML files ([[user]] tables) or directories of them")
    parser.add_argument("--llm-base-url", required=True, help="OpenAI-compatible chat API, up to /v1")
    parser.add_argument("--llm-model", default="qwen2.5-coder-1.5b-instruct",
                        help="model name sent to the LLM server")
    parser.add_argument("--llm-timeout", type=float, default=600.0,
                        help="seconds per LLM call (a cold ~8k-token prompt takes ~6 min on 2 busy cores)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the call that primes the server's prompt cache with mem0's system prompt")
    parser.add_argument("--embed-base-url", required=True, help="embed_server.py, up to /v1")
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    parser.add_argument("--only", help="comma-separated user ids")
    parser.add_argument("--category", help="only users of this category")
    args = parser.parse_args(argv)
    users = load_users(args.users, args.only, args.category)

    sys.addaudithook(_loopback_only)
    with tempfile.TemporaryDirectory(prefix="mem0-fq-") as tmp:
        workdir = Path(tmp)
        # Read by mem0 at import time: no telemetry, no notices, no ~/.mem0.
        os.environ["MEM0_TELEMETRY"] = "false"
        os.environ["MEM0_DIR"] = str(workdir / "mem0-home")
        os.environ.pop("OPENROUTER_API_KEY", None)  # would reroute mem0's openai LLM to OpenRouter
        from mem0 import Memory

        # Without these optional packages (mem0ai[nlp] extras; neither can load its model offline)
        # 2.2.1's search is semantic only: no BM25 (fastembed) and no entity boost (spaCy).
        hybrid = {name: importlib.util.find_spec(module) is not None
                  for name, module in (("bm25", "fastembed"), ("entity_boost", "spacy"))}
        output: dict[str, Any] = {
            "system": f"mem0 {version('mem0ai')}",
            "llm_base_url": args.llm_base_url,
            "llm_model": args.llm_model,
            "embedder": f"all-minilm-l6-v2-int8 via {args.embed_base_url} (mem0 `openai` embedder, 384 dims)",
            "vector_store": f"qdrant local mode (qdrant-client {version('qdrant-client')}), "
                            "a temporary path per user",
            "search": {"top_k": PROBE_TOP_K, "threshold": PROBE_THRESHOLD, **hybrid},
            "mem0_config": mem0_config(args, Path("<tmp>")),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "llm_warmup_seconds": None,
            "users": [],
        }
        if not args.no_warmup:
            output["llm_warmup_seconds"] = warm_up(args)
            print(f"LLM warm-up (mem0's system prompt): {output['llm_warmup_seconds']:.1f} s",
                  file=sys.stderr, flush=True)
        for user in users:
            print(f"[{user['id']}] {len(user.get('turn', []))} turn(s)", file=sys.stderr, flush=True)
            output["users"].append(run_user(Memory, user, args, workdir))
        output["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    args.out.write_text(json.dumps(output, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.out} ({len(output['users'])} users)", file=sys.stderr)


if __name__ == "__main__":
    main()
