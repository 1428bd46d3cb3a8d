"""Where each fact is lost: every ideal fact of a saved run followed through formation, step by step.

    python -m benchmarks.formation_quality --split dev --llm http://127.0.0.1:8081/v1 --out out/dev
    python -m benchmarks.formation_quality.steps out/dev --split dev      # the table; --json for every fact

A user is scored whole (score.py); this says at which step a fact the ideal answer holds went missing,
and what the model stored that no ideal holds. It reads the run's `proxy.json` (each user's memories by
id) and `proxy.log` (the worker's `memory_decision` line per job: what the extraction call returned,
each fact a guard dropped and why, and the decision taken for each kept fact). Each ideal fact of a
turn is matched, by meaning, to the fact the model extracted in that turn nearest to it by the proxy's own
embedder, at cosine ≥ MATCH, or ≥ NEAR when that fact holds most of its words (one extracted fact may say
several: "User is a software engineer who uses Bun."). Thresholds read off dev pairs: one fact reworded
scores 0.83–0.97, two values of one thing (Lyon, Quito) 0.57, a fact that says more besides 0.64. Its fate is
the first step where it fell short of the ideal:

- job: the turn's job failed, or skipped the model (a trivial turn);
- extraction: no extracted fact matches it (`unreadable` when the reply could not be read);
- guard: its match was dropped by a deterministic guard (the reason as logged);
- relate: a fact that `replaces` an old memory was added beside it (`no update proposed`, or the
  check call `refused` the pair), replaced another memory (`wrong pair`), or was ignored; a fact without
  `replaces` ignored as the same as a memory that says something else;
- later: stored, but retired by a later turn when the ideal keeps it to the end;
- kept.

Beside them, what the model extracted that matches no ideal fact of its turn: dropped by a guard, or
stored (then judged by the user's own regexes: `poison`, acceptable `active`/`may`, else false); and each
memory a turn retired that the ideal keeps (a true fact replaced or forgotten).

The frozen test split is read for counts only: `--json` is refused there.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from .scenarios import IdealFact, User, load_users, simulate, split_files

MATCH = 0.72  # cosine at or above which an extracted fact says an ideal fact (MiniLM, English "User …" facts)
NEAR = 0.5  # … or at or above this when it holds COVERED of the ideal fact's words (it says more besides)
COVERED = 0.75
_WORD = re.compile(r"\w+")
_FILLER = {"user", "s", "is", "are", "a", "an", "the", "in", "of", "to", "and", "their", "has", "have", "at", "for",
           "with", "on", "called", "named", "who"}
STEPS = ("job", "extraction", "guard", "relate", "later", "kept")


@dataclass
class Job:
    """What one turn's formation job did, from its final `memory_decision` line."""

    status: str
    decisions: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    malformed: bool = False

    def extracted(self) -> list[tuple[str, dict[str, Any] | None, str | None]]:
        """Every fact the extraction returned: (text, its decision or None, the guard's reason or None)."""
        stored = [(d["fact"], d, None) for d in self.decisions
                  if d["action"] != "forget" and "asked to forget" not in d.get("reason", "")]
        return stored + [(d["fact"], None, d["why"]) for d in self.dropped if d.get("fact")]


@dataclass
class Fate:
    user: str
    lang: str
    turn: int
    fact: str
    step: str
    detail: str = ""
    updates: bool = False  # the ideal fact replaces an old memory


def jobs_by_user(log: Path) -> dict[str, list[Job]]:
    """Each user's jobs in the order they were written (one per turn, then the probe's), by the user id of
    the scenario (the run's tag removed)."""
    final: dict[str, dict[int, Job]] = defaultdict(dict)
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") != "memory_decision":
            continue
        user = str(entry["user_id"]).rsplit("-", 1)[0]
        final[user][int(entry["job_id"])] = Job(
            status=entry.get("status", ""), decisions=entry.get("decisions") or [],
            dropped=entry.get("dropped") or [], malformed=bool(entry.get("malformed")))
    return {user: [jobs[i] for i in sorted(jobs)] for user, jobs in final.items()}


