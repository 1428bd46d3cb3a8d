"""python -m benchmarks.formation_quality — memory formation quality, memory-proxy and (optionally) mem0.

    python -m benchmarks.formation_quality --llm oracle --split all   # a perfect model: the rules alone
    python -m benchmarks.formation_quality                       # scripted fake memory LLM (plumbing)
    python -m benchmarks.formation_quality --split test --llm http://127.0.0.1:8081/v1 --peer mem0
    python -m benchmarks.formation_quality --score out/proxy.json out/mem0.json   # table from saved runs

See README.md beside this file for the setup of the real model and of mem0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from .scenarios import load_users, split_files
from .score import failures, judge, table

HERE = Path(__file__).parent
DEFAULT_MEM0_PYTHON = Path.home() / ".cache/memory-proxy-bench/mem0-venv/bin/python"


def _setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name.isupper():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, e.g. FORMATION_NEIGHBORS=8")
    return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="fake",
                        help="memory LLM: 'oracle' (each turn's ideal answer: a perfect model), 'fake' (each "
                             "turn's scripted `fake` extraction) or an OpenAI-compatible base URL up to /v1 "
                             "(default: fake)")
    parser.add_argument("--model", default="local", help="model name sent to the LLM server")
    parser.add_argument("--mode", default="json", help="MEMORY_LLM_MODE for memory-proxy (default: json)")
    parser.add_argument("--peer", choices=["mem0"], help="also run mem0 on the same users, LLM and embedder")
    parser.add_argument("--peer-only", action="store_true",
                        help="run only the peer (join it to a saved proxy run with --score)")
    parser.add_argument("--mem0-python", type=Path, default=Path(os.environ.get("MEM0_PYTHON", DEFAULT_MEM0_PYTHON)),
                        help="python of the venv with mem0ai (setup_mem0.sh prints it)")
    parser.add_argument("--split", choices=["dev", "test", "all"], default="dev",
                        help="the users: dev (the team's, training data), test (frozen) or all (default: dev)")
    parser.add_argument("--users", type=Path, nargs="+", help="scenario files or directories instead of a split")
    parser.add_argument("--lang", action="append", help="only users writing in this language (repeatable)")
    parser.add_argument("--only", help="comma-separated user ids")
    parser.add_argument("--category", action="append", help="only users of this category (repeatable)")
    parser.add_argument("--ci", action="store_true", help="only the CI subset (users with ci = true)")
    parser.add_argument("--out", type=Path, default=Path("formation-quality-results"),
                        help="directory for results, logs and the table (default: ./formation-quality-results)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", type=_setting,
                        help="a memory-proxy setting for this run, e.g. FORMATION_NEIGHBORS=8 (repeatable)")
    parser.add_argument("--database-url", help="a migrated PostgreSQL for the proxy (default: an embedded one)")
    parser.add_argument("--score", nargs="+", type=Path, metavar="RESULT",
                        help="do not run: print the table of saved result files")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    files = args.users or split_files(args.split)
    users = load_users(files, only=set(args.only.split(",")) if args.only else None,
                       categories=set(args.category) if args.category else None, ci=args.ci,
                       langs=set(args.lang) if args.lang else None)
    args.files = files
    if args.score:
        results = [json.loads(path.read_text()) for path in args.score]
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        results = [] if args.peer_only else [_run_proxy(args, users)]
        if args.peer == "mem0":
            results.append(_run_mem0(args, users))
    report = "\n\n".join(table(users, results, by=by) for by in ("category", "lang", "split"))
    if not args.score:
        (args.out / "table.md").write_text(report + "\n")
    print(report)
    if args.split == "test" and not args.users:
        return  # the frozen split is not read case by case
    if not args.score:
        (args.out / "verdicts.json").write_text(json.dumps(verdicts(users, results), indent=1, ensure_ascii=False))
    for result in results:
        print("\n" + failures(users, result))


def verdicts(users: list, results: list[dict]) -> dict[str, list[dict]]:
    """Per system, every user with its language, category, split and failures (none: it passed)."""
    return {result["system"]: [{"user": user.id, "lang": user.lang, "category": user.category,
                                "openwebui": user.openwebui, "split": user.split,
                                "failures": judge(user, outcome).failures}
                               for user, outcome in zip(users, result["users"], strict=True)]
            for result in results}


def _run_proxy(args: argparse.Namespace, users: list) -> dict:
    from .proxy_runner import run_proxy  # imports the proxy: not needed to score saved runs

    llm = None if args.llm in ("fake", "oracle") else args.llm
    result = asyncio.run(run_proxy(users, llm_base_url=llm, llm_model=args.model, llm_mode=args.mode,
                                   log_file=args.out / "proxy.log", oracle=args.llm == "oracle",
                                   database_url=args.database_url,
                                   extra_env=dict(args.set)))
    (args.out / "proxy.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return result


def _run_mem0(args: argparse.Namespace, users: list) -> dict:
    from .embed_server import serve_in_background

    if args.llm in ("fake", "oracle"):
        sys.exit("mem0 needs a real LLM: pass --llm URL (its prompts are not the ones the fake answers)")
    out = args.out / "mem0.json"
    with serve_in_background() as embed_url:
        command = [str(args.mem0_python), str(HERE / "mem0_runner.py"), "--users", *map(str, args.files),
                   "--llm-base-url", args.llm, "--embed-base-url", embed_url, "--out", str(out),
                   "--only", ",".join(u.id for u in users)]
        subprocess.run(command, check=True)
    return json.loads(out.read_text())


if __name__ == "__main__":
    main()
