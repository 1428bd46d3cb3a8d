"""Formation knows a team's fact from the user's own (TEAM_FACTS review or auto; formation/team_facts.py,
docs/TEAMS.md): the extraction call, shown the user's teams, writes a team's fact about the team it names; that
sentence passes the guards every fact passes, and a team's fact changes the team's memories only, written and
audited as the member's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from memory_proxy.formation.worker import Worker
from memory_proxy.job_payload import FormationPayload
from memory_proxy.services import open_services
from memory_proxy.settings import load_settings
from memory_proxy.store import jobs, teams
from memory_proxy.store.teams import Holder
from tests.support.data import USER_A, USER_B
from tests.support.proxy import active_texts, add_memory, make_env, metric

PLATFORM = Holder.team("platform").principal
SAID = "heads up: staging db moved to port 5433. Also I moved to Lyon last month."
STAGING = {"fact": "Team Platform's staging database runs on port 5433.", "type": "project",
           "stores": "Team's staging database runs on port 5433."}
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


async def formed(db: Any, worker: Worker, said: str = SAID, user: str = USER_A) -> list[dict[str, Any]]:
    """The formation job of one turn, run; its memory_decision log line, in a list."""
    await jobs.enqueue(db, user_id=user, said_at=datetime.now(UTC), payload=FormationPayload(said))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    return [e for e in logs if e["event"] == "memory_decision"]


def extraction_prompt(memory_llm: Any) -> str:
    return next(p for purpose, p in memory_llm.prompts if purpose == "extract")


async def test_a_teams_fact_goes_to_the_team_and_a_personal_one_stays_the_users(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    [line] = await formed(db, worker)
    assert await active_texts(db, USER_A) == ["User lives in Lyon."]
    assert await active_texts(db, PLATFORM) == ["Team's staging database runs on port 5433."]  # the name taken off
    cur = await db.execute("SELECT author, memory_type FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                           " WHERE uv.user_id = %s", [PLATFORM])
    assert await cur.fetchall() == [(USER_A, "project")]  # the member who said it; the type the extraction gave
    assert "- Platform (works on infrastructure: databases, deploys, CI)" in extraction_prompt(memory_llm)
    assert line["scope"] == {"teams": 1, "written": 1, "unknown": 0, "kept": 1}
    # one call decided whose, and the team's fact alone was confirmed by a check of its own
    assert [purpose for purpose, _ in memory_llm.prompts] == ["extract", "check"]
    assert "Fact: Team's staging database runs on port 5433." in memory_llm.prompts[1][1]


async def test_a_teams_fact_the_model_does_not_confirm_is_stored_nowhere(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    memory_llm.check = lambda prompt: "Message:" not in prompt  # no to the team check
    [line] = await formed(db, worker)
    assert await active_texts(db, USER_A) == ["User lives in Lyon."] and await active_texts(db, PLATFORM) == []
    assert {"fact": "Team's staging database runs on port 5433.", "why": "team_unstated"} in line["dropped"]
    assert line["scope"] == {"teams": 1, "written": 1, "unknown": 0, "kept": 0}


async def test_an_unreadable_answer_to_the_team_check_confirms_nothing_and_fails_nothing(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    memory_llm.raw["check"] = "I think so, probably"
    [line] = await formed(db, worker)
    assert await active_texts(db, USER_A) == ["User lives in Lyon."] and await active_texts(db, PLATFORM) == []
    assert line["malformed"]
    assert {"fact": "Team's staging database runs on port 5433.", "why": "team_unstated"} in line["dropped"]


async def test_a_team_update_changes_the_teams_memory_audited_as_the_member(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    old = await add_memory(db, PLATFORM, "Team's staging database runs on port 5432.")
    mine = await add_memory(db, USER_B, "User's staging database runs on port 5432.")  # B's own: untouched
    memory_llm.extract = lambda message: [{**STAGING, "replaces_text": "Team's staging database runs on port 5432."}]
    await formed(db, worker, "staging db moved from port 5432 to port 5433", user=USER_B)
    assert await active_texts(db, PLATFORM) == ["Team's staging database runs on port 5433."]
    assert await active_texts(db, USER_B) == ["User's staging database runs on port 5432."] and mine
    cur = await db.execute("SELECT action, actor FROM memory_updates WHERE user_id = %s AND old_vector_id = %s",
                           [PLATFORM, old])
    assert await cur.fetchall() == [("replace", USER_B)]


@pytest.mark.parametrize(("fact", "why"), [
    ({"fact": "Team Platform's staging database runs on port 9999."}, "team_unsupported"),  # a number never said
    ({"fact": "Team Platform's staging password is hunter2.", "type": "secret"}, "team_secret"),
    ({"fact": "Team Platform's staging database runs on port 5433 and " + "also " * 30 + "more."},
     "team_not_one_fact"),
    ({"fact": "Team Platform."}, "team_empty")])  # a subject and nothing it says
async def test_a_team_sentence_that_fails_a_guard_is_stored_nowhere(
        db: Any, worker: Worker, memory_llm: Any, platform: None, fact: dict[str, str], why: str) -> None:
    memory_llm.extract = lambda message: [fact, LYON]
    dropped = metric("memory_proxy_facts_dropped_total", reason=why)
    [line] = await formed(db, worker)
    assert await active_texts(db, PLATFORM) == [] and await active_texts(db, USER_A) == ["User lives in Lyon."]
    assert metric("memory_proxy_facts_dropped_total", reason=why) == dropped + 1
    assert line["scope"] == {"teams": 1, "written": 1, "unknown": 0, "kept": 0}
    assert "hunter2" not in str(line)


SYSTEM = {"fact": "The staging database runs on port 5433.", "type": "project"}  # about the system, not a team


@pytest.mark.parametrize("in_team", [True, False])
async def test_a_fact_about_something_else_stays_dropped_and_only_a_member_is_shown_teams(
        db: Any, worker: Worker, memory_llm: Any, in_team: bool) -> None:
    if in_team:
        await teams.create_team(db, "platform", "Platform")
        await teams.set_member(db, "platform", USER_A)
    memory_llm.extract = lambda message: [SYSTEM, LYON]
    dropped = metric("memory_proxy_facts_dropped_total", reason="not_about_user")
    await formed(db, worker)
    assert await active_texts(db, USER_A) == ["User lives in Lyon."] and await active_texts(db, PLATFORM) == []
    assert metric("memory_proxy_facts_dropped_total", reason="not_about_user") == dropped + 1
    assert ("- Platform\n" in extraction_prompt(memory_llm)) is in_team
    assert ("Team" in extraction_prompt(memory_llm)) is in_team


async def test_what_the_prompt_says_of_a_team_is_not_the_users_words_but_the_teams_own(
        db: Any, worker: Worker, memory_llm: Any) -> None:
    await teams.create_team(db, "ward", "ward4", "nursing staff of the Halvorsen wing, Cardiology")
    await teams.set_member(db, "ward", USER_A)
    memory_llm.extract = lambda message: [{"fact": "User is a nurse in Cardiology."},  # an echo of the prompt
                                          {"fact": "The team's handover in the Halvorsen wing is at 7:15."}]
    [line] = await formed(db, worker, "our handover is moving to 7:15 from monday")
    assert await active_texts(db, USER_A) == [] and [d["why"] for d in line["dropped"]] == ["not_users_words"]
    # what the operator says the team is about is the team's: a fact of the team may name it
    assert await active_texts(db, Holder.team("ward").principal) == ["Team's handover in the Halvorsen wing is at 7:15."]


@pytest.mark.parametrize("written", ["Team Billing's staging database runs on port 5433.",  # not the user's team
                                     "Team Staging database runs on port 5433."])  # no team's name at all
async def test_a_team_the_user_is_not_in_is_never_written(db: Any, worker: Worker, memory_llm: Any,
                                                          platform: None, written: str) -> None:
    await teams.create_team(db, "billing", "Billing")
    await teams.create_team(db, "infra", "Infra")
    await teams.set_member(db, "infra", USER_A)
    memory_llm.extract = lambda message: [{"fact": written, "type": "project"}]
    [line] = await formed(db, worker)
    assert line["scope"] == {"teams": 2, "written": 1, "unknown": 1, "kept": 0}
    assert line["dropped"][0]["why"] == "team_unknown"
    for holder in ("billing", "platform", "infra"):
        assert await active_texts(db, Holder.team(holder).principal) == []
    assert await active_texts(db, USER_A) == []


async def test_the_one_team_of_a_user_in_one_is_the_team_of_a_fact_that_names_none(
        db: Any, worker: Worker, memory_llm: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [{"fact": "The team's staging database runs on port 5433.", "type": "project"}]
    await formed(db, worker)
    assert await active_texts(db, PLATFORM) == ["Team's staging database runs on port 5433."]


async def test_two_teams_of_one_name_are_told_apart_by_their_ids(db: Any, worker: Worker, memory_llm: Any) -> None:
    for team in ("ops-eu", "ops-us"):
        await teams.create_team(db, team, "Ops")
        await teams.set_member(db, team, USER_A)
    memory_llm.extract = lambda message: [{"fact": "Team ops-us's staging database runs on port 5433."}]
    await formed(db, worker)
    assert "- ops-eu\n" in extraction_prompt(memory_llm) and "- Ops" not in extraction_prompt(memory_llm)
    assert await active_texts(db, Holder.team("ops-us").principal) == ["Team's staging database runs on port 5433."]
    assert await active_texts(db, Holder.team("ops-eu").principal) == []


async def test_the_extraction_is_shown_the_teams_joined_last_and_no_more(db: Any, worker: Worker,
                                                                        memory_llm: Any) -> None:
    for n in range(teams.MAX_TEAMS_READ + 2):
        await teams.create_team(db, f"t{n:02}", f"Squad{n:02}")
        await teams.set_member(db, f"t{n:02}", USER_A)
    memory_llm.extract = lambda message: [LYON]
    await formed(db, worker)
    prompt = extraction_prompt(memory_llm)
    assert [n for n in range(teams.MAX_TEAMS_READ + 2) if f"Squad{n:02}" in prompt] == list(range(2, 22))


@pytest.fixture
async def worker_off(env: dict[str, str]) -> AsyncIterator[Worker]:
    async with open_services(load_settings({**env, "TEAM_FACTS": "off"}), httpx.AsyncClient(timeout=5)) as services:
        yield Worker.from_services(services)


@pytest.mark.slow
async def test_off_shows_no_team_and_stores_no_fact_for_one(db: Any, worker_off: Worker, memory_llm: Any,
                                                            outside: Any, platform: None) -> None:
    memory_llm.extract = lambda message: [STAGING, LYON]
    await formed(db, worker_off)
    assert "Platform" not in extraction_prompt(memory_llm) and await active_texts(db, PLATFORM) == []
    assert await active_texts(db, USER_A) == ["User lives in Lyon."]  # a team's fact is no fact about the user


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
    assert await active_texts(db, PLATFORM) == ["Team's staging database runs on port 5432."]  # nothing shared yet
    assert await active_texts(db, USER_A) == ["User lives in Lyon."]
    route = "/api/v1/teams/platform/proposals"
    as_a, as_b = {"x-openwebui-user-id": USER_A}, {"x-openwebui-user-id": USER_B}
    assert (await client.get(route, headers=as_a)).status_code == 403  # a member: editors see proposals
    [proposal] = (await client.get(route, headers=as_b)).json()["data"]
    assert (proposal["content"], proposal["action"], proposal["replaces"], proposal["proposed_by"]) == (
        "Team's staging database runs on port 5433.", "replace", old, USER_A)

    accepted = await client.post(f"{route}/{proposal['id']}/accept", headers=as_b)
    assert accepted.status_code == 200 and accepted.json()["memory"]["content"] == proposal["content"]
    assert await active_texts(db, PLATFORM) == ["Team's staging database runs on port 5433."]
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
    assert await active_texts(db, PLATFORM) == [] and second
