"""python -m benchmarks.answers — memory judged by the reply the user reads (issue 51).

    python -m benchmarks.answers --split dev --llm http://127.0.0.1:8081/v1 --out DIR [--systems a,b] [--judge URL]
    python -m benchmarks.answers --report DIR [--split dev]

LoCoMo conversations (splits.toml: dev conv-26, also cut to its first 4 sessions as `conv-26:4`, the 21 questions
of every earlier figure; test conv-30, conv-49, conv-50, run for counts only). One speaker is the user: their
messages are sent as chat turns; then each question about them is asked in a new chat, of the same chat model
(`--llm`, also the memory model; Qwen2.5-Coder-1.5B on llama.cpp: benchmarks/formation_quality/setup_llama.sh with
LLAMA_SERVER=native LLAMA_CTX=32768), streamed, temperature 0, at most 150 tokens.

Systems: `none`, `whole`, `raw`, `mem0` (direct.py: straight to the model) and memory-proxy's `facts`, `episodes`,
`both`, `both_tools`, `oracle`, `oracle_both` (proxied.py: through the proxy), and `profile`, `profile_search`
(profile.py: "what do you know about me?"). Scores (scoring.py): the reply holds the answer
(its words, or for an adversarial question a reply that says it was not said), LoCoMo's F1, and with `--judge URL`
a model's verdict. Results are kept per case and system under DIR; a system already there is not run again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from ..openwebui.stack import ModelsShim, served_model
from ..servers import ROOT
from . import direct
from .chat_model import ask
from .conversations import Conversation, case, split
from .proxied import SYSTEMS as PROXIED
from .report import table
from .scoring import judge

DIRECT = ("none", "whole", "raw", "mem0")
MEM0_MAX_TURNS = 60  # mem0's add costs ~2 minutes a turn on 2 cores: whole conversations would take days
FEED_OF = {system: feed for feed, systems in PROXIED.items() for system in systems}
WINDOW_SPARE = 400  # tokens of the model's window kept for the question and the answer


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cases_of(name: str) -> list[str]:
    return ["conv-26:4", *split(name)] if name == "dev" else split(name)


def direct_messages(conversation: Conversation, system: str, llm: str, out: Path) -> tuple[list[Any], dict[str, Any]]:
    """What a direct system sends the model for each question, and what to note of it."""
    if system == "whole":
        window = int(httpx.get(llm.removesuffix("/v1") + "/props", timeout=30).json()
                     ["default_generation_settings"]["n_ctx"])
        prompt, fit = direct.whole_context(conversation, window - WINDOW_SPARE, direct.token_counter(llm))
        return [direct.with_system(prompt, q.asked) for q in conversation.questions], {"fit": [fit, len(conversation.sessions)]}
    if system in ("raw", "mem0"):
        found = (direct.raw_found(conversation) if system == "raw"
                 else direct.mem0_found(conversation, llm, served_model(llm), out))
        return [direct.mem0_messages(hits, q.asked) for hits, q in zip(found, conversation.questions, strict=True)], {}
    return [direct.none(conversation, q.asked) for q in conversation.questions], {}


async def ask_all(llm: str, messages: list[Any]) -> list[dict[str, Any]]:
    model = served_model(llm)
    shim = ModelsShim(llm, keep=True)
    url = await shim.start()
    try:
        async with httpx.AsyncClient(timeout=900) as client:
            return [(await ask(client, shim, f"{url}/chat/completions", {}, model, m, i)).as_dict()
                    for i, m in enumerate(messages)]
    finally:
        await shim.stop()


def run_proxied(name: str, feed: str, systems: list[str], llm: str, out: Path) -> None:
    """The feed and its systems in a process of their own, at the conversation's end (libfaketime)."""
    conversation = case(name)
    library = subprocess.run(["bash", str(Path(__file__).parent / "setup_faketime.sh")], check=True,
                             capture_output=True, text=True).stdout.strip()
    behind = datetime.now() - (conversation.ends + timedelta(days=1))
    env = {**os.environ, "LD_PRELOAD": library, "FAKETIME": f"-{int(behind.total_seconds())}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "benchmarks.answers.proxied", "--case", name, "--feed", feed,
                    "--memory-llm", llm, "--chat-llm", llm, "--systems", ",".join(systems), "--out", str(out)],
                   check=True, env=env, cwd=ROOT)


def run(args: argparse.Namespace) -> None:
    for name in args.cases:
        directory = args.out / name
        directory.mkdir(parents=True, exist_ok=True)
        conversation = case(name)
        turns = sum(len(s.turns(conversation.user)) for s in conversation.sessions)
        for system in [s for s in args.systems if s in DIRECT]:
            path = directory / f"{system}.json"
            if path.exists():
                continue
            if system == "mem0" and turns > MEM0_MAX_TURNS:
                log(f"{name}: mem0 not run ({turns} turns; its add is run on at most {MEM0_MAX_TURNS})")
                continue
            began = time.monotonic()
            messages, extra = direct_messages(conversation, system, args.llm, directory)
            replies = asyncio.run(ask_all(args.llm, messages))
            path.write_text(json.dumps({"system": system, "replies": replies, **extra}))
            log(f"{name} {system}: {len(replies)} questions in {time.monotonic() - began:.0f} s")
        for feed in dict.fromkeys(FEED_OF[s] for s in args.systems if s in FEED_OF):
            wanted = [s for s in args.systems if FEED_OF.get(s) == feed and not (directory / f"{s}.json").exists()]
            if wanted:
                run_proxied(name, feed, wanted, args.llm, args.out)
        if args.judge:
            for path in sorted(directory.glob("*.json")):
                judged(conversation, path, args.judge)


def judged(conversation: Conversation, path: Path, judge_url: str) -> None:
    """The judge's verdict added to every reply of a result file that has none yet."""
    result = json.loads(path.read_text())
    if "replies" not in result:
        return
    for reply in result["replies"]:
        if "judge" not in reply:
            reply["judge"] = asyncio.run(judge(judge_url, conversation.questions[reply["question"]], reply["text"]))
    path.write_text(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.answers", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--cases", type=lambda s: s.split(","), help="instead of the split's: e.g. conv-26:4")
    parser.add_argument("--llm", help="the chat and memory model's server, up to /v1")
    parser.add_argument("--systems", type=lambda s: s.split(","), default=[*DIRECT, *FEED_OF])
    parser.add_argument("--judge", help="a judge model's server, up to /v1 (optional)")
    parser.add_argument("--out", type=Path, help="where results go")
    parser.add_argument("--report", type=Path, help="only print the table of the results under this directory")
    args = parser.parse_args(argv)
    args.cases = args.cases or cases_of(args.split)
    if args.report:
        print(table(args.report, args.cases))
        return 0
    if not args.llm or not args.out:
        parser.error("--llm and --out are needed to run")
    run(args)
    print(table(args.out, args.cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
