"""python -m benchmarks.formation_quality — memory formation quality, memory-proxy and (optionally) mem0.

    python -m benchmarks.formation_quality                       # scripted fake memory LLM (plumbing)
    python -m benchmarks.formation_quality --llm http://127.0.0.1:8081/v1 --peer mem0
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

from .scenarios import USERS_FILE, load_users
from .score import failures, table

HERE = Path(__file__).parent
DEFAULT_MEM0_PYTHON = Path.home() / ".cache/memory-proxy-bench/mem0-venv/bin/python"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="fake",
                        help="memory LLM: 'fake' (scripted answers from users.toml) or an OpenAI-compatible "
                             "base URL up to /v1 (default: fake)")
    parser.add_argument("--model", default="local", help="model name sent to the LLM server")
    parser.add_argument("--mode", default="json", help="MEMORY_LLM_MODE for memory-proxy (default: json)")
    parser.add_argument("--peer", choices=["mem0"], help="also run mem0 on the same users, LLM and embedder")
    parser.add_argument("--mem0-python", type=Path, default=Path(os.environ.get("MEM0_PYTHON", DEFAULT_MEM0_PYTHON)),
                        help="python of the venv with mem0ai (setup_mem0.sh prints it)")
    parser.add_argument("--users", type=Path, default=USERS_FILE, help="scenario file (default: users.toml)")
    parser.add_argument("--only", help="comma-separated user ids")
    parser.add_argument("--category", action="append", help="only users of this category (repeatable)")
    parser.add_argument("--ci", action="store_true", help="only the CI subset (users with ci = true)")
    parser.add_argument("--out", type=Path, default=Path("formation-quality-results"),
                        help="directory for results, logs and the table (default: ./formation-quality-results)")
    parser.add_argument("--score", nargs="+", type=Path, metavar="RESULT",
                        help="do not run: print the table of saved result files")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    users = load_users(args.users, only=set(args.only.split(",")) if args.only else None,
                       categories=set(args.category) if args.category else None, ci=args.ci)
    if args.score:
        results = [json.loads(path.read_text()) for path in args.score]
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        results = [_run_proxy(args, users)]
        if args.peer == "mem0":
            results.append(_run_mem0(args, users))
        (args.out / "table.md").write_text(table(users, results) + "\n")
    print(table(users, results))
    for result in results:
        print("\n" + failures(users, result))


def _run_proxy(args: argparse.Namespace, users: list) -> dict:
    from .proxy_runner import run_proxy  # imports the proxy: not needed to score saved runs

    llm = None if args.llm == "fake" else args.llm
    result = asyncio.run(run_proxy(users, llm_base_url=llm, llm_model=args.model, llm_mode=args.mode,
                                   log_file=args.out / "proxy.log"))
    (args.out / "proxy.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return result


def _run_mem0(args: argparse.Namespace, users: list) -> dict:
    from .embed_server import serve_in_background

    if args.llm == "fake":
        sys.exit("mem0 needs a real LLM: pass --llm URL (its prompts are not the ones the fake answers)")
    out = args.out / "mem0.json"
    with serve_in_background() as embed_url:
        command = [str(args.mem0_python), str(HERE / "mem0_runner.py"), "--users", str(args.users),
                   "--llm-base-url", args.llm, "--embed-base-url", embed_url, "--out", str(out),
                   "--only", ",".join(u.id for u in users)]
        subprocess.run(command, check=True)
    return json.loads(out.read_text())


if __name__ == "__main__":
    main()
