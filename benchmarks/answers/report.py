"""The table of a run: per system, how often the reply holds the answer, LoCoMo's F1, the judge's verdict when one
was asked, per category, and what a question and a fed turn cost."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ..formation_quality.locomo import found
from . import profile
from .conversations import CATEGORIES, Conversation, case
from .scoring import f1, holds_answer

ORDER = ("none", "whole", "raw", "mem0", "facts", "episodes", "both", "both_tools", "oracle", "oracle_both")


def scored(conversation: Conversation, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for reply in result["replies"]:
        question = conversation.questions[reply["question"]]
        rows.append({"category": question.category, "held": holds_answer(reply["text"], question.answer, question.category),
                     "f1": f1(reply["text"], question.answer, question.category),
                     "reached": question.category != 5 and found(question.answer, reply["given"]),
                     "judge": reply.get("judge"), "tokens": reply["prompt_tokens"] + reply["completion_tokens"],
                     "seconds": reply["seconds"], "error": bool(reply["error"])})
    return rows


def _feed_cost(directory: Path, feed: str) -> str:
    path = directory / f"feed-{feed}.json"
    if not path.exists():
        return "—"
    turns = json.loads(path.read_text())["turns"]
    seconds = [t["seconds"] for t in turns if t["seconds"] is not None]
    return (f"{statistics.mean(t['tokens'] for t in turns):.0f} tok, "
            f"{statistics.median(seconds) if seconds else 0:.1f} s") if turns else "—"


def table(out: Path, cases: list[str]) -> str:
    lines = []
    for name in cases:
        directory = out / name
        if not directory.exists():
            continue
        conversation = case(name)
        n = len(conversation.questions)
        by_cat = {c: sum(q.category == c for q in conversation.questions) for c in CATEGORIES}
        cats = [c for c in CATEGORIES if by_cat[c]]
        lines += [f"\n{name}: {n} questions ({', '.join(f'{CATEGORIES[c]} {by_cat[c]}' for c in cats)}), "
                  f"{sum(len(s.turns(conversation.user)) for s in conversation.sessions)} turns of the user's\n",
                  "| system | answer in the reply | F1 | judge | " + " | ".join(CATEGORIES[c] for c in cats)
                  + " | answer reached the model | tokens / question | s / question | memory model a fed turn | errors |",
                  "|---|---|---|---|" + "---|" * len(cats) + "---|---|---|---|---|"]
        for system in sorted((p.stem for p in directory.glob("*.json") if not p.stem.startswith("feed-")
                              and p.stem in ORDER), key=ORDER.index):
            result = json.loads((directory / f"{system}.json").read_text())
            rows = scored(conversation, result)
            judged = [r["judge"] for r in rows if r["judge"] is not None]
            held = sum(r["held"] for r in rows)
            per_cat = " | ".join(f"{sum(r['held'] for r in rows if r['category'] == c)}/{by_cat[c]}" for c in cats)
            reached = sum(r["reached"] for r in rows)
            feed = result.get("feed")
            lines.append(
                f"| {system} | **{held}/{n}** ({100 * held / n:.0f} %) | {statistics.mean(r['f1'] for r in rows):.3f} | "
                f"{f'{sum(judged)}/{len(judged)}' if judged else '—'} | {per_cat} | "
                f"{reached}/{n - by_cat.get(5, 0)} | {statistics.mean(r['tokens'] for r in rows):.0f} | "
                f"{statistics.mean(r['seconds'] for r in rows):.1f} | {_feed_cost(directory, feed) if feed else '—'} | "
                f"{sum(r['error'] for r in rows)} |")
        lines += profile.lines(directory, conversation)
        extra = directory / "whole.json"
        if extra.exists():
            fit = json.loads(extra.read_text()).get("fit")
            if fit:
                lines.append(f"\nwhole: {fit[0]} of {fit[1]} sessions fit in the model's window")
    return "\n".join(lines)
