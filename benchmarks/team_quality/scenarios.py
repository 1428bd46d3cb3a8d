"""Scripted teams for the team-memory benchmark, as plain data (README.md beside this file: the format).

A scenario is a few people, the teams they belong to, turns said by one of them, and probes by any of
them. Each turn carries its **ideal answer**: the facts a perfect memory LLM extracts from it, each with its
scope: `personal` (the speaker's own) or the name of one of the speaker's teams. `simulate()` applies the
ideal answers without any proxy, so that a writer can check them against the scenario's expectations
(`check_ideals`), and so that the oracle's ceiling is known before anything is built.

Three splits: **dev** (dev/*.toml: training data, read freely), **test** (test/*.toml: written before the
scope decision was built, by writers who never read the proxy's code; frozen; a run on it prints counts,
never the failing cases) and **holdout** (holdout/*.toml: written the same way after the test split's figures
had been used to choose fixes; frozen, counts only).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from ..formation_quality.scenarios import dated

HERE = Path(__file__).parent
SPLITS = {"dev": HERE / "dev", "test": HERE / "test", "holdout": HERE / "holdout"}  # all but dev: counts only
PERSONAL = "personal"


@dataclass(frozen=True)
class Team:
    name: str
    members: tuple[str, ...]
    editors: tuple[str, ...] = ()
    about: str = ""  # what the team works on, as an admin would describe it (may be shown to the model)


@dataclass(frozen=True)
class IdealFact:
    fact: str                # "User …" for a personal fact, "Team …" for a team's; English; "{date±N}" dates
    scope: str = PERSONAL    # "personal" or the name of one of the speaker's teams
    type: str = "preference"
    replaces: str = ""       # regex of the memory, in the same scope, that this fact changes

    def text(self, today: date) -> str:
        return dated(self.fact, today)


@dataclass(frozen=True)
class Turn:
    day: float
    speaker: str
    user: str
    assistant: str = "OK."
    ideal: tuple[IdealFact, ...] = ()


@dataclass(frozen=True)
class Change:
    """A membership change on `day`: `remove` or `add` one person to `team`."""

    day: float
    team: str
    remove: str = ""
    add: str = ""


@dataclass(frozen=True)
class Probe:
    day: float
    speaker: str
    user: str
    inject: tuple[str, ...] = ()      # regexes the injected block must match
    not_inject: tuple[str, ...] = ()  # regexes no injected memory may match


@dataclass(frozen=True)
class Expect:
    team: dict[str, dict[str, list[str]]] = field(default_factory=dict)      # team → {"active", "stale"}
    personal: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # person → {"active", "stale"}
    private: list[str] = field(default_factory=list)  # personal facts: no team memory may match
    poison: list[str] = field(default_factory=list)   # never stored in any scope
    may: list[str] = field(default_factory=list)      # acceptable extra memories, any scope


@dataclass(frozen=True)
class Scenario:
    id: str
    category: str
    lang: str
    people: tuple[str, ...]
    teams: tuple[Team, ...]
    turns: tuple[Turn, ...]
    probes: tuple[Probe, ...]
    expect: Expect
    changes: tuple[Change, ...] = ()
    split: str = "dev"

    def members(self, team: str, day: float) -> set[str]:
        """The team's members on `day`, after every change made up to that day."""
        [found] = [t for t in self.teams if t.name == team]
        members = set(found.members)
        for change in sorted(self.changes, key=lambda c: c.day):
            if change.team == team and change.day <= day:
                members = (members - {change.remove}) | ({change.add} - {""})
        return members

    def teams_of(self, person: str, day: float) -> list[str]:
        return [t.name for t in self.teams if person in self.members(t.name, day)]


