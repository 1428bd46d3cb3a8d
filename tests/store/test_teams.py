"""Teams and members (memory_proxy/store/teams.py, the `teams` command): on the app's own pool and role."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from memory_proxy.cli import main
from memory_proxy.store import teams
from memory_proxy.store.database import make_pool
from tests.support.data import BUN, ROOT, RUNTIME_Q, USER_A, USER_B
from tests.support.proxy import add_memory, chat_body, metric, set_env, user_headers


async def test_a_team_its_members_and_their_roles(database_url: str) -> None:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        made = await teams.create_team(conn, "platform", "Platform", "runs the clusters")
        assert (made.id, made.name, made.about, made.member_count) == ("platform", "Platform", "runs the clusters", 0)
        await teams.create_team(conn, "billing", "Billing")
        with pytest.raises(teams.TeamExists):
            await teams.create_team(conn, "platform", "Another")
        assert await teams.set_member(conn, "platform", USER_A, "editor")
        assert await teams.set_member(conn, "platform", USER_B)
        assert await teams.set_member(conn, "billing", USER_A)
        assert not await teams.set_member(conn, "no-such-team", USER_A)  # no team is made on the way
        assert [t.id for t in await teams.list_teams(conn)] == ["billing", "platform"]
        assert [(m.team.id, m.role) for m in await teams.teams_of(conn, USER_A)] == [("billing", "member"),
                                                                                     ("platform", "editor")]
        assert [(m.user_id, m.role) for m in await teams.members(conn, "platform")] == [(USER_A, "editor"),
                                                                                        (USER_B, "member")]
        assert (await teams.get_team(conn, "platform")).member_count == 2  # type: ignore[union-attr]
        # a role changes in place; a removal answers whether there was a member to remove
        assert await teams.set_member(conn, "platform", USER_A, "member")
        assert [m.role for m in await teams.teams_of(conn, USER_A)] == ["member", "member"]
        assert await teams.remove_member(conn, "platform", USER_B)
        assert not await teams.remove_member(conn, "platform", USER_B)
        assert [m.team.id for m in await teams.teams_of(conn, USER_B)] == []
        renamed = await teams.update_team(conn, "platform", about="runs the clusters and CI")
        assert renamed is not None and (renamed.name, renamed.about) == ("Platform", "runs the clusters and CI")
        assert await teams.update_team(conn, "no-such-team", name="x") is None
        # deleting a team deletes its memberships
        assert await teams.delete_team(conn, "platform") and not await teams.delete_team(conn, "platform")
        assert [m.team.id for m in await teams.teams_of(conn, USER_A)] == ["billing"]
        with pytest.raises(ValueError):
            await teams.set_member(conn, "billing", USER_B, "owner")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [("../etc", "a"), ("", "a"), ("a" * 65, "a"), ("ok", ""), ("ok", "n" * 101)])
def test_the_table_refuses_what_the_api_would(database_url: str, bad: tuple[str, str]) -> None:
    """Ids safe in a path and a log line, a name: the table's CHECK holds even for a caller that skips the
    API's checks."""
    team_id, name = bad
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO teams (id, name) VALUES (%s, %s)", [team_id, name])
    assert not teams.TEAM_ID.fullmatch(team_id) or not name or len(name) > teams.MAX_NAME


