"""The oracle of the team-memory benchmark: a perfect memory LLM's answer to each formation call about one
turn of a scenario, from the turn's ideal answer (the script of memory_proxy.testing's `FakeMemoryLLM`).

It answers as formation_quality's oracle (`scripted.oracle_answer`) except in two places:
- **extract**: the proxy's extraction keeps only facts about the user, so a team's ideal fact is given in the
  user's form ("Team's staging database runs on port 5433." → "User's team's staging database runs on port
  5433."; "Team ships on Thursdays." → "User's team ships on Thursdays."); the scope call then decides.
- **scope**: each numbered fact of the call is matched to the ideal fact whose user form it is (case and
  spaces aside): a team's fact is answered with the team, as the scenario names it (the team's display name,
  as the proxy shows it to the model), and the ideal team text; any other fact is personal.
The relate call sees either form of a team fact (before and after the scope decision), so both are known.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from memory_proxy.memory.content import same_text_key
from memory_proxy.testing.prompts import numbered

from ..formation_quality import scenarios as formation
from ..formation_quality.scripted import oracle_answer
from .scenarios import PERSONAL, IdealFact, Turn

_USER_FORMS = (("Team's ", "User's team's "), ("Team ", "User's team "))
_FACTS_MARKER = re.compile(r"^Facts:[ \t]*$", re.MULTILINE)


def user_form(fact: str) -> str:
    """A team's fact as the proxy's extraction states it: about the user ("User's team …")."""
    for team, user in _USER_FORMS:
        if fact.startswith(team):
            return user + fact[len(team):]
    return fact


def formation_turn(turn: Turn, *, team_forms: bool = False) -> formation.Turn:
    """`turn` as formation_quality's oracle reads it: its ideal facts in the user's form (and, with
    `team_forms`, a team's facts also as the team states them)."""
    ideal = [formation.IdealFact(user_form(f.fact), f.type, f.replaces) for f in turn.ideal]
    if team_forms:
        ideal += [formation.IdealFact(f.fact, f.type, f.replaces) for f in turn.ideal if f.scope != PERSONAL]
    return formation.Turn(day=turn.day, user=turn.user, assistant=turn.assistant, ideal=tuple(ideal))


def scope_answer(turn: Turn, said_on: date, prompt: str) -> dict[str, Any]:
    """The scope call's answer: each numbered fact (after the `Facts:` line, or anywhere without it) personal,
    or the team's with the team's name and the ideal team text."""
    marker = _FACTS_MARKER.search(prompt)
    ideal: dict[str, IdealFact] = {same_text_key(user_form(f.text(said_on))): f for f in turn.ideal}
    facts: list[dict[str, Any]] = []
    for n, text in numbered(prompt[marker.end():] if marker else prompt):
        fact = ideal.get(same_text_key(text))
        facts.append({"n": int(n), "scope": PERSONAL} if fact is None or fact.scope == PERSONAL
                     else {"n": int(n), "scope": fact.scope, "fact": fact.text(said_on)})
    return {"facts": facts}


def team_oracle_answer(turn: Turn, said_on: date, purpose: str, prompt: str) -> Any:
    """A perfect model's answer to one formation call about `turn`, said on `said_on`."""
    if purpose == "scope":
        return scope_answer(turn, said_on, prompt)
    return oracle_answer(formation_turn(turn, team_forms=purpose == "relate"), said_on, purpose, prompt)


class TeamOracle:
    """The memory LLM's script in a run without a real model: each call about `turn`, set by the runner
    before each chat turn is sent (a probe: a turn without ideal facts), said on `said_on`."""

    def __init__(self) -> None:
        self.turn = Turn(day=0, speaker="", user="")
        self.said_on = date.today()

    def __call__(self, purpose: str, prompt: str) -> Any:
        return team_oracle_answer(self.turn, self.said_on, purpose, prompt)
