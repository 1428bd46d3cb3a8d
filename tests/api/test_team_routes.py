"""Teams under /api/v1/teams (memory_proxy/api/team_routes.py): operators manage them, a user sees only their own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.data import OUTSIDER, TEAMS, USER_A, USER_B


async def test_an_operator_builds_a_team_and_each_member_sees_it(client: Any, credentials: dict) -> None:
    made = await client.post(f"{TEAMS}/", json={"id": "platform", "name": "Platform", "about": "runs the clusters"},
                             headers=credentials["proxy"])
    assert made.status_code == 201, made.text
    assert made.json() | {"created_at": None} == {"id": "platform", "name": "Platform", "about": "runs the clusters",
                                                  "created_at": None, "member_count": 0, "mirrored": False,
                                                  "members": []}
    for user, role in ((USER_A, "editor"), (USER_B, "member")):
        added = await client.put(f"{TEAMS}/platform/members/{user}", json={"role": role},
                                 headers=credentials["admin"])
        assert added.json() == {"team": "platform", "user": user, "role": role}
    await client.post(f"{TEAMS}/", json={"id": "billing"}, headers=credentials["admin"])

    everything = (await client.get(f"{TEAMS}/", headers=credentials["proxy"])).json()["teams"]
    assert [(t["id"], t["name"], t["member_count"]) for t in everything] == [("billing", "billing", 0),
                                                                             ("platform", "Platform", 2)]
    for who, role in (("a", "editor"), ("b", "member")):
        mine = (await client.get(f"{TEAMS}/", headers=credentials[who])).json()["teams"]
        assert [(t["id"], t["role"]) for t in mine] == [("platform", role)]
        team = (await client.get(f"{TEAMS}/platform", headers=credentials[who])).json()
        assert [(m["user_id"], m["role"]) for m in team["members"]] == [(USER_A, "editor"), (USER_B, "member")]
    assert (await client.get(f"{TEAMS}/", headers=credentials["c"])).json() == {"teams": [], "next_after": None}


async def test_an_operators_listing_comes_a_page_at_a_time(client: Any, credentials: dict) -> None:
    for team in ("a1", "a2", "a3", "b1", "b2"):
        await client.post(f"{TEAMS}/", json={"id": team}, headers=credentials["proxy"])
    pages, after = [], ""
    while True:
        page = (await client.get(f"{TEAMS}/", params={"limit": 2, "after": after}, headers=credentials["proxy"])).json()
        pages.append([t["id"] for t in page["teams"]])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert pages == [["a1", "a2"], ["a3", "b1"], ["b2"]]
    assert (await client.get(f"{TEAMS}/", params={"limit": 0}, headers=credentials["proxy"])).status_code == 400


async def test_nothing_tells_an_outsider_that_a_team_exists(client: Any, credentials: dict) -> None:
    await client.post(f"{TEAMS}/", json={"id": "platform"}, headers=credentials["proxy"])
    await client.put(f"{TEAMS}/platform/members/{USER_A}", json={}, headers=credentials["proxy"])
    hidden = await client.get(f"{TEAMS}/platform", headers=credentials["c"])
    missing = await client.get(f"{TEAMS}/no-such-team", headers=credentials["c"])
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"].replace("platform", "X") == \
        missing.json()["error"]["message"].replace("no-such-team", "X")


async def test_only_operators_manage_teams(client: Any, credentials: dict) -> None:
    await client.post(f"{TEAMS}/", json={"id": "platform"}, headers=credentials["proxy"])
    await client.put(f"{TEAMS}/platform/members/{USER_A}", json={"role": "editor"}, headers=credentials["proxy"])
    for who in ("a", "b", "c"):  # an editor of the team included: editors edit memories, not membership
        headers = credentials[who]
        attempts = [await client.post(f"{TEAMS}/", json={"id": "mine"}, headers=headers),
                    await client.patch(f"{TEAMS}/platform", json={"name": "Ours"}, headers=headers),
                    await client.put(f"{TEAMS}/platform/members/{OUTSIDER}", json={}, headers=headers),
                    await client.delete(f"{TEAMS}/platform/members/{USER_A}", headers=headers),
                    await client.delete(f"{TEAMS}/platform", headers=headers)]
        assert [r.status_code for r in attempts] == [403] * 5, who
    team = (await client.get(f"{TEAMS}/platform", headers=credentials["proxy"])).json()
    assert (team["name"], [m["user_id"] for m in team["members"]]) == ("platform", [USER_A])
    assert (await client.get(f"{TEAMS}/", headers={"authorization": "Bearer nope-nope-nope-nope"})).status_code == 401


async def test_a_removed_member_no_longer_sees_the_team(client: Any, credentials: dict) -> None:
    await client.post(f"{TEAMS}/", json={"id": "platform"}, headers=credentials["proxy"])
    await client.put(f"{TEAMS}/platform/members/{USER_B}", json={}, headers=credentials["proxy"])
    assert (await client.get(f"{TEAMS}/platform", headers=credentials["b"])).status_code == 200
    removed = await client.delete(f"{TEAMS}/platform/members/{USER_B}", headers=credentials["admin"])
    assert removed.json() == {"team": "platform", "user": USER_B, "removed": True}
    assert (await client.get(f"{TEAMS}/platform", headers=credentials["b"])).status_code == 404
    assert (await client.get(f"{TEAMS}/", headers=credentials["b"])).json() == {"teams": [], "next_after": None}
    again = await client.delete(f"{TEAMS}/platform/members/{USER_B}", headers=credentials["admin"])
    assert again.status_code == 404


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("post", "/", {"id": "../etc"}, 400, "invalid_team_id"),
    ("post", "/", {"id": "a b"}, 400, "invalid_team_id"),
    ("post", "/", {"id": "x" * 65}, 400, "invalid_team_id"),
    ("post", "/", {"id": "ok", "name": "n" * 101}, 400, "too_long"),
    ("post", "/", {"id": "ok", "about": "a" * 501}, 400, "too_long"),
    ("post", "/", {"name": "no id"}, 400, None),
    ("post", "/", {"id": "ok", "name": "a\x00b"}, 400, "unstorable_text"),
    ("post", "/", {"id": "ok", "about": "line\nbreak"}, 400, "unstorable_text"),
    ("post", "/", {"id": "platform"}, 409, "team_exists"),
    ("patch", "/platform", {"name": " "}, 400, "empty_name"),
    ("patch", "/nope", {"name": "x"}, 404, None),
    ("put", "/platform/members/u1", {"role": "owner"}, 400, "invalid_role"),
    ("put", "/nope/members/u1", {}, 404, None),
    ("put", "/platform/members/%20", {}, 400, "invalid_user_id"),
    ("delete", "/nope", None, 404, None),
])
async def test_bad_requests_get_clear_errors(client: Any, method: str, path: str, body: Any, status: int,
                                             code: str | None) -> None:
    await client.post(f"{TEAMS}/", json={"id": "platform"})
    response = await client.request(method.upper(), f"{TEAMS}{path}", json=body)
    assert response.status_code == status, response.text
    assert "error" in response.json()
    if code:
        assert response.json()["error"]["code"] == code


async def test_erasure_takes_the_user_out_of_their_teams(client: Any, credentials: dict) -> None:
    """A membership names the user: erasure removes it with the rest of what the proxy holds of them."""
    await client.post(f"{TEAMS}/", json={"id": "platform"}, headers=credentials["proxy"])
    for user in (USER_A, USER_B):
        await client.put(f"{TEAMS}/platform/members/{user}", json={}, headers=credentials["proxy"])
    erased = await client.post("/api/v1/erase", params={"confirm": USER_A}, headers=credentials["a"])
    assert erased.json()["erased"]["memberships"] == 1
    team = (await client.get(f"{TEAMS}/platform", headers=credentials["proxy"])).json()
    assert [m["user_id"] for m in team["members"]] == [USER_B]


async def test_a_lone_surrogate_is_a_400_not_a_500(client: Any) -> None:
    """JSON may escape half a surrogate pair, which PostgreSQL cannot store: refused when the body is read."""
    response = await client.post(f"{TEAMS}/", content=b'{"id": "ok", "name": "x\\ud800"}',
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["message"]
