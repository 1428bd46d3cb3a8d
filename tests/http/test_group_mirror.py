"""Teams mirrored from OpenWebUI's groups (memory_proxy/http/group_mirror.py): read server to server with an
admin's key in the recommended mode, never from what a client sends; the header mode only when chosen."""

from __future__ import annotations

from typing import Any

import httpx

from memory_proxy.http.group_mirror import group_ids, header_groups
from memory_proxy.store import teams
from memory_proxy.store.database import make_pool
from tests.support.data import USER_A, USER_B
from tests.support.proxy import chat_body, metric, user_headers

OPENWEBUI = "http://owui.test"
ADMIN_KEY = "sk-admin-0123456789abcdef"
MODE = {"TEAM_MIRROR": "openwebui", "OPENWEBUI_URL": OPENWEBUI, "OPENWEBUI_API_KEY": ADMIN_KEY}


def test_openwebuis_answer_and_the_header_are_read_as_team_ids() -> None:
    assert group_ids([{"id": "g-1", "name": "Ops"}, {"id": "../etc"}, {"name": "no id"}, {"id": "g-1"}, "x"]) == ["g-1"]
    assert group_ids({"detail": "Not authenticated"}) is None
    assert header_groups({"x-g": "a, b,../etc,a"}, "x-g") == ["a", "b"]
    assert header_groups({}, "x-g") is None and header_groups({"x-g": ""}, "x-g") == []


async def _teams_of(database_url: str, user: str) -> list[str]:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        return [m.team.id for m in await teams.teams_of(conn, user)]


async def test_a_users_groups_are_read_from_openwebui_with_the_admins_key_and_mirrored(
        proxy: Any, outside: Any, database_url: str) -> None:
    """A turn starts a read of the user's groups in the background (it never waits for OpenWebUI); the groups
    become mirrored teams; within TEAM_MIRROR_REFRESH_SECONDS no second read is made; what the client sends in a
    groups header counts for nothing."""
    seen: list[httpx.Request] = []

    def groups(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[{"id": "grp-eng", "name": "Engineering"}, {"id": "grp-all", "name": "All"}])

    outside.get(f"{OPENWEBUI}/api/v1/users/{USER_A}/groups").mock(side_effect=groups)
    client = await proxy(**MODE, USER_GROUPS_HEADER="x-groups")
    mirror = client.app.state.services.mirror
    headers = {**user_headers(USER_A), "x-groups": "intruders"}
    for _ in range(2):
        assert (await client.post("/v1/chat/completions", json=chat_body("hi"), headers=headers)).status_code == 200
        await mirror.settled()
    assert len(seen) == 1 and seen[0].headers["authorization"] == f"Bearer {ADMIN_KEY}"
    assert await _teams_of(database_url, USER_A) == ["grp-all", "grp-eng"]


async def test_a_failed_read_changes_nothing_and_is_counted(proxy: Any, outside: Any, database_url: str) -> None:
    outside.get(f"{OPENWEBUI}/api/v1/users/{USER_B}/groups").respond(401, json={"detail": "Not authenticated"})
    client = await proxy(**MODE)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        await teams.mirror_groups(conn, USER_B, ["grp-eng"], max_teams=10)  # mirrored at an earlier read
    before = metric("memory_proxy_team_mirror_total", outcome="read_failed")
    response = await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_B))
    await client.app.state.services.mirror.settled()
    assert response.status_code == 200 and await _teams_of(database_url, USER_B) == ["grp-eng"]
    assert metric("memory_proxy_team_mirror_total", outcome="read_failed") == before + 1
