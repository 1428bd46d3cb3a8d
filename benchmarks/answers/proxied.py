"""memory-proxy's systems: the conversation fed through the proxy as chat turns, then each question in a new chat.

    python -m benchmarks.answers.proxied --case conv-26 --feed model --memory-llm URL --chat-llm URL --out DIR

Run by `python -m benchmarks.answers` under libfaketime (setup_faketime.sh), one process per case and feed, so that
the proxy and its PostgreSQL both live at the conversation's end: memories expire, decay and are pruned as they
would have by then (MEMORY_TTL_DAYS, MEMORY_HALF_LIFE_DAYS, maintenance), while each turn is said at its session's
date and time (the proxy's clock, which dates what formation stores).

Feeds (the proxy in process, its real path: chat turns, jobs, the worker; the scripted upstream replies with the
other speaker's messages):
- `model`: the memory model is the server at --memory-llm;
- `oracle`: every formation call answered from LoCoMo's own observations of the turn (conversations.py), a ceiling;
- `words`: the memory model extracts nothing: only the user's own words are kept (the episodic tier alone).
Then each system of the feed asks every question in a new chat (formation off, the proxy's upstream the chat model
through the recording relay), with its settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from memory_proxy.settings import MEMORY_TYPES

from ..formation_quality.proxy_runner import ProxyRun, _llm_counts, proxy_serving
from ..formation_quality.scripted import OracleScript
from ..openwebui.stack import ModelsShim, served_model
from . import profile
from .chat_model import ask
from .conversations import Conversation, case

FEEDS = ("model", "oracle", "words")
# the systems asked after each feed: their settings (every other setting the proxy's default)
SYSTEMS: dict[str, dict[str, dict[str, str]]] = {
    "model": {"facts": {"EPISODES": "false"}, "both": {"EPISODES": "true"},
              "both_tools": {"EPISODES": "true", "MEMORY_TOOLS": "search", "MEMORY_TOOLS_INJECT": "threshold"},
              **{name: {"EPISODES": "true"} for name in profile.SYSTEMS}},  # other questions: profile.py
    "oracle": {"oracle": {"EPISODES": "false"}, "oracle_both": {"EPISODES": "true"}},
    "words": {"episodes": {"EPISODES": "true"}},
}
USER = "answers-user"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def feed(conversation: Conversation, kind: str, memory_llm: str | None, data: Path,
               extra_env: dict[str, str]) -> dict[str, Any]:
    """Every turn of the user's through the proxy, each followed by its formation job; what it cost."""
    script = None if kind == "model" else OracleScript(fake=kind == "words")
    # every system's memories kept; a memory-model call may take 3 minutes: at temperature 0 a reply that runs to
    # MEMORY_LLM_MAX_TOKENS takes over the default 60 s on 2 shared cores, and would then be asked again for an hour
    env = {"FORMATION_PROVENANCE_CHECK": "false", "EPISODES": "true", "MEMORY_LLM_TIMEOUT": "180", **extra_env}
    turns: list[dict[str, Any]] = []
    async with proxy_serving(script, llm_base_url=memory_llm if kind == "model" else None, data_dir=data,
                             log_file=data.parent / f"{data.name}-feed.log", extra_env=env) as served:
        run = ProxyRun(served.client, served.conninfo, served.upstream, script, served.clock)
        for session in conversation.sessions:
            history: list[dict[str, str]] = []
            for i, (message, reply) in enumerate(session.turns(conversation.user)):
                served.clock.at = session.at + timedelta(minutes=i)
                turn = conversation.oracle_turn(message, reply)
                if script:
                    script.turn, script.said_on = turn, served.clock.at.date()
                before = _llm_counts()
                await run.chat(USER, history, turn, chat_id=f"session-{session.number}")
                seconds = await run.formation_seconds(USER, len(turns) + 1)
                after = _llm_counts()
                turns.append({"seconds": seconds, "llm_calls": after["calls"] - before["calls"],
                              "tokens": after["prompt"] + after["completion"] - before["prompt"] - before["completion"]})
                history += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.assistant}]
            log(f"{conversation.id} {kind}: session {session.number} fed ({len(turns)} turns)")
        held = {kind: await _count(served.client, kind) for kind in ("episode", *MEMORY_TYPES)}
    return {"turns": turns, "memories": held}


async def _count(client: httpx.AsyncClient, kind: str) -> int:
    """How many active memories of this kind the user holds (the management API, page by page)."""
    count, cursor = 0, None
    while True:
        page = (await client.get("/api/v1/memories", params={"user": USER, "type": kind, "limit": 100,
                                                              **({"cursor": cursor} if cursor else {})})).json()
        count += len(page["data"])
        if not (cursor := page.get("next_cursor")):
            return count


async def questions(conversation: Conversation, data: Path, chat_llm: str, env: dict[str, str]) -> list[dict[str, Any]]:
    shim = ModelsShim(chat_llm, keep=True)
    shim_url = await shim.start()
    model = served_model(chat_llm)
    replies = []
    try:
        settings = {"FORMATION_ENABLED": "false", "MAINTENANCE_INTERVAL_SECONDS": "0", **env}
        async with proxy_serving(None, llm_base_url=chat_llm, data_dir=data, upstream_url=shim_url,
                                 log_file=data.parent / f"{data.name}-questions.log", extra_env=settings) as served, \
                httpx.AsyncClient(base_url=str(served.client.base_url), headers=served.client.headers, timeout=900) as client:
            served.clock.at = conversation.ends + timedelta(days=1)
            for i, question in enumerate(conversation.questions):
                reply = await ask(client, shim, "/v1/chat/completions", {"X-OpenWebUI-User-Id": USER}, model,
                                  [{"role": "user", "content": question.asked}], i)
                replies.append(reply.as_dict())
    finally:
        await shim.stop()
    return replies


async def run(args: argparse.Namespace) -> None:
    conversation = case(args.case)
    out = args.out / args.case
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"data-{args.feed}"
    fed = out / f"feed-{args.feed}.json"
    if not fed.exists():
        stats = await feed(conversation, args.feed, args.memory_llm, data, {})
        fed.write_text(json.dumps(stats))
    for name, env in SYSTEMS[args.feed].items():
        if args.systems and name not in args.systems:
            continue
        result = out / f"{name}.json"
        if result.exists():
            continue
        began = time.monotonic()
        with profile.answered_by(name):
            replies = await questions(profile.asking(conversation) if name in profile.SYSTEMS else conversation,
                                      data, args.chat_llm, env)
        result.write_text(json.dumps({"system": name, "feed": args.feed, "env": env, "replies": replies}))
        log(f"{args.case} {name}: {len(replies)} questions in {time.monotonic() - began:.0f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.answers.proxied", description=__doc__.split("\n")[0])
    parser.add_argument("--case", required=True)
    parser.add_argument("--feed", choices=FEEDS, required=True)
    parser.add_argument("--memory-llm", help="the memory model's server, up to /v1 (feed `model`)")
    parser.add_argument("--chat-llm", required=True, help="the chat model's server, up to /v1")
    parser.add_argument("--systems", type=lambda s: s.split(","), default=[])
    parser.add_argument("--out", type=Path, required=True)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
