"""Play the team scenarios through a running memory-proxy, over HTTP, as an operator and chat clients would.

The proxy is formation_quality's (`proxy_serving`: in this process on uvicorn, its clock replaying each
scenario's days, the embedded PostgreSQL unless a database URL is given, the scripted upstream, the memory LLM
a real server or the `TeamOracle`). Per scenario, each person gets a unique user id and each team a unique
team id (`ident`). The teams are made through the API with the operator key (`POST /api/v1/teams/`, name
and about as the scenario gives them) and their members added (`PUT …/members/{user}`); then, in order of
day, the membership changes (on their day, before that day's turns, as `Scenario.members` counts them), the
turns (each a chat turn of its speaker; a speaker's turns less than ½ day apart are one chat) and the probes
(a fresh chat of their speaker, after that day's turns), each waited for until its formation job ended.
What a probe showed is read from the memory block of the request the upstream received. At the end each
scope's active memories are read from the database: each person's, and each team's (held by `team:<id>`).

The result has the shape `scenarios.simulate` gives, for `score.judge`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from memory_proxy.store.teams import TEAM_ID, Holder

from ..formation_quality import scenarios as formation
from ..formation_quality.proxy_runner import SAME_CHAT_DAYS, ProxyRun, Served, memory_block, proxy_serving
from .oracle import TeamOracle
from .scenarios import Change, Probe, Scenario, Turn

TEAMS = "/api/v1/teams"
DEFAULT_SETTINGS = {"TEAM_FACTS": "auto"}  # off | review | auto: team facts stored without a review
# One memory line of the block (memory_proxy/chat/inject.py's memory_line): a team's names the team, quoted.
_MEMORY_LINE = re.compile(r'^- \(said [^)]*\) (?:\(team ("(?:[^"\\]|\\.)*")\) )?(".*")$', re.MULTILINE)


def injected(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(team name, or "" for the user's own; memory text) of each memory the proxy put into this request."""
    return [(json.loads(team) if team else "", json.loads(text))
            for team, text in _MEMORY_LINE.findall(memory_block(request))]


def ident(run: str, scenario: str, name: str) -> str:
    """A person's user id or a team's id, unique to the run and scenario, as a team id must be written
    (`[A-Za-z0-9][A-Za-z0-9._-]{0,63}`): "<run>-<scenario>-<name>", shortened with a hash when it is not."""
    raw = f"{run}-{scenario}-{name}"
    if TEAM_ID.fullmatch(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '-', raw)[:53]}-{digest}"