def test_membership_needs_a_team_and_a_role(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO teams (id, name) VALUES ('ops', 'Ops')")
        conn.commit()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("INSERT INTO team_members (team_id, user_id) VALUES ('nope', 'u')")
        conn.rollback()
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO team_members (team_id, user_id, role) VALUES ('ops', 'u', 'owner')")


@pytest.mark.slow
def test_the_teams_command(env: dict, monkeypatch: Any, capsys: Any) -> None:
    set_env(env, monkeypatch)
    assert main(["teams", "create", "platform", "--name", "Platform", "--about", "runs the clusters"]) == 0
    assert main(["teams", "create", "platform"]) == 1 and "exists already" in capsys.readouterr().err
    assert main(["teams", "add", "platform", USER_A, "--editor"]) == 0
    assert main(["teams", "add", "platform", USER_B]) == 0
    assert main(["teams", "add", "nope", USER_B]) == 1 and "no team nope" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["teams", "list"]) == 0
    assert "id=platform  name=Platform  members=2  about=runs the clusters" in capsys.readouterr().out
    assert main(["teams", "show", "platform"]) == 0
    shown = capsys.readouterr().out
    assert f"user={USER_A}  role=editor" in shown and f"user={USER_B}  role=member" in shown
    assert main(["teams", "remove", "platform", USER_B]) == 0
    assert main(["teams", "remove", "platform", USER_B]) == 1 and "not a member" in capsys.readouterr().err
    assert main(["teams", "delete", "platform"]) == 0
    assert main(["teams", "show", "platform"]) == 1
    for refused in (["teams", "create", "../etc"], ["teams", "create", "ok", "--name", "a\x00b"],
                    ["teams", "add", "ok", " "]):
        with pytest.raises(SystemExit):  # refused by the parser (the API's rules), before any database
            main(refused)


# ---------------------------------------------------------------- OpenWebUI groups mirrored (TEAM_MIRROR=header)

GROUPS_HEADER = "x-openwebui-user-group-ids"
MIGRATION_0016 = ROOT / "memory_proxy" / "store" / "migrations" / "0016_mirrored_teams.sql"


async def _memberships(database_url: str, user: str) -> list[tuple[str, str, bool]]:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        cur = await conn.execute("SELECT team_id, role, mirrored FROM team_members WHERE user_id = %s"
                                 " ORDER BY team_id", [user])
        return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


async def test_each_turn_makes_the_mirrored_memberships_the_groups_it_names(proxy: Any, database_url: str) -> None:
    client = await proxy(TEAM_MIRROR="header", USER_GROUPS_HEADER=GROUPS_HEADER)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:  # an operator's membership
        await teams.create_team(conn, "ops", "Ops")
        await teams.set_member(conn, "ops", USER_A, "editor")

    async def turn(groups: str | None) -> None:
        headers = {**user_headers(USER_A), **({GROUPS_HEADER: groups} if groups is not None else {})}
        response = await client.post("/v1/chat/completions", json=chat_body("hi there"), headers=headers)
        assert response.status_code == 200, response.text

    await turn("3f2a-platform, billing,../etc,billing,ops")  # an id that cannot be a team's is left out; an
    # operator's team (ops) is never joined through a group of its id
    assert await _memberships(database_url, USER_A) == [("3f2a-platform", "member", True), ("billing", "member", True),
                                                       ("ops", "editor", False)]
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        made = await teams.get_team(conn, "3f2a-platform")
        assert made is not None and made.name == "3f2a-platform"  # named by its id until an operator renames it
        await teams.set_member(conn, "billing", USER_A, "editor")  # an operator may raise a mirrored member
    await turn(None)  # not sent (a task request, another client): memberships stay as they are
    assert [m[0] for m in await _memberships(database_url, USER_A)] == ["3f2a-platform", "billing", "ops"]
    await turn("billing")  # removed from a group in OpenWebUI: out of the team on the next turn
    assert await _memberships(database_url, USER_A) == [("billing", "editor", True), ("ops", "editor", False)]
    await turn("")  # no group (or OpenWebUI's lookup failed): out of every mirrored team, never an operator's
    assert await _memberships(database_url, USER_A) == [("ops", "editor", False)]


@pytest.mark.parametrize("mode", [{}, {"USER_GROUPS_HEADER": GROUPS_HEADER}])
async def test_the_groups_header_is_ignored_unless_the_header_mode_is_chosen(proxy: Any, database_url: str,
                                                                              mode: dict[str, str]) -> None:
    client = await proxy(**mode)  # TEAM_MIRROR off: the header names nothing, even when it is configured
    response = await client.post("/v1/chat/completions", json=chat_body("hi"),
                                 headers={**user_headers(USER_A), GROUPS_HEADER: "platform"})
    assert response.status_code == 200 and await _memberships(database_url, USER_A) == []


