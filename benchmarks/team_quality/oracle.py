"""The oracle of the team-memory benchmark: a perfect memory LLM's answer to each formation call about one
turn of a scenario, from the turn's ideal answer (the script of memory_proxy.testing's `FakeMemoryLLM`).

It answers as formation_quality's oracle (`scripted.oracle_answer`), but for one thing: the extraction call
writes a team's ideal fact as the proxy asks it to (memory_proxy/prompts/extract_teams.md), naming the team as the scenario
does (the team's display name, as the proxy shows it to the model): "Team's staging database runs on port
5433." → "Team platform's staging database runs on port 5433."; "Team ships on Thursdays." → "Team platform
ships on Thursdays.". The relate call sees the team's fact as it is stored, without the name: the ideal text.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from ..formation_quality import scenarios as formation
from ..formation_quality.scripted import oracle_answer
from .scenarios import PERSONAL, IdealFact, Turn


def named_form(fact: IdealFact) -> str:
    """A team's ideal fact as the extraction call writes it: with the team's name after "Team"."""
    if fact.scope == PERSONAL:
        return fact.fact
    for subject in ("Team's ", "Team "):
        if fact.fact.startswith(subject):
            return f"Team {fact.scope}{subject[4:]}{fact.fact[len(subject):]}"
    return fact.fact


def formation_turn(turn: Turn, *, named: bool) -> formation.Turn:
    """`turn` as formation_quality's oracle reads it: its ideal facts, a team's with the team's name when
    `named` (the extraction call's form), else as stored."""
    ideal = [formation.IdealFact(named_form(f) if named else f.fact, f.type, f.replaces) for f in turn.ideal]
    return formation.Turn(day=turn.day, user=turn.user, assistant=turn.assistant, ideal=tuple(ideal))


def team_oracle_answer(turn: Turn, said_on: date, purpose: str, prompt: str) -> Any:
    """A perfect model's answer to one formation call about `turn`, said on `said_on`."""
    return oracle_answer(formation_turn(turn, named=purpose == "extract"), said_on, purpose, prompt)


class TeamOracle:
    """The memory LLM's script in a run without a real model: each call about `turn`, set by the runner
    before each chat turn is sent (a probe: a turn without ideal facts), said on `said_on`."""

    def __init__(self) -> None:
        self.turn = Turn(day=0, speaker="", user="")
        self.said_on = date.today()

    def __call__(self, purpose: str, prompt: str) -> Any:
        return team_oracle_answer(self.turn, self.said_on, purpose, prompt)
