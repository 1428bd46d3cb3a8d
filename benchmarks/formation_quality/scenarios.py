"""The scripted users of users.toml as plain data (README.md beside this file describes the format)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USERS_FILE = Path(__file__).with_name("users.toml")
EMPTY_EXTRACTION = '{"facts": []}'


@dataclass(frozen=True)
class Turn:
    day: float
    user: str
    assistant: str = "OK."
    fake: str = EMPTY_EXTRACTION  # the scripted fake memory LLM's answer to this turn's extraction


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


def _seed(raw: str | dict[str, Any]) -> Seed:
    return Seed(raw) if isinstance(raw, str) else Seed(**raw)


def load_users(path: Path = USERS_FILE, *, only: set[str] | None = None, categories: set[str] | None = None,
               ci: bool = False) -> list[User]:
    """The users of `path`, optionally only some ids, some categories, or the CI subset."""
    users = []
    for raw in tomllib.loads(path.read_text(encoding="utf-8"))["user"]:
        user = User(id=raw["id"], category=raw["category"], turns=[Turn(**t) for t in raw["turn"]],
                    probe=Turn(**raw["probe"]), expect=Expect(**raw.get("expect", {})),
                    seeds=[_seed(s) for s in raw.get("seed", [])], ci=raw.get("ci", False))
        if (only and user.id not in only) or (categories and user.category not in categories) or (ci and not user.ci):
            continue
        users.append(user)
    ids = [u.id for u in users]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: user ids repeat")
    return users
