"""Whose is a fact: the user's own, or one of their teams' (the scope call, TEAM_FACTS=auto; docs/TEAMS.md).

Made only for a user in at least one team, after the guards kept the turn's facts: one call
(prompts/scope_turn.md) shows the model the user's teams (name and what each works on), the message and the
kept facts, and the model answers, for each fact, "personal" or a team's name with the fact written again
about the team ("Team's build server runs on Ardent."). The model judges meaning; what it may do is bounded
here and in formation: a team it names must be one of the user's teams now (by name, or by id when two share
a name), and the team's sentence passes the same guards as any fact (memory/formation.kept_team_facts), or
the fact stays the user's own. An answer that cannot be read leaves every fact personal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from ..prompts import load_prompt, render
from ..store.teams import Team
from .extract import neutral, numbered
from .llm import MemoryLLM

PERSONAL = "personal"
MAX_ABOUT_CHARS = 200  # of what a team works on, as the model is shown it


class FactScope(BaseModel):
    n: int = 0
    scope: str = PERSONAL
    fact: str = ""

    @field_validator("n", mode="before")
    @classmethod
    def _number(cls, value: Any) -> int:
        return int(value) if isinstance(value, int | str) and str(value).strip().isdigit() else 0

    @field_validator("scope", "fact", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return value.strip() if isinstance(value, str) else ""


class Scopes(BaseModel):
    """For each numbered fact, whose it is (read leniently: a bare list, or items that are not objects, never
    fail the call; what is not understood is personal)."""

    facts: list[FactScope] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, value: Any) -> Any:
        items = value if isinstance(value, list) else value.get("facts", []) if isinstance(value, dict) else []
        return {"facts": [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []}


@dataclass(frozen=True, slots=True)
class TeamFact:
    """A kept fact (its index in the turn's kept facts) that the model says is `team`'s, as it rewrote it."""

    index: int
    team: Team
    text: str


@dataclass(frozen=True, slots=True)
class ScopeAnswer:
    """What the scope call answered: the facts it gave one of the user's teams, and how many of its answers
    were neither "personal" nor such a fact (a team the user is not in, a number out of range, no sentence)."""

    facts: list[TeamFact]
    unread: int = 0


async def team_facts(llm: MemoryLLM, *, teams: list[Team], message: str, facts: list[str]) -> ScopeAnswer:
    """The facts the model says are one of `teams`' (each at most once), with the team's sentence."""
    if not teams or not facts:
        return ScopeAnswer([])
    shown = _shown_names(teams)
    named = {name.casefold(): team for name, team in shown}
    lines = "\n".join(f"- {neutral(name)}: {neutral(team.about[:MAX_ABOUT_CHARS]) or '(no description)'}"
                      for name, team in shown)
    turn = render("scope_turn.md", teams=lines, message=neutral(message), facts=numbered(facts))
    answer = await llm.structured(Scopes, [{"role": "system", "content": load_prompt("memory.md")},
                                           {"role": "user", "content": turn}], purpose="scope")
    found: dict[int, TeamFact] = {}
    unread = 0
    for item in answer.facts:
        team = named.get(item.scope.casefold())
        if team is not None and 1 <= item.n <= len(facts) and item.fact and item.n - 1 not in found:
            found[item.n - 1] = TeamFact(item.n - 1, team, item.fact)
        elif item.scope.casefold() != PERSONAL:
            unread += 1
    return ScopeAnswer(list(found.values()), unread)


def _shown_names(teams: list[Team]) -> list[tuple[str, Team]]:
    """Each team with the name the model is shown: its name, or its id when another of the user's teams has
    the same name (case-insensitively; a mirrored OpenWebUI group is named by its id until an operator
    renames it)."""
    counts: dict[str, int] = {}
    for team in teams:
        counts[team.name.casefold()] = counts.get(team.name.casefold(), 0) + 1
    return [(team.name if counts[team.name.casefold()] == 1 else team.id, team) for team in teams]
