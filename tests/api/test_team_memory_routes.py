"""A team's memories under /api/v1/teams/{id}/ (memory_proxy/api/team_memory_routes.py): members read them, editors
change them, nobody else learns the team exists; each change names the member who made it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.data import BUN, CHAT, DENO, OUTSIDER, RUNTIME_Q, TEAMS, USER_A, USER_B
from tests.support.proxy import chat_body, fillers, sent_body, system_text, user_headers

PLATFORM = f"{TEAMS}/platform"
@pytest.fixture
async def platform(client: Any, credentials: dict) -> dict:
    """Team "platform": USER_A its editor, USER_B a member; OUTSIDER in team "billing" only."""
    for team in ("platform", "billing"):
        assert (await client.post(f"{TEAMS}/", json={"id": team}, headers=credentials["proxy"])).status_code == 201
    for team, user, role in (("platform", USER_A, "editor"), ("platform", USER_B, "member"),
                             ("billing", OUTSIDER, "member")):
        await client.put(f"{TEAMS}/{team}/members/{user}", json={"role": role}, headers=credentials["proxy"])
    return credentials


async def create(client: Any, headers: dict, content: str = DENO) -> Any:
    return await client.post(f"{PLATFORM}/memories", json={"content": content, "memory_type": "project"},
                             headers=headers)


async def test_an_editor_writes_and_every_member_reads_the_teams_memory(client: Any, platform: dict) -> None:
    made = await create(client, platform["a"])
    assert made.status_code == 201, made.text
    memory_id = made.json()["id"]
    for who in ("a", "b"):
        listed = (await client.get(f"{PLATFORM}/memories", headers=platform[who])).json()
        assert [m["content"] for m in listed["data"]] == [DENO] and listed["user"] == "team:platform"
        one = await client.get(f"{PLATFORM}/memories/{memory_id}", headers=platform[who])
        assert one.status_code == 200 and one.json()["content"] == DENO
        found = (await client.get(f"{PLATFORM}/memories/search", params={"q": RUNTIME_Q}, headers=platform[who]))
        assert [m["id"] for m in found.json()["data"]] == [memory_id]
    mine = (await client.get("/api/v1/memories", headers=platform["a"])).json()["data"]
    assert mine == []  # the team's, not the editor's own


@pytest.mark.parametrize("who", ["c", "b"])
async def test_others_never_learn_of_the_team_and_members_cannot_change_it(client: Any, platform: dict,
                                                                           who: str) -> None:
    memory_id = (await create(client, platform["a"])).json()["id"]
    expected = 404 if who == "c" else 403  # an outsider: no such team; a member: only editors change
    changes = [create(client, platform[who], "The team deploys on Fridays."),
               client.patch(f"{PLATFORM}/memories/{memory_id}", json={"content": "The team uses Bun."},
                            headers=platform[who]),
               client.post(f"{PLATFORM}/memories/{memory_id}/pin", headers=platform[who]),
               client.delete(f"{PLATFORM}/memories/{memory_id}", headers=platform[who])]
    for change in changes:
        assert (await change).status_code == expected
    reads = [client.get(f"{PLATFORM}/memories", headers=platform[who]),
             client.get(f"{PLATFORM}/memories/{memory_id}", headers=platform[who]),
             client.get(f"{PLATFORM}/memories/search", params={"q": RUNTIME_Q}, headers=platform[who])]
    for read in reads:
        assert (await read).status_code == (404 if who == "c" else 200)
    assert [m["content"] for m in (await client.get(f"{PLATFORM}/memories", headers=platform["a"])).json()["data"]] \
        == [DENO]  # unchanged


async def test_each_change_names_the_member_who_made_it(client: Any, platform: dict) -> None:
    memory_id = (await create(client, platform["a"])).json()["id"]
    edited = await client.patch(f"{PLATFORM}/memories/{memory_id}", json={"content": "The team's runtime is Bun."},
                                headers=platform["a"])
    new_id = edited.json()["id"]
    await client.post(f"{PLATFORM}/memories/{new_id}/pin", headers=platform["proxy"])  # an operator
    history = (await client.get(f"{PLATFORM}/memories/{new_id}/history", headers=platform["b"])).json()
    assert [(u["action"], u["actor"]) for u in history["updates"]] == [("edit", USER_A), ("pin", None)]
    assert (await client.delete(f"{PLATFORM}/memories/{new_id}", headers=platform["a"])).status_code == 200
    assert (await client.get(f"{PLATFORM}/memories", headers=platform["b"])).json()["data"] == []


async def test_a_removed_editor_is_a_stranger_at_once(client: Any, platform: dict) -> None:
    memory_id = (await create(client, platform["a"])).json()["id"]
    await client.delete(f"{PLATFORM}/members/{USER_A}", headers=platform["proxy"])
    assert (await client.get(f"{PLATFORM}/memories/{memory_id}", headers=platform["a"])).status_code == 404
    assert (await client.delete(f"{PLATFORM}/memories/{memory_id}", headers=platform["a"])).status_code == 404


async def test_what_an_editor_writes_reaches_every_members_chat_turn(client: Any, platform: dict, outside: Any,
                                                                     db: Any) -> None:
    memory_id = (await create(client, platform["a"])).json()["id"]
    await fillers(db, USER_B)
    turn = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_B))  # the proxy key
    assert turn.json()["memories"] == [memory_id] and '(team "platform")' in system_text(sent_body(outside))
    stranger = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=platform["c"])
    assert stranger.json()["memories"] == []


async def test_export_holds_what_the_user_wrote_in_teams_and_erasure_leaves_it_to_the_team(
        client: Any, platform: dict) -> None:
    memory_id = (await create(client, platform["a"])).json()["id"]
    await client.post("/api/v1/memories", json={"content": BUN}, headers=platform["a"])
    await client.delete(f"{PLATFORM}/members/{USER_A}", headers=platform["proxy"])  # written, then left
    exported = (await client.get("/api/v1/export", headers=platform["a"])).json()
    assert [(m["team"], m["content"]) for m in exported["team_memories"]] == [("platform", DENO)]
    assert [m["content"] for m in exported["memories"]] == [BUN]
    markdown = (await client.get("/api/v1/export", params={"format": "markdown"}, headers=platform["a"])).text
    assert f"team **platform**: {DENO}" in markdown

    erased = await client.post("/api/v1/erase", params={"confirm": USER_A}, headers=platform["a"])
    assert erased.json()["erased"]["team_memories"] == 1 and erased.json()["erased"]["memories"] == 1
    kept = (await client.get(f"{PLATFORM}/memories/{memory_id}", headers=platform["b"])).json()
    assert kept["content"] == DENO and kept["active"]  # the team keeps it
    again = (await client.get("/api/v1/export", headers=platform["a"])).json()
    assert again["team_memories"] == [] and again["memories"] == []  # attributed to no one
    history = (await client.get(f"{PLATFORM}/memories/{memory_id}/history", headers=platform["b"])).json()
    assert all(u["actor"] is None for u in history["updates"])
