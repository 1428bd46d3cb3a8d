"""A self-hoster's whole stack, end to end, as one command (issue 26):

    python -m benchmarks.openwebui [--quick] [--turns N] [--setup shared|parallel|separate]
                                   [--block-models SECONDS] [--out DIR]

OpenWebUI 0.12.4 (its own venv, installed if missing) → memory-proxy (fresh embedded database, local
embedder, signed user JWT, task header) → a /v1/models shim → llama.cpp serving Qwen2.5-Coder-1.5B, also the
memory LLM (``json`` mode). A scripted user chats through OpenWebUI's own API and socket.io as its web page
does; then the run checks what the proxy stored, injected, superseded and skipped, how long formation took,
and (``--block-models``) that a model server hanging on ``/v1/models`` leaves chat working. It prints a
Markdown table and writes ``figures.json`` and every log to ``--out``. Every process it started is stopped
at the end, on error and on Ctrl-C. See benchmarks/openwebui/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from memory_proxy.testing.asgi import free_port, stop_process

from ..servers import PROXY_KEY, ROOT, Server, start_memory_proxy
from . import session as s
from .stack import (
    ModelsShim,
    ensure_openwebui,
    log,
    openwebui_env,
    served_model,
    start_embed_server,
    start_llama,
    start_openwebui,
)
from .webui import Turn, WebUI

USER = {"name": "Camille Martin", "email": "camille@example.com", "password": "bench-Camille-2026!"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.openwebui", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke test: 4 turns, models blocked 12 s")
    p.add_argument("--turns", type=int, help=f"chat turns, {len(s.select(0))}–{len(s.SCRIPT)} (default 30; --quick 4)")
    p.add_argument("--setup", choices=["shared", "parallel", "separate"], default="shared",
                   help="shared: one llama-cpp-python server for chat and memory LLM (the issue's run); parallel: "
                        "llama.cpp's llama-server --parallel 2 (LLAMA_SERVER=native, built on first use); "
                        "separate: one llama-cpp-python server for chat, another for the memory LLM (1 thread each)")
    p.add_argument("--block-models", type=float, metavar="SECONDS",
                   help="make the model server's GET /v1/models hang this long, then list models and chat "
                        "(default 30; --quick 12; 0: skip)")
    p.add_argument("--memory-tools", choices=["off", "search", "all"], default="off",
                   help="the proxy's MEMORY_TOOLS (docs/TOOLS.md): the chat model may search, remember, forget")
    p.add_argument("--builtin-tools", action="store_true",
                   help="leave OpenWebUI's built-in tools on for the model (by default they are switched off)")
    p.add_argument("--out", type=Path, help="results and logs (default out/openwebui-SETUP-TIME)")
    p.add_argument("--think", type=float, default=3.0, help="seconds the user reads a reply before the next turn")
    p.add_argument("--turn-timeout", type=float, default=900.0, help="seconds one reply may take")
    p.add_argument("--drain-timeout", type=float, default=1800.0, help="seconds to wait for formation jobs")
    args = p.parse_args(argv)
    args.turns = args.turns or (4 if args.quick else len(s.SCRIPT))
    if args.block_models is None:
        args.block_models = 12.0 if args.quick else 30.0
    args.out = args.out or ROOT / "out" / f"openwebui-{args.setup}-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


async def run(args: argparse.Namespace, fig: dict[str, Any]) -> None:
    out: Path = args.out
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        fig["install_s"] = round(await asyncio.to_thread(ensure_openwebui), 1)

        # model server(s): chat, and the memory LLM (the same one unless --setup separate)
        native, threads = args.setup == "parallel", 1 if args.setup == "separate" else 2
        chat_llama, chat_base = await start_llama("llama-chat", out, "native" if native else "python", threads)
        stack.callback(chat_llama.stop)
        memory_base = chat_base
        if args.setup == "separate":
            memory_llama, memory_base = await start_llama("llama-memory", out, "python", threads)
            stack.callback(memory_llama.stop)
        model = fig["model"] = served_model(chat_base)
        shim = ModelsShim(chat_base)
        await shim.start()
        stack.push_async_callback(shim.stop)
        embed, embed_base = await start_embed_server(out)
        stack.callback(embed.stop)

        # memory-proxy: upstream = the shim, memory LLM = the model server itself
        jwt_secret = secrets.token_urlsafe(32)
        log("starting memory-proxy")
        proxy = start_memory_proxy(Server("llama via shim", shim.base_url, {}, chat_llama.proc, owns_proc=False),
                                   core=None, env={
            "USER_JWT_SECRET": jwt_secret, "LOG_LEVEL": "info", "LOG_FORMAT": "json",
            "EMBEDDING_PROVIDER": "local", "EMBEDDING_MODEL": "", "EMBEDDING_BASE_URL": "", "EMBEDDING_API_KEY": "",
            "MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_MODE": "json", "MEMORY_LLM_BASE_URL": memory_base,
            "MEMORY_LLM_MODEL": model, "MEMORY_LLM_API_KEY": "x", "MEMORY_TOOLS": args.memory_tools})
        proxy_log = Path(proxy.tmpdir or "") / "server.log"

        def stop_proxy() -> None:
            stop_process(proxy.proc, timeout=40)
            shutil.copy(proxy_log, out / "memory-proxy.log")
            proxy.stop()  # its embedded PostgreSQL, if left, and the data dir
        stack.callback(stop_proxy)
        proxy_root = proxy.base_url.removesuffix("/v1")
        view = s.ProxyView(proxy_root, PROXY_KEY, proxy_log)

        # OpenWebUI: fresh data dir, loopback
        data_dir = Path(tempfile.mkdtemp(prefix="openwebui-bench-"))
        stack.callback(shutil.rmtree, data_dir, True)
        log("starting OpenWebUI (~30 s)")
        env = openwebui_env(free_port(), data_dir, proxy.base_url, PROXY_KEY, jwt_secret, embed_base)
        webui_proc, webui_base = await start_openwebui(out, data_dir, env)
        stack.callback(webui_proc.stop)
        fig["startup_s"] = round(time.monotonic() - started - fig["install_s"], 1)

        # what a browser user and their admin do first
        webui = WebUI(webui_base)
        stack.push_async_callback(webui.close)
        user = await webui.signup(**USER)
        await webui.set_connection_headers({"X-OpenWebUI-Task": "{{TASK}}"})
        if not args.builtin_tools:
            await webui.disable_builtin_tools(model)
        model_item = next(m for m in await webui.models() if m["id"] == model)
        log(f"signed up {user['email']} ({user['role']}, id {user['id']}); model {model}")

        turns = await chat_session(args, webui, view, model_item, fig)
        if args.block_models > 0:
            turns.append(await blocked_models(args, webui, view, shim, model_item, fig))
        log("waiting for the last formation jobs")
        fig["final_drain_s"] = round(await asyncio.to_thread(view.drain, args.drain_timeout), 1)
        fig["ttft_direct_s"] = s.quantiles(await direct_ttft(chat_base, model, webui, turns))
        check(view, user["id"], turns, shim, fig)
        (out / "shim-requests.json").write_text(json.dumps(shim.requests, indent=1))
        fig["run_s"] = round(time.monotonic() - started, 1)


async def chat_session(args: argparse.Namespace, webui: WebUI, view: s.ProxyView, model: dict[str, Any],
                       fig: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted user's turns, a new chat per day; the queue drains between days."""
    steps = s.select(args.turns)
    done: list[dict[str, Any]] = []
    chat_id = parent = None
    drains = []
    session_started = time.monotonic()
    for i, step in enumerate(steps):
        if i and step.chat != steps[i - 1].chat:
            drains.append(await asyncio.to_thread(view.drain, args.drain_timeout))
            chat_id = parent = None
        turn = await webui.send(step.text, model, chat_id, parent, args.turn_timeout)
        chat_id, parent = turn.chat_id, turn.message_id
        done.append(record(turn, view, step.chat, probe=step.chat == steps[-1].chat))
        log(f"turn {i + 1}/{len(steps)} (chat {step.chat}): first token {done[-1]['ttft_s']} s, reply "
            f"{done[-1]['reply_s']} s, {len((done[-1]['retrieval'] or {}).get('ids') or [])} memories injected"
            + (f", ERROR {turn.error}" if turn.error else ""))
        await asyncio.sleep(args.think)
    fig["session_s"] = round(time.monotonic() - session_started, 1)
    fig["drains_s"] = [round(d, 1) for d in drains]
    fig["ttft_openwebui_s"] = s.quantiles([t["ttft_s"] for t in done if t["ttft_s"] is not None])
    fig["reply_openwebui_s"] = s.quantiles([t["reply_s"] for t in done if t["reply_s"] is not None])
    fig["turn_errors"] = sum(1 for t in done if t["error"])
    (args.out / "turns.json").write_text(json.dumps(done, indent=1, ensure_ascii=False))
    return done