class Matcher:
    """Cosine similarity by the proxy's own local embedder (cached per text)."""

    def __init__(self) -> None:
        from memory_proxy.embedding.local_model import LocalEmbedder

        self.embedder = LocalEmbedder(threads=1)
        self.vectors: dict[str, np.ndarray] = {}

    def _vector(self, texts: list[str]) -> None:
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            for text, vector in zip(new, self.embedder.embed_sync(new), strict=True):
                array = np.asarray(vector, dtype=np.float32)
                self.vectors[text] = array / (np.linalg.norm(array) or 1.0)

    def similarity(self, a: str, b: str) -> float:
        self._vector([a, b])
        return float(self.vectors[a] @ self.vectors[b])

    def pairs(self, ideals: list[str], found: list[str]) -> dict[int, int]:
        """Ideal index → the index of the found fact that says it best, for those that say it (MATCH, or
        NEAR with COVERED of its words). One found fact may say several ideal facts."""
        self._vector([*ideals, *found])
        matched: dict[int, int] = {}
        for a, ideal in enumerate(ideals):
            says = [(score, b) for b, f in enumerate(found)
                    if (score := self.similarity(ideal, f)) >= MATCH or (score >= NEAR and _covers(f, ideal))]
            if says:
                matched[a] = max(says)[1]
        return matched


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _FILLER


def _covers(found: str, ideal: str) -> bool:
    want = _words(ideal)
    return bool(want) and len(want & _words(found)) >= COVERED * len(want)


def _said_on(user: User, turn_day: float, run_day: date) -> date:
    return run_day - timedelta(days=int(user.probe.day)) + timedelta(days=int(turn_day))


def follow(user: User, result: dict[str, Any], jobs: list[Job], matcher: Matcher, run_day: date
           ) -> tuple[list[Fate], Counter[str], Counter[str]]:
    """Each ideal fact's fate; what was extracted beyond the ideal (by outcome); wrong retirements (by step)."""
    memories: dict[str, dict[str, Any]] = result.get("memories", {})
    expected_end = {t.lower() for t in simulate(user, run_day)["active"]}
    fates: list[Fate] = []
    extra: Counter[str] = Counter()
    wrongly_retired: Counter[str] = Counter()
    for number, turn in enumerate(user.turns):
        job = jobs[number] if number < len(jobs) else None
        said_on = _said_on(user, turn.day, run_day)
        ideals = [fact.text(said_on) for fact in turn.ideal]
        found = job.extracted() if job else []
        matched = matcher.pairs(ideals, [text for text, _, _ in found]) if ideals and found else {}
        for index, (fact, text) in enumerate(zip(turn.ideal, ideals, strict=True)):
            pair = found[matched[index]] if index in matched else None
            step, detail = _fate(fact, text, job, pair, memories, matcher, expected_end)
            fates.append(Fate(user.id, user.lang, number + 1, text, step, detail, bool(fact.replaces)))
        for position, (text, decision, why) in enumerate(found):
            if position not in matched.values():
                extra[_extra(user, text, decision, why)] += 1
        if job:
            for decision in job.decisions:
                wrong = _wrong_retirement(turn.ideal, turn.forgets, decision, memories, matcher, text_of=ideals)
                if wrong:
                    wrongly_retired[wrong] += 1
    return fates, extra, wrongly_retired


def _fate(fact: IdealFact, text: str, job: Job | None, pair: tuple[str, dict[str, Any] | None, str | None] | None,
          memories: dict[str, dict[str, Any]], matcher: Matcher, expected_end: set[str]) -> tuple[str, str]:
    if job is None or job.status not in ("done", "skipped"):
        return "job", job.status if job else "no job"
    if job.status == "skipped":
        return "job", "skipped the model"
    if pair is None:
        return "extraction", "unreadable reply" if job.malformed and not job.extracted() else "missed"
    _, decision, why = pair
    if decision is None:
        return "guard", why or "dropped"
    action, reason = decision["action"], decision.get("reason", "")
    target = memories.get(decision.get("target_id") or "", {}).get("content", "")
    if fact.replaces:
        if action in ("replace", "refine") and re.search(fact.replaces, target, re.I):
            pass
        elif action in ("replace", "refine"):
            return "relate", "wrong pair"
        elif action == "add":
            return "relate", ("check refused" if "not confirmed" in reason else "kept beside (lifetime)"
                              if "kept beside" in reason else "no update proposed")
        else:
            return "relate", f"ignored: {_reason_kind(reason)}"
    elif action == "ignore" and target and "exact duplicate" not in reason and matcher.similarity(target, text) < MATCH:
        return "relate", f"ignored: {_reason_kind(reason)}"
    stored = memories.get(decision.get("memory_id") or decision.get("target_id") or "", {})
    active = {m["content"].lower() for m in memories.values() if m["active"]}
    if text.lower() in expected_end and stored and stored["content"].lower() not in active:
        return "later", "retired by a later turn"  # and not said again since (a flip back re-adds the text)
    return "kept", ""


