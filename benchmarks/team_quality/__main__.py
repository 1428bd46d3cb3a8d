"""python -m benchmarks.team_quality — team memory quality: the scenarios played through a memory-proxy.

    python -m benchmarks.team_quality --llm oracle --split dev          # a perfect model: the rules alone
    python -m benchmarks.team_quality --llm http://127.0.0.1:8081/v1 --split test --json out.json
    python -m benchmarks.team_quality --llm oracle --set TEAM_FACTS=review

Prints one row of counts per split. The dev split's failing scenarios are listed after it; the test split's
are not, nor anything else of its scenarios (README.md: it is never read case by case), in print or in --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from ..formation_quality.__main__ import _setting
from .scenarios import Scenario, load_scenarios, split_files
from .score import Figures, Verdict, judge

COLUMNS = ("split", "scenarios", "pass", "personal facts wrongly shared", "team facts kept personal",
           "team facts kept", "personal facts kept", "false memories", "poisoned", "probe failures")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.team_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="oracle",
                        help="memory LLM: 'oracle' (each turn's ideal answer: a perfect model) or an "
                             "OpenAI-compatible base URL up to /v1 (default: oracle)")
    parser.add_argument("--model", default="local", help="model name sent to the LLM server")
    parser.add_argument("--mode", default="json", help="MEMORY_LLM_MODE for memory-proxy (default: json)")
    parser.add_argument("--split", choices=["dev", "test", "holdout", "all"], default="dev",
                        help="the scenarios: dev (training data), test or holdout (frozen: counts only) or all "
                             "(default: dev)")
    parser.add_argument("--only", help="comma-separated dev scenario ids (not for the frozen splits)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", type=_setting,
                        help="a memory-proxy setting for this run, e.g. TEAM_FACTS=review (repeatable; "
                             "TEAM_FACTS=auto unless set)")
    parser.add_argument("--database-url", help="a migrated PostgreSQL for the proxy (default: an embedded one)")
    parser.add_argument("--log", type=Path, help="the proxy's log lines to this file (default: dropped)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="the figures (and the dev scenarios' results)")
    return parser


def figures(scenarios: list[Scenario], verdicts: list[Verdict]) -> dict[str, Figures]:
    """The counts per split, and of all together."""
    found: dict[str, Figures] = {}
    for scenario, verdict in zip(scenarios, verdicts, strict=True):
        found.setdefault(scenario.split, Figures()).add(verdict)
    if len(found) > 1:
        total = found["all"] = Figures()
        for verdict in verdicts:
            total.add(verdict)
    return found


def table(counts: dict[str, Figures]) -> str:
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for split, f in counts.items():
        cells = (split, f.scenarios, f"{f.passed}/{f.scenarios}", f.wrongly_shared,
                 f"{f.team_kept_personal}/{f.team_expected}", f"{f.team_kept}/{f.team_expected}",
                 f"{f.personal_kept}/{f.personal_expected}", f.false_memories, f.poisoned,
                 f"{f.probe_failures}/{f.probes}")
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    scenarios = load_scenarios(split_files(args.split))
    if args.only:
        wanted = set(args.only.split(","))
        scenarios = [s for s in scenarios if s.id in wanted]
        if any(s.split != "dev" for s in scenarios):
            sys.exit("--only: the frozen splits are not run case by case")
        if not scenarios:
            sys.exit(f"--only: no dev scenario {args.only}")
    from .proxy_runner import run_scenarios  # imports the proxy: not needed for --help

    llm = None if args.llm == "oracle" else args.llm
    run = asyncio.run(run_scenarios(
        scenarios, llm_base_url=llm, llm_model=args.model, llm_mode=args.mode, database_url=args.database_url,
        log_file=args.log or Path(os.devnull), extra_env=dict(args.set),
        progress=lambda n, s, seconds: f"scenario {n}/{len(scenarios)}{f' {s.id}' if s.split == 'dev' else ''}: "
                                       f"{seconds:.1f} s"))
    verdicts = [judge(s, r) for s, r in zip(scenarios, run["scenarios"], strict=True)]
    counts = figures(scenarios, verdicts)
    print(table(counts))
    dev = [(s, r, v) for s, r, v in zip(scenarios, run["scenarios"], verdicts, strict=True) if s.split == "dev"]
    failing = [(s, v) for s, _, v in dev if not v.passed]
    if dev:
        print(f"\ndev: {len(failing)} failing scenario(s)")
    for scenario, verdict in failing:
        print(f"- {scenario.id} ({scenario.category}): " + "; ".join(verdict.failures))
    if args.json:
        saved = {key: value for key, value in run.items() if key != "scenarios"}
        saved["figures"] = {split: vars(f) for split, f in counts.items()}
        saved["dev"] = [{"id": s.id, "category": s.category, "lang": s.lang, "failures": v.failures, **r}
                        for s, r, v in dev]
        args.json.write_text(json.dumps(saved, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