def record(turn: Turn, view: s.ProxyView, chat: int | str, probe: bool = False) -> dict[str, Any]:
    """A turn for turns.json, with the proxy's memory_retrieval line for it (the first one logged since)."""
    retrieval = view.lines("memory_retrieval", since=turn.sent_at)
    return {"chat": chat, "probe": probe, "user": turn.text, "reply": turn.content, "error": turn.error,
            "chat_id": turn.chat_id, "message_id": turn.message_id, "sent_at": turn.sent_at,
            "ttft_s": _round(turn.first_token_s), "reply_s": _round(turn.done_s),
            "task_events_s": turn.task_events, "events": dict(Counter(turn.event_types)),
            "retrieval": {k: retrieval[0].get(k) for k in ("outcome", "count", "ids", "rounds", "tool_calls")}
            if retrieval else None}


async def blocked_models(args: argparse.Namespace, webui: WebUI, view: s.ProxyView, shim: ModelsShim,
                         model: dict[str, Any], fig: dict[str, Any]) -> dict[str, Any]:
    """The model server hangs on GET /v1/models for ``--block-models`` seconds: OpenWebUI must still list the
    model (the proxy answers its last list after MODELS_TIMEOUT) and a new chat must complete."""
    log(f"blocking the model server's GET /v1/models for {args.block_models:g} s")
    since = time.time()
    shim.block(args.block_models)
    t = time.monotonic()
    listed = [m["id"] for m in await webui.models()]
    list_s = time.monotonic() - t
    turn = await webui.send("Quick one: suggest a name for a second cat.", model, None, None, args.turn_timeout)
    fig["block_models"] = {
        "seconds": args.block_models, "model_listed": model["id"] in listed, "list_s": round(list_s, 2),
        "chat_completed": bool(turn.content) and not turn.error, "chat_reply_s": _round(turn.done_s),
        "proxy_served_cached": len(view.lines("models_served_cached", since=since))}
    return record(turn, view, "models blocked")


