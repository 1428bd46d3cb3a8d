"""Whose is a fact: the user's own, or one of their teams' (TEAM_FACTS review or auto; docs/TEAMS.md).

The extraction call decides it, reading the user's own words ("our build server", "we release"): for a user
in at least one team it is shown the user's teams (name and what each works on, memory_proxy/prompts/extract_teams.md) and
writes a team's fact starting with "Team" and the team's name ("Team platform's build server runs on
Ardent."). Here that form is read: the team it names must be one of the user's teams now (by the name the
model was shown: its name, or its id when two share a name; "Team's …" names the only team of a user in one),
and the name is taken off ("Team's build server runs on Ardent."), since the memory is marked with its team
wherever it is shown. Formation then guards the team's sentence as any fact (formation/steps.kept_by_holder).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..prompts import render
from ..store.teams import Team
from .drops import Drop
from .extract import ExtractedFact, neutral
from .memory_llm import MalformedReply, MemoryLLM
from .resolve import check

MAX_ABOUT_CHARS = 200  # of what a team works on, as the model is shown it
STATED = ("Does the message say this fact is true of the user's team, as something the user knows "
          "(not a question, a request, a plan or a general remark)?")

_TEAM_SUBJECT = re.compile(r"^(the\s+)?team\b\s*", re.I)
_POSSESSIVE = re.compile(r"^['’]s\b\s*", re.I)


@dataclass(frozen=True, slots=True)
class TeamFact:
    """A fact the model wrote as `team`'s, with the team's name taken off ("Team's staging database …")."""

    team: Team
    text: str


def shown_names(teams: list[Team]) -> list[tuple[str, Team]]:
    """Each team with the name the model is shown: its name, or its id when another of the user's teams has
    the same name (case-insensitively; a mirrored OpenWebUI group is named by its id until an operator
    renames it)."""
    counts: dict[str, int] = {}
    for team in teams:
        counts[team.name.casefold()] = counts.get(team.name.casefold(), 0) + 1
    return [(team.name if counts[team.name.casefold()] == 1 else team.id, team) for team in teams]


def teams_block(teams: list[Team]) -> str:
    """What the extraction call is told of the user's teams (memory_proxy/prompts/extract_teams.md), or "" for none."""
    shown = shown_names(teams)
    if not shown:
        return ""
    lines = "\n".join(f"- {neutral(name)}" + (f" (works on {neutral(team.about[:MAX_ABOUT_CHARS])})" if team.about
                                                else "") for name, team in shown)
    return render("extract_teams.md", teams=lines, team=neutral(shown[0][0])) + "\n\n"


def is_teams(text: str, teams: list[Team]) -> bool:
    """Whether a fact is written about a team ("Team …", "The team …", "The platform team …"), not the user."""
    return bool(_TEAM_SUBJECT.match(text)) or _named_subject(text, teams) is not None


def team_of(text: str, teams: list[Team]) -> TeamFact | None:
    """The team a fact written about a team names, and the fact without the name; None when it names none of
    `teams`. A fact that cannot hold a name ("Team's …", "The team …") is the team of a user in one team."""
    named = _named_subject(text, teams)
    if named is not None:
        return TeamFact(named[0], _about_team(named[1]))
    subject = _TEAM_SUBJECT.match(text)
    if subject is None:
        return None
    rest = text[subject.end():]
    for name, team in sorted(shown_names(teams), key=lambda shown: -len(shown[0])):
        if rest.casefold().startswith(name.casefold()) and not rest[len(name):len(name) + 1].isalnum():
            return TeamFact(team, _about_team(rest[len(name):].lstrip()))
    unnamed = subject.group(1) or _POSSESSIVE.match(rest)  # "The team ships …", "Team's wiki …"
    return TeamFact(teams[0], _about_team(rest)) if len(teams) == 1 and unnamed else None


def _named_subject(text: str, teams: list[Team]) -> tuple[Team, str] | None:
    """The team of a fact whose subject is "<name> team" ("The platform team's …"), and what follows it."""
    start = text[4:] if text[:4].casefold() == "the " else text
    for name, team in sorted(shown_names(teams), key=lambda shown: -len(shown[0])):
        subject = re.match(re.escape(name) + r"\s+team\b\s*", start, re.I)
        if subject:
            return team, start[subject.end():]
    return None


def _about_team(rest: str) -> str:
    """The sentence whose subject is "Team", from what followed its subject: "'s build server …", "ships …"."""
    return "Team" + (rest if _POSSESSIVE.match(rest) else " " + rest)


async def stated(llm: MemoryLLM, message: str, facts: list[tuple[str, ExtractedFact, Team]], malformed: list[str]
                 ) -> tuple[list[tuple[str, ExtractedFact, Team]], list[dict[str, str]]]:
    """The team facts the model confirms the user's `message` states (one yes/no call each, in the model's own
    judgement: every member is shown a team's memory), and each one it does not, as a drop (`TEAM_UNSTATED`). A reply
    that cannot be read confirms nothing (noted in `malformed`, as formation notes every such reply)."""
    kept, dropped = [], []
    for text, fact, team in facts:
        try:
            yes = await check(llm, STATED, f"Message: {neutral(message)}\nFact: {neutral(text)}", "check_team_turn.md")
        except MalformedReply as exc:
            malformed.append(str(exc))
            yes = False
        if yes:
            kept.append((text, fact, team))
        else:
            dropped.append({"fact": text, "why": Drop.TEAM_UNSTATED})
    return kept, dropped
