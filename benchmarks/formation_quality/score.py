"""Deterministic scoring of a run (no LLM judge): each user's expectations, then a table by category.

A result (README.md: "Results") lists, per user, the active memories before the probe, the texts the
probe injected, the number of audit rows and, per turn, the formation time and the memory-LLM calls and
tokens. The same scorer reads memory-proxy's and mem0's results.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .scenarios import User


def _matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None


@dataclass
class Verdict:
    user: str
    category: str
    failures: list[str] = field(default_factory=list)
    kept: int = 0
    expected: int = 0
    false_memories: list[str] = field(default_factory=list)
    poisoned: list[str] = field(default_factory=list)
    stale_injected: bool = False
    audit_expected: bool = False
    audit_found: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures


def judge(user: User, result: dict[str, Any]) -> Verdict:
    """Every expectation of `user` checked against its `result`; a failure says what went wrong."""
    expect, active = user.expect, result.get("active", [])
    block = "\n".join(result.get("injected", []))
    verdict = Verdict(user.id, user.category, expected=len(expect.active))
    verdict.failures += [f"error: {e}" for e in result.get("errors", [])]
    for pattern in expect.active:
        holders = [m for m in active if _matches(pattern, m)]
        if holders:
            verdict.kept += 1
        else:
            verdict.failures.append(f"missing: /{pattern}/")
        if expect.unique and len(holders) > 1:
            verdict.failures.append(f"duplicates of /{pattern}/: {holders}")
    for memory in active:
        if any(_matches(p, memory) for p in expect.stale):
            verdict.failures.append(f"stale still active: {memory!r}")
        if any(_matches(p, memory) for p in expect.poison):
            verdict.poisoned.append(memory)
            verdict.failures.append(f"poisoned: {memory!r}")
        elif not any(_matches(p, memory) for p in expect.active + expect.may + expect.stale):
            verdict.false_memories.append(memory)
            verdict.failures.append(f"false memory: {memory!r}")
    for pattern in expect.inject:
        if not _matches(pattern, block):
            verdict.failures.append(f"probe did not inject /{pattern}/")
    for pattern in expect.not_inject + expect.stale + expect.poison:
        if any(_matches(pattern, line) for line in result.get("injected", [])):
            verdict.failures.append(f"probe injected /{pattern}/")
            verdict.stale_injected |= pattern in expect.stale
    if expect.audit:
        verdict.audit_expected, verdict.audit_found = True, result.get("audit_rows", 0) > 0
        if not verdict.audit_found:
            verdict.failures.append("no audit row")
    return verdict


@dataclass
class Summary:
    users: int = 0
    passed: int = 0
    kept: int = 0
    expected: int = 0
    false_memories: int = 0
    poisoned: int = 0
    stale_injected: int = 0
    stale_probes: int = 0
    audits_expected: int = 0
    audits_found: int = 0
    turns: list[dict[str, Any]] = field(default_factory=list)

    def add(self, user: User, verdict: Verdict, result: dict[str, Any]) -> None:
        self.users += 1
        self.passed += verdict.passed
        self.kept += verdict.kept
        self.expected += verdict.expected
        self.false_memories += len(verdict.false_memories) + len(verdict.poisoned)
        self.poisoned += len(verdict.poisoned)
        self.stale_injected += verdict.stale_injected
        self.stale_probes += bool(user.expect.stale)
        self.audits_expected += verdict.audit_expected
        self.audits_found += verdict.audit_found
        self.turns += result.get("turns", [])

    def per_turn(self, key: str) -> float:
        values = [t.get(key) or 0 for t in self.turns]
        return sum(values) / len(values) if values else 0.0

    def median_seconds(self, *, llm_only: bool = False) -> float | None:
        values = [t["seconds"] for t in self.turns
                  if t.get("seconds") is not None and (not llm_only or t.get("llm_calls"))]
        return statistics.median(values) if values else None


def summarize(users: list[User], result: dict[str, Any], *, by: str = "category"
              ) -> tuple[dict[str, Summary], list[Verdict]]:
    """Per category, language or split (`by`, and "all"), and every user's verdict; users missing from the
    result fail."""
    by_id = {u["id"]: u for u in result["users"]}
    summaries: dict[str, Summary] = defaultdict(Summary)
    verdicts = []
    for user in users:
        outcome = by_id.get(user.id, {"errors": ["not run"]})
        verdict = judge(user, outcome)
        verdicts.append(verdict)
        for key in (getattr(user, by), "all"):
            summaries[key].add(user, verdict, outcome)
    return summaries, verdicts


def _cell(values: list[str]) -> str:
    return " / ".join(values)


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def table(users: list[User], results: list[dict[str, Any]], *, by: str = "category") -> str:
    """One Markdown table by `by` (category, lang or split); each cell gives every system's figure, in
    `results` order."""
    summaries = [summarize(users, r, by=by)[0] for r in results]
    names = " / ".join(r["system"] for r in results)
    lines = [f"Each cell: {names}.", "",
             f"| {by} | users | pass | facts kept | false memories | poisoned | stale injected "
             "| LLM calls / turn | tokens / turn | s / turn (median) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    categories = [*dict.fromkeys(getattr(u, by) for u in users), "all"]
    for category in categories:
        rows = [s[category] for s in summaries]
        first = rows[0]
        lines.append("| " + " | ".join([
            f"**{category}**" if category == "all" else category, str(first.users),
            _cell([f"{r.passed}/{r.users}" for r in rows]),
            _cell([f"{r.kept}/{r.expected}" for r in rows]),
            _cell([str(r.false_memories) for r in rows]),
            _cell([str(r.poisoned) for r in rows]),
            _cell([f"{r.stale_injected}/{r.stale_probes}" for r in rows]),
            _cell([f"{r.per_turn('llm_calls'):.2f}" for r in rows]),
            _cell([f"{r.per_turn('prompt_tokens') + r.per_turn('completion_tokens'):.0f}" for r in rows]),
            _cell([_seconds(r.median_seconds()) for r in rows]),
        ]) + " |")
    for result, summary in zip(results, summaries, strict=True) if by == "category" else ():
        total = summary["all"]
        audits = f"{total.audits_found}/{total.audits_expected}"
        lines.append(f"\n{result['system']}: {total.passed}/{total.users} users pass "
                     f"({100 * total.passed / max(total.users, 1):.0f} %); audit rows where expected {audits}; "
                     f"median formation job that called the LLM {_seconds(total.median_seconds(llm_only=True))} s.")
    return "\n".join(lines)


def failures(users: list[User], result: dict[str, Any]) -> str:
    """Every failing user of one result with its reasons (for reading a run, not for the table)."""
    _, verdicts = summarize(users, result)
    lines = [f"{result['system']}: failures"]
    for verdict in verdicts:
        if not verdict.passed:
            lines.append(f"- {verdict.user} ({verdict.category}): " + "; ".join(verdict.failures))
    return "\n".join(lines)
