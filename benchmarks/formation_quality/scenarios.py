"""The scripted users as plain data (README.md beside this file describes the format).

Two splits: **dev** (users.toml, holdout.toml and dev/*.toml: the team's own users, training data) and
**test** (test/*.toml: written before the formation redesign by writers who never read the proxy's
formation code, frozen, never read case by case while developing; only its figures count).

Each turn may carry its **ideal answer** (`ideal`, `forget`, `forgets`): what a perfect memory LLM would
say of it. The oracle (`scripted.OracleScript`) answers every formation call from it, so that a run
with it measures the deterministic layer alone; `simulate()` applies it without any proxy, so that a
writer can check that their ideal answers and their expectations agree.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
USERS_FILE = HERE / "users.toml"
SPLITS = {"dev": [HERE / "users.toml", HERE / "holdout.toml", HERE / "dev"], "test": [HERE / "test"]}
EMPTY_EXTRACTION = '{"facts": []}'
_DATE = re.compile(r"\{date([+-]\d+)?\}")


@dataclass(frozen=True)
class IdealFact:
    fact: str                 # "User …", English, names as the user wrote them; "{date-1}" for a resolved date
    type: str = "preference"  # identity, preference, relationship, project, context, temporary
    replaces: str = ""        # regex (case-insensitive) of the memory this fact changes, "" for none

    def text(self, today: date) -> str:
        return dated(self.fact, today)


def dated(fact: str, today: date) -> str:
    """An ideal fact with its `{date±N}` resolved against the day it was said (ISO dates)."""
    return _DATE.sub(lambda m: (today + timedelta(days=int(m.group(1) or 0))).isoformat(), fact)


@dataclass(frozen=True)
class Turn:
    day: float
    user: str
    assistant: str = "OK."
    fake: str = EMPTY_EXTRACTION  # the scripted fake memory LLM's answer to this turn's extraction
    ideal: tuple[IdealFact, ...] = ()  # the facts a perfect model extracts from this turn
    forget: str = ""  # what the user asks to forget, as a perfect model would name it ("" for nothing)
    forgets: tuple[str, ...] = ()  # regexes of the memories that request names


@dataclass(frozen=True)
class Seed:
    text: str
    type: str = "preference"


@dataclass(frozen=True)
class Expect:
    active: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    poison: list[str] = field(default_factory=list)
    may: list[str] = field(default_factory=list)
    inject: list[str] = field(default_factory=list)
    not_inject: list[str] = field(default_factory=list)
    audit: bool | None = None
    unique: bool = False


@dataclass(frozen=True)
class User:
    id: str
    category: str
    turns: list[Turn]
    probe: Turn
    expect: Expect
    seeds: list[Seed] = field(default_factory=list)
    ci: bool = False
    lang: str = "en"  # the language the user writes in (ISO 639-1)
    openwebui: bool = False  # sent as OpenWebUI sends a chat: system prompt and the whole conversation
    system: str = ""  # that system prompt (OpenWebUI's per-user or per-model system prompt), if any
    split: str = "dev"
    questions: tuple[str, ...] = ()  # more probes, each asked after the probe: what is injected for each is kept


def _seed(raw: str | dict[str, Any]) -> Seed:
    return Seed(raw) if isinstance(raw, str) else Seed(**raw)


def _turn(raw: dict[str, Any]) -> Turn:
    raw = dict(raw)
    ideal = tuple(IdealFact(**f) if isinstance(f, dict) else IdealFact(f) for f in raw.pop("ideal", []))
    forgets = tuple(raw.pop("forgets", ()))
    return Turn(**raw, ideal=ideal, forgets=forgets)


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found += sorted(path.glob("*.toml")) if path.is_dir() else [path] if path.exists() else []
    return found


def split_files(split: str) -> list[Path]:
    """The scenario files of a split ("dev", "test" or "all")."""
    return _files([p for name, paths in SPLITS.items() if split in (name, "all") for p in paths])


def load_users(path: Path | list[Path] = USERS_FILE, *, only: set[str] | None = None,
               categories: set[str] | None = None, ci: bool = False, langs: set[str] | None = None
               ) -> list[User]:
    """The users of `path` (a file, a directory or a list of them), optionally only some ids, categories,
    languages, or the CI subset."""
    users = []
    test_dir = SPLITS["test"][0].resolve()
    for file in _files(path if isinstance(path, list) else [path]):
        split = "test" if test_dir in file.resolve().parents else "dev"
        for raw in tomllib.loads(file.read_text(encoding="utf-8"))["user"]:
            user = User(id=raw["id"], category=raw["category"], turns=[_turn(t) for t in raw["turn"]],
                        probe=_turn(raw["probe"]), expect=Expect(**raw.get("expect", {})),
                        seeds=[_seed(s) for s in raw.get("seed", [])], ci=raw.get("ci", False),
                        lang=raw.get("lang", "en"), openwebui=raw.get("openwebui", False),
                        system=raw.get("system", ""), split=split, questions=tuple(raw.get("questions", ())))
            if ((only and user.id not in only) or (categories and user.category not in categories)
                    or (ci and not user.ci) or (langs and user.lang not in langs)):
                continue
            users.append(user)
    ids = [u.id for u in users]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: user ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return users


def simulate(user: User, today: date | None = None) -> dict[str, Any]:
    """The result a perfect memory layer would give (active memories and audit rows; the probe's block
    taken as every active memory): the ideal answers applied in order, seeds first. For writers, to
    check a user's ideal answers against its expectations with `score.judge`, no proxy needed
    (`python -m benchmarks.formation_quality.check_ideals FILE…`)."""
    today = today or date.today()
    start = today - timedelta(days=int(user.probe.day))
    active: list[str] = [s.text for s in user.seeds]
    audits = 0
    for turn in user.turns:
        said = start + timedelta(days=int(turn.day))
        for pattern in turn.forgets:
            gone = [m for m in active if re.search(pattern, m, re.I)]
            audits += len(gone)
            active = [m for m in active if m not in gone]
        for fact in turn.ideal:
            text = fact.text(said)
            if fact.replaces:
                old = [m for m in active if re.search(fact.replaces, m, re.I)]
                audits += len(old)
                active = [m for m in active if m not in old]
            if text.lower() not in {m.lower() for m in active}:
                active.append(text)
    return {"id": user.id, "category": user.category, "active": active, "injected": active,
            "audit_rows": audits, "turns": [], "errors": []}