class TeamRun:
    """One proxy, the scenarios played on it one after the other."""

    def __init__(self, served: Served, oracle: TeamOracle | None, tag: str) -> None:
        self.served, self.oracle, self.tag = served, oracle, tag
        self.run = ProxyRun(served.client, served.conninfo, served.upstream, None, served.clock)

    async def scenario(self, scenario: Scenario) -> dict[str, Any]:
        people = {p: ident(self.tag, scenario.id, p) for p in scenario.people}
        teams = {t.name: ident(self.tag, scenario.id, t.name) for t in scenario.teams}
        result: dict[str, Any] = {"id": scenario.id, "scopes": {}, "injected": [], "injected_teams": [],
                                  "audit_rows": 0, "errors": [], "job_seconds": []}
        start = datetime.now(UTC) - timedelta(days=max(p.day for p in scenario.probes))
        self.served.clock.at = start
        for team in scenario.teams:
            try:
                await self._call("POST", f"{TEAMS}/", {"id": teams[team.name], "name": team.name, "about": team.about})
                for member in team.members:
                    await self._member(teams[team.name], people[member], member in team.editors)
            except Exception as exc:  # noqa: BLE001 - recorded for this scenario; the run goes on
                result["errors"].append(f"team {team.name}: {type(exc).__name__}: {exc}")
        chats: dict[str, int] = dict.fromkeys(people, 0)  # chat turns sent per person: one job each
        history: dict[str, list[dict[str, str]]] = {p: [] for p in people}
        last_day: dict[str, float] = {}
        events: list[tuple[float, int, int, Change | Turn | Probe]] = sorted(
            [(c.day, 0, i, c) for i, c in enumerate(scenario.changes)]
            + [(t.day, 1, i, t) for i, t in enumerate(scenario.turns)]
            + [(p.day, 2, i, p) for i, p in enumerate(scenario.probes)], key=lambda e: e[:3])
        for day, _, number, event in events:
            self.served.clock.at = start + timedelta(days=day)
            try:
                if isinstance(event, Change):
                    await self._change(event, scenario, teams, people)
                    continue
                speaker, user_id = event.speaker, people[event.speaker]
                if isinstance(event, Probe):
                    said, turn, past = (Turn(day=day, speaker=speaker, user=event.user),
                                        formation.Turn(day=day, user=event.user), [])
                else:
                    same_chat = speaker in last_day and day - last_day[speaker] < SAME_CHAT_DAYS
                    said, turn = event, formation.Turn(day=day, user=event.user, assistant=event.assistant)
                    past = history[speaker] if same_chat else []
                    last_day[speaker] = day
                if self.oracle:
                    self.oracle.turn, self.oracle.said_on = said, self.served.clock.at.date()
                await self.run.chat(user_id, past, turn)
                chats[speaker] += 1
                if isinstance(event, Probe):
                    shown = injected(self.served.upstream.requests[-1])
                    result["injected"].append([text for _, text in shown])
                    result["injected_teams"].append([team for team, _ in shown])
                else:
                    history[speaker] = [*past, {"role": "user", "content": event.user},
                                        {"role": "assistant", "content": event.assistant}]
                result["job_seconds"].append(await self.run.formation_seconds(user_id, chats[speaker]))
            except Exception as exc:  # noqa: BLE001 - recorded for this scenario; the run goes on
                kind = type(event).__name__.lower()
                result["errors"].append(f"{kind} {number + 1}: {type(exc).__name__}: {exc}")
                if isinstance(event, Probe) and len(result["injected"]) <= number:
                    result["injected"].append([])
                    result["injected_teams"].append([])
        holders = {**{f"personal:{p}": user_id for p, user_id in people.items()},
                   **{f"team:{name}": Holder.team(team_id).principal for name, team_id in teams.items()}}
        for scope, holder in holders.items():
            memories = await self.run.memories(holder)
            result["scopes"][scope] = [m["content"] for m in memories.values() if m["active"]]
            result["audit_rows"] += await self.run.audit_rows(holder)
        return result

    async def _member(self, team_id: str, user_id: str, editor: bool) -> None:
        await self._call("PUT", f"{TEAMS}/{quote(team_id)}/members/{quote(user_id, safe='')}",
                         {"role": "editor" if editor else "member"})

    async def _change(self, change: Change, scenario: Scenario, teams: dict[str, str], people: dict[str, str]) -> None:
        """A membership change through the API: the removed member loses the team's memories at once."""
        team_id = teams[change.team]
        if change.remove:
            await self._call("DELETE", f"{TEAMS}/{quote(team_id)}/members/{quote(people[change.remove], safe='')}")
        if change.add:
            [team] = [t for t in scenario.teams if t.name == change.team]
            await self._member(team_id, people[change.add], change.add in team.editors)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.served.client.request(method, path, json=body)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code} {response.text[:200]}")
        answer: dict[str, Any] = response.json()
        return answer


async def run_scenarios(scenarios: list[Scenario], *, llm_base_url: str | None, llm_model: str = "local",
                        llm_mode: str = "json", database_url: str | None = None, log_file: Path | None = None,
                        extra_env: dict[str, str] | None = None,
                        progress: Callable[[int, Scenario, float], str] | None = None) -> dict[str, Any]:
    """Play `scenarios` through a fresh memory-proxy (its memory LLM the server at `llm_base_url`, or the
    oracle); return each scenario's result in `simulate`'s shape, in order. `progress(i, scenario, seconds)`
    is the line printed to the console after each (none without it)."""
    oracle = None if llm_base_url else TeamOracle()
    settings = {**DEFAULT_SETTINGS, **(extra_env or {})}
    started = datetime.now(UTC)
    results = []
    async with proxy_serving(oracle, llm_base_url=llm_base_url, llm_model=llm_model, llm_mode=llm_mode,
                             database_url=database_url, log_file=log_file, extra_env=settings) as served:
        run = TeamRun(served, oracle, uuid.uuid4().hex[:6])
        for number, scenario in enumerate(scenarios, 1):
            began = time.monotonic()
            results.append(await run.scenario(scenario))
            if progress:
                print(progress(number, scenario, time.monotonic() - began), file=served.console)
    return {"system": "memory-proxy", "llm": llm_base_url or "oracle", "llm_mode": llm_mode, "settings": settings,
            "embedder": served.settings.embedding.model, "started_at": started.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(), "scenarios": results}