def _reason_kind(reason: str) -> str:
    for kind in ("exact duplicate", "flip-flop", "remembered", "already retired", "same"):
        if kind in reason:
            return kind
    return reason[:40]


def _extra(user: User, text: str, decision: dict[str, Any] | None, why: str | None) -> str:
    if decision is None:
        return f"dropped by a guard ({why})"
    if decision["action"] == "ignore":
        return "not stored (the same as a memory)"
    expect = user.expect
    if any(re.search(p, text, re.I) for p in expect.poison):
        return "stored: poisoned"
    if any(re.search(p, text, re.I) for p in [*expect.active, *expect.may, *expect.stale]):
        return "stored: acceptable"
    return "stored: false"


def _wrong_retirement(ideal: tuple[IdealFact, ...], forgets: tuple[str, ...], decision: dict[str, Any],
                      memories: dict[str, dict[str, Any]], matcher: Matcher, text_of: list[str]) -> str | None:
    """The step that retired a memory the ideal keeps, or None (nothing retired, or rightly)."""
    action = decision["action"]
    if action not in ("replace", "refine", "forget") or not decision.get("target_id"):
        return None
    old = memories.get(decision["target_id"], {}).get("content", "")
    if action == "forget":
        return None if any(re.search(p, old, re.I) for p in forgets) else "forget named a kept memory"
    if any(f.replaces and re.search(f.replaces, old, re.I) for f in ideal):
        return None
    if any(matcher.similarity(old, t) >= MATCH for t in text_of):  # a restatement made more precise
        return None
    return f"relate+check {action}d a kept memory"


def report(fates: list[Fate], extra: Counter[str], wrong: Counter[str]) -> str:
    total = len(fates)
    lines = [f"| step where the fact was lost | facts ({total} ideal facts) | of which updates |", "|---|---|---|"]
    by = Counter((f.step, f.detail) for f in fates)
    updates = Counter((f.step, f.detail) for f in fates if f.updates)
    for step in STEPS:
        for (s, detail), count in sorted(by.items(), key=lambda kv: -kv[1]):
            if s == step:
                label = f"{step}: {detail}" if detail else step
                lines.append(f"| {label} | {count} ({100 * count / max(total, 1):.0f} %) | {updates[(s, detail)]} |")
    lines += ["", "| extracted beyond the ideal | facts |", "|---|---|"]
    lines += [f"| {kind} | {count} |" for kind, count in extra.most_common()]
    lines += ["", "| a memory the ideal keeps, retired | memories |", "|---|---|"]
    lines += [f"| {kind} | {count} |" for kind, count in wrong.most_common()] or ["| none | 0 |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality.steps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the --out directory of a memory-proxy run (proxy.json, proxy.log)")
    parser.add_argument("--split", choices=["dev", "test", "all"], default="dev")
    parser.add_argument("--users", type=Path, nargs="+", help="scenario files or directories instead of a split")
    parser.add_argument("--json", type=Path, help="write every fact's fate here (not on the frozen test split)")
    args = parser.parse_args(argv)
    result = json.loads((args.run / "proxy.json").read_text())
    users = {u.id: u for u in load_users(args.users or split_files(args.split))}
    jobs = jobs_by_user(args.run / "proxy.log")
    run_day = datetime.fromisoformat(result["started_at"]).astimezone(UTC).date()
    matcher = Matcher()
    fates: list[Fate] = []
    extra: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    for outcome in result["users"]:
        user = users.get(outcome["id"])
        if user is None:
            continue
        f, e, w = follow(user, outcome, jobs.get(user.id, []), matcher, run_day)
        fates += f
        extra += e
        wrong += w
    print(report(fates, extra, wrong))
    if args.json:
        if any(users[f.user].split == "test" for f in fates):
            raise SystemExit("the frozen test split is read for counts only: no --json")
        args.json.write_text(json.dumps([f.__dict__ for f in fates], indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