async def test_an_operators_team_is_never_joined_and_the_mirror_makes_only_so_many_teams(database_url: str) -> None:
    """Whoever sets the header names groups: an operator's team of that id stays the operator's (its members, its
    removals), and the mirror makes at most `max_teams` teams in all, whatever the turns name."""
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        await teams.create_team(conn, "finance", "Finance")
        await teams.set_member(conn, "finance", USER_B)
        done = await teams.mirror_groups(conn, USER_A, ["finance", "g1", "g2"], max_teams=3)
        assert (done.joined, done.made, done.skipped) == (2, 2, 1)
        assert [m.team.id for m in await teams.teams_of(conn, USER_A)] == ["g1", "g2"]
        assert [m.user_id for m in await teams.members(conn, "finance")] == [USER_B]
        await teams.remove_member(conn, "g1", USER_A)  # an operator's removal from a mirrored team: the groups win
        flood = await teams.mirror_groups(conn, USER_A, ["g1", "g3", "g4", "g5"], max_teams=3)
        assert (flood.made, flood.skipped) == (1, 2)  # g3 made, g4 and g5 past the cap
        assert [m.team.id for m in await teams.teams_of(conn, USER_A)] == ["g1", "g3"]
        assert [(t.id, t.mirrored) for t in await teams.list_teams(conn)] == [
            ("finance", False), ("g1", True), ("g2", True), ("g3", True)]


async def test_migration_0016_marks_what_the_mirror_made_and_undoes_its_joins_of_operators_teams(
        database_url: str) -> None:
    """The data part of 0016, on memberships as the old mirror left them: a team it made (named by its id, only
    mirrored members) becomes a mirrored team; a mirrored membership of an operator's team is removed."""
    statements = [s for s in MIGRATION_0016.read_text().split(";") if s.strip().upper().lstrip("- \n").startswith(
        ("UPDATE", "DELETE")) or "UPDATE teams" in s or "DELETE FROM team_members" in s]
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        await conn.execute("INSERT INTO teams (id, name) VALUES ('grp-1', 'grp-1'), ('ops', 'Ops')")
        await conn.execute("INSERT INTO team_members (team_id, user_id, mirrored) VALUES ('grp-1', %s, true),"
                           " ('ops', %s, false), ('ops', %s, true)", [USER_A, USER_B, USER_A])
        for statement in statements:
            await conn.execute(statement)
        assert [(t.id, t.mirrored) for t in await teams.list_teams(conn)] == [("grp-1", True), ("ops", False)]
        assert [m.user_id for m in await teams.members(conn, "ops")] == [USER_B]


async def test_a_failed_mirror_relays_the_turn_without_memory(proxy: Any, database_url: str,
                                                             monkeypatch: Any) -> None:
    """The memberships could not be brought up to date: no memory is read (a removed member must not read
    on), the chat goes on, and the failure is counted."""
    client = await proxy(TEAM_MIRROR="header", USER_GROUPS_HEADER=GROUPS_HEADER)
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        await add_memory(conn, USER_A, BUN)
    headers = {**user_headers(USER_A), GROUPS_HEADER: "platform"}
    working = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q), headers=headers)
    assert working.headers["x-memory-proxy-memories"] != ""  # the memory this turn would read

    async def broken(*_: Any, **__: Any) -> teams.Mirrored:
        raise psycopg.OperationalError("connection lost")

    monkeypatch.setattr(teams, "mirror_groups", broken)
    before = metric("memory_proxy_fail_open_total", reason="database_error")
    response = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q), headers=headers)
    assert response.status_code == 200 and response.headers["x-memory-proxy-memories"] == ""
    assert metric("memory_proxy_fail_open_total", reason="database_error") == before + 1