async def direct_ttft(base: str, model: str, webui: WebUI, turns: list[dict[str, Any]]) -> list[float]:
    """Time to first token straight from the model server, on the quiet server after the run: each chat's
    last conversation as OpenWebUI stored it (without the memories or OpenWebUI's additions)."""
    values = []
    last_of_chat = {t["chat_id"]: t for t in turns}
    async with httpx.AsyncClient(timeout=600) as http:
        for turn in list(last_of_chat.values())[:6]:
            chat = (await webui.http.get(f"/api/v1/chats/{turn['chat_id']}")).json()["chat"]["history"]["messages"]
            messages: list[dict[str, str]] = []
            mid = chat[turn["message_id"]]["parentId"]
            while mid:
                messages.insert(0, {"role": chat[mid]["role"], "content": chat[mid]["content"]})
                mid = chat[mid].get("parentId")
            t = time.monotonic()
            body = {"model": model, "messages": messages, "stream": True, "max_tokens": 8}
            async with http.stream("POST", f"{base}/chat/completions", json=body) as reply:
                async for line in reply.aiter_lines():
                    if line.startswith("data: {") and _delta(json.loads(line[6:])):
                        values.append(time.monotonic() - t)
                        break
    return values


def check(view: s.ProxyView, user_id: str, turns: list[dict[str, Any]], shim: ModelsShim,
          fig: dict[str, Any]) -> None:
    """What the proxy holds and did, from its management API, log and metrics."""
    export = view.export(user_id)
    active = {m["id"]: m["content"] for m in export["memories"]}
    known = {**{m["id"]: m["content"] for m in export["history"]}, **active}
    fig["memories"] = list(active.values())
    fig["facts"] = {name: any(s.matches(rx, text) for text in active.values())
                    for name, rx in (("city Grenoble", s.NEW_CITY), ("nurse", "nurse"), ("cat Pixel", "pixel"),
                                     ("name Camille", "camille"))}
    # supersession: a Lyon memory retired by a replace/refine, with its audit row, none left active
    stale = [t for t in active.values() if s.matches(s.OLD_CITY, t) and not s.matches(s.NEW_CITY, t)]
    audits = [u for u in export["updates"] if u["action"] in ("replace", "refine")
              and s.matches(s.OLD_CITY, known.get(u["old_id"], ""))]
    fig["supersession"] = {"audit_rows": [{**u, "old": known.get(u["old_id"]), "new": known.get(u["new_id"])}
                                          for u in audits],
                           "stale_active": stale, "ok": bool(audits) and not stale}
    if audits and audits[0]["new_id"]:
        fig["supersession"]["history"] = view.history(user_id, audits[0]["new_id"])
    # injection in the new chat (the probe chat's first turn)
    probe = next(t for t in turns if t["probe"])
    injected = [known.get(i, i) for i in (probe["retrieval"] or {}).get("ids") or []]
    fig["probe"] = {"question": probe["user"], "reply": probe["reply"], "injected": injected,
                    "injected_new_city": any(s.matches(s.NEW_CITY, t) for t in injected),
                    "reply_uses": {rx: s.matches(rx, probe["reply"]) for rx in s.PROBE_EXPECT}}
    # tasks: requests the proxy classified as tasks, and no retrieval or job beyond the chat turns
    m = view.metrics()
    chats = s.total(m, "memory_proxy_requests_total", route="chat", kind="chat")
    retrievals = len(view.lines("memory_retrieval"))
    enqueued = s.total(m, "memory_proxy_jobs_total", event="enqueued")
    fig["requests"] = {"chat_turns": chats, "tasks": s.total(m, "memory_proxy_requests_total", route="chat", kind="task"),
                       "retrievals": retrievals, "jobs_enqueued": enqueued,
                       "tasks_skipped": retrievals == chats and enqueued == chats,
                       "upstream_with_tools": sum(1 for r in shim.requests if r.get("tools")),
                       "tool_calls": {o: s.total(m, "memory_proxy_tool_calls_total", outcome=o)
                                      for o in ("ok", "empty", "refused", "bad_arguments", "unknown_tool",
                                                "over_cap", "failed", "rejected")},
                       "tool_calls_written": s.total(m, "memory_proxy_tool_calls_written_total"),
                       "calls_shown": sum(1 for t in turns if WRITTEN.search(t["reply"] or "")),
                       "tool_rounds": sum((t["retrieval"] or {}).get("rounds") or 0 for t in turns),
                       "models_served_cached": s.total(m, "memory_proxy_requests_total", route="models", kind="cached")}
    # formation: no job dead, job times from the memory_decision lines
    decisions = view.lines("memory_decision")
    fig["formation"] = {
        "jobs": {e: s.total(m, "memory_proxy_jobs_total", event=e) for e in ("completed", "skipped", "retried", "dead")},
        "dead_in_queue": s.total(m, "memory_proxy_job_queue", status="dead"),
        "llm_timeouts": s.total(m, "memory_proxy_llm_calls_total", outcome="timeout"),
        "decisions": {a: s.total(m, "memory_proxy_decisions_total", action=a)
                      for a in ("add", "replace", "refine", "ignore", "forget")},
        "attempts": len(decisions),
        "attempt_s": s.quantiles([d["duration_ms"] / 1000 for d in decisions if d.get("status") == "done"
                                  and not d.get("reason")]),
        "job_s": s.quantiles(job_latencies(decisions, turns) if enqueued == chats else []),
    }
    fig["formation"]["no_dead"] = fig["formation"]["jobs"]["dead"] == 0 and fig["formation"]["dead_in_queue"] == 0


