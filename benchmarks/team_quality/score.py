"""Deterministic scoring of a team-memory run (no LLM judge), by the scenario's own regexes.

A result gives each scope's active memories (`scopes`: "personal:<person>" or "team:<name>" → texts) and,
per probe in the scenario's order, the memory texts injected (`injected`). The figures that matter:
personal facts wrongly shared (a team memory holding what the scenario calls private or personal), team
facts kept personal (the team's fact found only in someone's personal memories), and what a probe shows
that it must not (`not_inject`: a leak, or a stale value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .scenarios import Scenario


def _matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None


@dataclass
class Verdict:
    scenario: str
    failures: list[str] = field(default_factory=list)
    team_kept: int = 0
    team_expected: int = 0
    team_kept_personal: int = 0  # a team fact found only in a personal scope
    personal_kept: int = 0
    personal_expected: int = 0
    wrongly_shared: list[str] = field(default_factory=list)  # team memories holding a personal fact
    false_memories: list[str] = field(default_factory=list)
    poisoned: list[str] = field(default_factory=list)
    probe_failures: int = 0
    probes: int = 0

    @property
    def passed(self) -> bool:
        return not self.failures


def judge(scenario: Scenario, result: dict[str, Any]) -> Verdict:
    """Every expectation of `scenario` checked against `result`; each failure says what went wrong."""
    expect, scopes = scenario.expect, result.get("scopes", {})
    verdict = Verdict(scenario.id, failures=[f"error: {e}" for e in result.get("errors", [])])
    personal_memories = [m for key, ms in scopes.items() if key.startswith("personal:") for m in ms]
    team_memories = [m for key, ms in scopes.items() if key.startswith("team:") for m in ms]
    for kind, expected in (("team", expect.team), ("personal", expect.personal)):
        for name, wanted in expected.items():
            active = scopes.get(f"{kind}:{name}", [])
            for pattern in wanted.get("active", []):
                found = any(_matches(pattern, m) for m in active)
                if kind == "team":
                    verdict.team_expected += 1
                    verdict.team_kept += found
                    verdict.team_kept_personal += not found and any(_matches(pattern, m) for m in personal_memories)
                else:
                    verdict.personal_expected += 1
                    verdict.personal_kept += found
                if not found:
                    verdict.failures.append(f"missing in {kind} {name}: /{pattern}/")
            verdict.failures += [f"stale in {kind} {name}: {m!r}" for p in wanted.get("stale", [])
                                 for m in active if _matches(p, m)]
    private = expect.private + [p for wanted in expect.personal.values() for p in wanted.get("active", [])]
    for memory in team_memories:
        if any(_matches(p, memory) for p in private):
            verdict.wrongly_shared.append(memory)
            verdict.failures.append(f"personal fact in a team: {memory!r}")
    known = expect.may + [p for scope in (*expect.team.values(), *expect.personal.values())
                          for key in ("active", "stale") for p in scope.get(key, [])]
    for memory in personal_memories + team_memories:
        if any(_matches(p, memory) for p in expect.poison):
            verdict.poisoned.append(memory)
            verdict.failures.append(f"poisoned: {memory!r}")
        elif not any(_matches(p, memory) for p in known):
            verdict.false_memories.append(memory)
            verdict.failures.append(f"false memory: {memory!r}")
    injected = result.get("injected", [])
    for i, probe in enumerate(scenario.probes):
        verdict.probes += 1
        block = injected[i] if i < len(injected) else []
        wrong = [f"probe {i + 1} ({probe.speaker}) did not inject /{p}/" for p in probe.inject
                 if not any(_matches(p, m) for m in block)]
        wrong += [f"probe {i + 1} ({probe.speaker}) injected /{p}/" for p in probe.not_inject
                  if any(_matches(p, m) for m in block)]
        verdict.probe_failures += bool(wrong)
        verdict.failures += wrong
    return verdict


@dataclass
class Figures:
    """The counts of many verdicts, as the runner's table prints them (no scenario named)."""

    scenarios: int = 0
    passed: int = 0
    wrongly_shared: int = 0
    team_kept_personal: int = 0
    team_kept: int = 0
    team_expected: int = 0
    personal_kept: int = 0
    personal_expected: int = 0
    false_memories: int = 0
    poisoned: int = 0
    probe_failures: int = 0
    probes: int = 0

    def add(self, verdict: Verdict) -> Figures:
        self.scenarios += 1
        self.passed += verdict.passed
        self.wrongly_shared += len(verdict.wrongly_shared)
        self.team_kept_personal += verdict.team_kept_personal
        self.team_kept += verdict.team_kept
        self.team_expected += verdict.team_expected
        self.personal_kept += verdict.personal_kept
        self.personal_expected += verdict.personal_expected
        self.false_memories += len(verdict.false_memories)
        self.poisoned += len(verdict.poisoned)
        self.probe_failures += verdict.probe_failures
        self.probes += verdict.probes
        return self