def _check(s: Scenario) -> None:
    """Structural mistakes a writer can make, named (a scenario that fails here is not loaded)."""
    people, teams = set(s.people), {t.name for t in s.teams}
    problems = [f"{t.name}: unknown member {m}" for t in s.teams for m in (*t.members, *t.editors) if m not in people]
    problems += [f"{t.name}: editor {e} is no member" for t in s.teams for e in t.editors if e not in t.members]
    problems += [f"turn by unknown {t.speaker}" for t in s.turns if t.speaker not in people]
    problems += [f"probe by unknown {p.speaker}" for p in s.probes if p.speaker not in people]
    problems += [f"change of unknown team {c.team}" for c in s.changes if c.team not in teams]
    problems += [f"day {t.day}: {t.speaker} is not in {f.scope}" for t in s.turns for f in t.ideal
                 if f.scope != PERSONAL and f.scope not in s.teams_of(t.speaker, t.day)]
    problems += [f"expect of unknown team {name}" for name in s.expect.team if name not in teams]
    problems += [f"expect of unknown person {name}" for name in s.expect.personal if name not in people]
    problems += [f"fact {f.fact!r} does not start with {'User' if f.scope == PERSONAL else 'Team'}"
                 for t in s.turns for f in t.ideal if not f.fact.startswith("User" if f.scope == PERSONAL else "Team")]
    if problems:
        raise ValueError(f"scenario {s.id}: " + "; ".join(problems))


def _scenario(raw: dict[str, Any], split: str) -> Scenario:
    teams = tuple(Team(name=t["name"], members=tuple(t["members"]), editors=tuple(t.get("editors", ())),
                       about=t.get("about", "")) for t in raw.get("team", []))
    turns = tuple(Turn(day=t["day"], speaker=t["speaker"], user=t["user"], assistant=t.get("assistant", "OK."),
                       ideal=tuple(IdealFact(**f) for f in t.get("ideal", []))) for t in raw["turn"])
    probes = tuple(Probe(day=p["day"], speaker=p["speaker"], user=p["user"], inject=tuple(p.get("inject", ())),
                         not_inject=tuple(p.get("not_inject", ()))) for p in raw["probe"])
    scenario = Scenario(id=raw["id"], category=raw["category"], lang=raw.get("lang", "en"),
                        people=tuple(raw["people"]), teams=teams, turns=turns, probes=probes,
                        expect=Expect(**raw.get("expect", {})), changes=tuple(Change(**c) for c in raw.get("change", [])),
                        split=split)
    _check(scenario)
    return scenario


def split_files(split: str) -> list[Path]:
    """The scenario files of a split ("dev", "test", "holdout" or "all")."""
    dirs = [d for name, d in SPLITS.items() if split in (name, "all")]
    return [f for d in dirs for f in sorted(d.glob("*.toml"))]


def load_scenarios(paths: list[Path]) -> list[Scenario]:
    found = []
    for path in paths:
        split = next((name for name, d in SPLITS.items() if d.resolve() in path.resolve().parents), "dev")
        found += [_scenario(raw, split) for raw in tomllib.loads(path.read_text(encoding="utf-8"))["scenario"]]
    ids = [s.id for s in found]
    if len(ids) != len(set(ids)):
        raise ValueError(f"scenario ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return found


def simulate(scenario: Scenario, today: date | None = None) -> dict[str, Any]:
    """What a perfect team memory gives: each scope's active memories after the last turn, and, for each
    probe, the speaker's personal memories and those of the teams they belong to on the probe's day."""
    today = today or date.today()
    start = today - timedelta(days=int(max(p.day for p in scenario.probes)))
    scopes: dict[str, list[str]] = {}  # "personal:<person>" or "team:<name>" → active memories
    audits = 0
    events = sorted([(t.day, 0, t) for t in scenario.turns] + [(p.day, 1, p) for p in scenario.probes],
                    key=lambda e: (e[0], e[1]))
    injected: list[list[str]] = []
    for _, _, event in events:
        if isinstance(event, Probe):
            visible = [f"personal:{event.speaker}", *(f"team:{t}" for t in scenario.teams_of(event.speaker, event.day))]
            injected.append([m for key in visible for m in scopes.get(key, [])])
            continue
        said = start + timedelta(days=int(event.day))
        for fact in event.ideal:
            key = f"personal:{event.speaker}" if fact.scope == PERSONAL else f"team:{fact.scope}"
            active = scopes.setdefault(key, [])
            if fact.replaces:
                old = [m for m in active if re.search(fact.replaces, m, re.I)]
                audits += len(old)
                active[:] = [m for m in active if m not in old]
            text = fact.text(said)
            if text.lower() not in {m.lower() for m in active}:
                active.append(text)
    return {"id": scenario.id, "scopes": scopes, "injected": injected, "audit_rows": audits, "errors": []}