def job_latencies(decisions: list[dict[str, Any]], turns: list[dict[str, Any]]) -> list[float]:
    """Seconds from each chat turn's reply to its job's end (queue, busy retries and the attempt): job k is
    the k-th chat turn's (a fresh database, every turn wrote one)."""
    ended = {d["job_id"]: s.epoch(d.get("timestamp")) for d in decisions if d.get("status") in ("done", "dead")}
    replied = [t["sent_at"] + (t["reply_s"] or 0) for t in sorted(turns, key=lambda t: t["sent_at"])]
    return [ended[k] - replied[k - 1] for k in sorted(ended) if k <= len(replied)]


def table(fig: dict[str, Any]) -> str:
    def q(d: dict[str, Any] | None) -> str:
        return "—" if not d or d.get("p50") is None else f"{d['p50']} / {d['p95']} / {d['max']} s (n={d['n']})"

    def yes(v: Any) -> str:
        return "**yes**" if v else "**NO**"

    rows = [("setup", f"{fig['setup']}, {fig['turns']} turns, model {Path(fig.get('model', '?')).name}, "
                      f"MEMORY_TOOLS={fig['memory_tools']}, OpenWebUI's built-in tools "
                      f"{'on' if fig['builtin_tools'] else 'off'}")]
    if "facts" in fig:
        sup, probe, req, form = fig["supersession"], fig["probe"], fig["requests"], fig["formation"]
        rows += [
            ("facts stored (active memories)", f"{sum(fig['facts'].values())}/{len(fig['facts'])} expected "
             f"({', '.join(k for k, v in fig['facts'].items() if v) or 'none'}); {len(fig['memories'])} active"),
            ("injected in a new chat (Grenoble)", f"{yes(probe['injected_new_city'])}: {len(probe['injected'])} memories"),
            ("reply used the memories", ", ".join(f"{rx}: {yes(v)}" for rx, v in probe["reply_uses"].items())),
            ("move superseded, with an audit row", f"{yes(sup['ok'])} ({len(sup['audit_rows'])} audit rows, "
             f"{len(sup['stale_active'])} stale active)"),
            ("task requests skipped (no retrieval, no job)", f"{yes(req['tasks_skipped'])}: {req['tasks']:g} tasks, "
             f"{req['chat_turns']:g} chat turns, {req['retrievals']} retrievals, {req['jobs_enqueued']:g} jobs"),
            ("upstream chat requests with tools", f"{req['upstream_with_tools']}"),
            ("memory tool calls by outcome (of which written as text)", ", ".join(
                f"{k} {v:g}" for k, v in req["tool_calls"].items() if v) + f" ({req['tool_calls_written']:g}); "
             f"{req['tool_rounds']} rounds; replies showing a call as text: {req['calls_shown']}"),
            ("no formation job dead", f"{yes(form['no_dead'])}: " + ", ".join(f"{k} {v:g}" for k, v in form["jobs"].items())
             + f" (a busy-server retry per memory-LLM timeout: {form['llm_timeouts']:g})"),
            ("formation job, reply → done p50 / p95 / max", q(form["job_s"])),
            ("formation attempt that stored, p50 / p95 / max", q(form["attempt_s"])),
            ("TTFT through OpenWebUI p50 / p95 / max", q(fig["ttft_openwebui_s"])),
            ("TTFT direct to the model server (quiet)", q(fig["ttft_direct_s"])),
            ("reply time through OpenWebUI", q(fig["reply_openwebui_s"])),
            ("turn errors", str(fig["turn_errors"])),
        ]
    if "block_models" in fig:
        b = fig["block_models"]
        rows.append((f"/v1/models blocked {b['seconds']:g} s", f"model listed: {yes(b['model_listed'])} in "
                     f"{b['list_s']} s; chat completed: {yes(b['chat_completed'])} ({b['chat_reply_s']} s); "
                     f"cached lists served: {b['proxy_served_cached']}"))
    rows += [("install / startup / session / run", f"{fig.get('install_s', '—')} / {fig.get('startup_s', '—')} / "
              f"{fig.get('session_s', '—')} / {fig.get('run_s', '—')} s")]
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


WRITTEN = re.compile(r'"name"\s*:\s*"(search_memory|remember|forget)"')


def _delta(chunk: dict[str, Any]) -> str:
    return "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)  # cleaned up as on Ctrl-C
    fig: dict[str, Any] = {"setup": args.setup, "turns": args.turns, "memory_tools": args.memory_tools,
                           "builtin_tools": args.builtin_tools, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    failed: BaseException | None = None
    try:
        asyncio.run(run(args, fig))
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - report what was measured, then fail
        failed = exc
        fig["error"] = f"{type(exc).__name__}: {exc}"
    (args.out / "figures.json").write_text(json.dumps(fig, indent=1, ensure_ascii=False, default=str))
    print(table(fig))
    print(f"\nfigures and logs: {args.out}")
    if failed is not None:
        print(f"run failed: {fig['error']}", file=sys.stderr)
        sys.exit(130 if isinstance(failed, KeyboardInterrupt) else 1)


if __name__ == "__main__":
    main()
