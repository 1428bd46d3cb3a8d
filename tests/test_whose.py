"""Formation knows a team's fact from the user's own (TEAM_FACTS=auto; memory/whose.py, docs/TEAMS.md): the
model says whose each fact is, a team's sentence passes the guards every fact passes, and a team's fact
changes the team's memories only, written and audited as the member's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from memory_proxy.job_payload import FormationPayload
from memory_proxy.services import open_services
from memory_proxy.settings import load_settings
from memory_proxy.store import jobs, teams
from memory_proxy.worker import Worker
from tests.conftest import USER_A, USER_B, add_memory, make_env, metric
from tests.test_worker import links

PLATFORM = teams.principal("platform")
SAID = "heads up: staging db moved to port 5433. Also I moved to Lyon last month."
STAGING = {"fact": "User's team's staging database runs on port 5433.", "type": "project",
           "team": "Platform", "team_fact": "Team's staging database runs on port 5433."}
LYON = {"fact": "User lives in Lyon.", "type": "identity"}


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return make_env(database_url, tmp_path, TEAM_FACTS="auto")


@pytest.fixture
async def platform(db: Any) -> None:
    """Team "platform" (shown to the model as "Platform") with USER_A and USER_B."""
    await teams.create_team(db, "platform", "Platform", "infrastructure: databases, deploys, CI")
    for user in (USER_A, USER_B):
        await teams.set_member(db, "platform", user)


async def formed(db: Any, worker: Worker, said: str = SAID, user: str = USER_A) -> None:
    await jobs.enqueue(db, user_id=user, said_at=datetime.now(UTC), payload=FormationPayload(said))
    assert await worker.run_until_idle() == 1


async def test_a_teams_fact_goes_to_the_team_and_a_personal_one_stays_the_users(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    await formed(db, worker)
    assert await links(db, USER_A) == ["User lives in Lyon."]
    assert await links(db, PLATFORM) == ["Team's staging database runs on port 5433."]
    cur = await db.execute("SELECT author FROM users_vectors WHERE user_id = %s", [PLATFORM])
    assert await cur.fetchall() == [(USER_A,)]  # the member who said it
    assert memory_llm.calls("scope") == 1
    assert "infrastructure: databases, deploys, CI" in next(p for purpose, p in memory_llm.prompts if purpose == "scope")


async def test_a_team_update_changes_the_teams_memory_audited_as_the_member(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    old = await add_memory(db, PLATFORM, "Team's staging database runs on port 5432.")
    mine = await add_memory(db, USER_B, "User's staging database runs on port 5432.")  # B's own: untouched
    memory_llm.extract = lambda message: [{**STAGING, "replaces_text": "Team's staging database runs on port 5432."}]
    await formed(db, worker, "staging db moved from port 5432 to port 5433", user=USER_B)
    assert await links(db, PLATFORM) == ["Team's staging database runs on port 5433."]
    assert await links(db, USER_B) == ["User's staging database runs on port 5432."] and mine
    cur = await db.execute("SELECT action, actor FROM memory_updates WHERE user_id = %s AND old_vector_id = %s",
                           [PLATFORM, old])
    assert await cur.fetchall() == [("replace", USER_B)]


@pytest.mark.parametrize("team_fact", ["Team's staging database runs on port 9999.",  # a number never said
                                       "User's staging database runs on port 5433."])  # not about the team
async def test_a_team_sentence_that_fails_a_guard_leaves_the_fact_the_users_own(
        db: Any, worker: Worker, memory_llm: Any, platform: None, team_fact: str) -> None:
    memory_llm.extract = lambda message: [{**STAGING, "team_fact": team_fact}]
    dropped = metric("memory_proxy_facts_dropped_total", reason="team_unsupported") + metric(
        "memory_proxy_facts_dropped_total", reason="team_not_about_team")
    await formed(db, worker)
    assert await links(db, PLATFORM) == []
    assert await links(db, USER_A) == ["User's team's staging database runs on port 5433."]
    assert metric("memory_proxy_facts_dropped_total", reason="team_unsupported") + metric(
        "memory_proxy_facts_dropped_total", reason="team_not_about_team") == dropped + 1


SYSTEM = {"fact": "The staging database runs on port 5433.", "type": "project"}  # about the system, not the user


async def test_a_fact_dropped_for_its_subject_alone_is_the_teams_when_the_model_says_so(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [{**SYSTEM, "team": "Platform",
                                           "team_fact": "Team's staging database runs on port 5433."}, LYON]
    dropped = metric("memory_proxy_facts_dropped_total", reason="not_about_user")
    with capture_logs() as logs:
        await formed(db, worker)
    [line] = [e for e in logs if e["event"] == "memory_decision"]  # what the scope call answered, in counts
    assert line["scope"] == {"shown": 2, "subject_dropped": 1, "to_teams": 1, "unread": 0, "kept": 1}
    assert await links(db, PLATFORM) == ["Team's staging database runs on port 5433."]
    assert await links(db, USER_A) == ["User lives in Lyon."]
    assert metric("memory_proxy_facts_dropped_total", reason="not_about_user") == dropped  # stored, not dropped
    cur = await db.execute("SELECT memory_type FROM vectors v JOIN users_vectors uv ON uv.vector_id = v.id"
                           " WHERE uv.user_id = %s", [PLATFORM])
    assert await cur.fetchall() == [("project",)]  # the type the extraction gave


@pytest.mark.parametrize("in_team", [True, False])
async def test_a_fact_about_someone_else_stays_dropped(db: Any, worker: Worker, memory_llm: Any,
                                                       in_team: bool) -> None:
    if in_team:
        await teams.create_team(db, "platform", "Platform")
        await teams.set_member(db, "platform", USER_A)
    memory_llm.extract = lambda message: [SYSTEM, LYON]  # the scope call says "personal": not the team's
    dropped = metric("memory_proxy_facts_dropped_total", reason="not_about_user")
    await formed(db, worker)
    assert await links(db, USER_A) == ["User lives in Lyon."] and await links(db, PLATFORM) == []
    assert metric("memory_proxy_facts_dropped_total", reason="not_about_user") == dropped + 1
    assert memory_llm.calls("scope") == int(in_team)


async def test_a_team_the_user_is_not_in_is_never_written(db: Any, worker: Worker, memory_llm: Any,
                                                          platform: None) -> None:
    await teams.create_team(db, "billing", "Billing")
    memory_llm.extract = lambda message: [{**STAGING, "team": "Billing"}]  # named, but not one of the user's
    with capture_logs() as logs:
        await formed(db, worker)
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    assert line["scope"] == {"shown": 1, "subject_dropped": 0, "to_teams": 0, "unread": 1, "kept": 0}
    assert await links(db, teams.principal("billing")) == [] and await links(db, PLATFORM) == []
    assert await links(db, USER_A) == ["User's team's staging database runs on port 5433."]


async def test_the_scope_call_is_shown_the_teams_joined_last_and_no_more(db: Any, worker: Worker,
                                                                         memory_llm: Any) -> None:
    for n in range(teams.MAX_TEAMS_READ + 2):
        await teams.create_team(db, f"t{n:02}", f"Squad{n:02}")
        await teams.set_member(db, f"t{n:02}", USER_A)
    memory_llm.extract = lambda message: [LYON]
    await formed(db, worker)
    prompt = next(p for purpose, p in memory_llm.prompts if purpose == "scope")
    assert [n for n in range(teams.MAX_TEAMS_READ + 2) if f"Squad{n:02}" in prompt] == list(range(2, 22))


async def test_a_user_in_no_team_is_formed_without_the_call(db: Any, worker: Worker, memory_llm: Any) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    await formed(db, worker)
    assert memory_llm.calls("scope") == 0
    assert await links(db, USER_A) == ["User lives in Lyon.", "User's team's staging database runs on port 5433."]


@pytest.fixture
async def worker_off(env: dict[str, str]) -> AsyncIterator[Worker]:
    async with open_services(load_settings({**env, "TEAM_FACTS": "off"}), httpx.AsyncClient(timeout=5)) as services:
        yield Worker.from_services(services)


async def test_off_keeps_every_fact_the_users_own_without_asking(db: Any, worker_off: Worker, memory_llm: Any,
                                                                 outside: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING]
    await formed(db, worker_off)
    assert memory_llm.calls("scope") == 0 and await links(db, PLATFORM) == []
    assert await links(db, USER_A) == ["User's team's staging database runs on port 5433."]


async def test_an_unreadable_scope_answer_leaves_every_fact_personal(db: Any, worker: Worker, memory_llm: Any,
                                                                     platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING]
    memory_llm.raw["scope"] = "the first one is the team's I think"
    await formed(db, worker)
    assert await links(db, PLATFORM) == []
    assert await links(db, USER_A) == ["User's team's staging database runs on port 5433."]


@pytest.fixture
async def worker_review(env: dict[str, str]) -> AsyncIterator[Worker]:
    async with open_services(load_settings({**env, "TEAM_FACTS": "review"}), httpx.AsyncClient(timeout=5)) as services:
        yield Worker.from_services(services)


async def test_review_keeps_a_teams_fact_apart_until_an_editor_accepts_it(
        db: Any, worker_review: Worker, memory_llm: Any, outside: Any, platform: None, client: Any) -> None:
    await teams.set_member(db, "platform", USER_B, "editor")
    old = await add_memory(db, PLATFORM, "Team's staging database runs on port 5432.")
    memory_llm.extract = lambda message: [{**STAGING, "replaces_text": "Team's staging database runs on port 5432."},
                                          LYON]
    await formed(db, worker_review)
    assert await links(db, PLATFORM) == ["Team's staging database runs on port 5432."]  # nothing shared yet
    assert await links(db, USER_A) == ["User lives in Lyon."]
    route = "/api/v1/teams/platform/proposals"
    as_a, as_b = {"x-openwebui-user-id": USER_A}, {"x-openwebui-user-id": USER_B}
    assert (await client.get(route, headers=as_a)).status_code == 403  # a member: editors see proposals
    [proposal] = (await client.get(route, headers=as_b)).json()["data"]
    assert (proposal["content"], proposal["action"], proposal["replaces"], proposal["proposed_by"]) == (
        "Team's staging database runs on port 5433.", "replace", old, USER_A)

    accepted = await client.post(f"{route}/{proposal['id']}/accept", headers=as_b)
    assert accepted.status_code == 200 and accepted.json()["memory"]["content"] == proposal["content"]
    assert await links(db, PLATFORM) == ["Team's staging database runs on port 5433."]
    cur = await db.execute("SELECT author FROM users_vectors WHERE user_id = %s AND superseded_at IS NULL", [PLATFORM])
    assert await cur.fetchall() == [(USER_A,)]  # taught by A
    cur = await db.execute("SELECT action, actor FROM memory_updates WHERE user_id = %s", [PLATFORM])
    assert await cur.fetchall() == [("replace", USER_B)]  # accepted by B
    assert (await client.get(route, headers=as_b)).json()["data"] == []
    assert (await client.post(f"{route}/{proposal['id']}/accept", headers=as_b)).status_code == 404


async def test_a_rejected_proposal_is_gone_and_an_erased_proposer_takes_theirs_along(
        db: Any, worker_review: Worker, memory_llm: Any, outside: Any, platform: None, client: Any) -> None:
    await teams.set_member(db, "platform", USER_B, "editor")
    memory_llm.extract = lambda message: [STAGING]
    await formed(db, worker_review)
    await formed(db, worker_review, "staging db is on port 5433, as I said", user=USER_A)
    route = "/api/v1/teams/platform/proposals"
    first, second = (await client.get(route, headers={"x-openwebui-user-id": USER_B})).json()["data"]
    rejected = await client.post(f"{route}/{first['id']}/reject", headers={"x-openwebui-user-id": USER_B})
    assert rejected.json() == {"proposal": first["id"], "rejected": True}
    exported = (await client.get("/api/v1/export", params={"user": USER_A})).json()  # the proposer's pending one
    assert [(p["id"], p["team"], p["content"]) for p in exported["team_proposals"]] == [
        (second["id"], "platform", second["content"])]
    assert (await client.get("/api/v1/export", params={"user": USER_B})).json()["team_proposals"] == []
    markdown = (await client.get("/api/v1/export", params={"user": USER_A, "format": "markdown"})).text
    assert f"team **platform**: {second['content']}" in markdown.split("## Proposed to teams")[1]
    erased = await client.post("/api/v1/erase", params={"user": USER_A, "confirm": USER_A})
    assert erased.json()["erased"]["team_proposals"] == 1
    assert (await client.get(route, headers={"x-openwebui-user-id": USER_B})).json()["data"] == []
    assert await links(db, PLATFORM) == [] and second
