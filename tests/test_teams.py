"""Teams and members (memory_proxy/store/teams.py, the `teams` command): on the app's own pool and role."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from memory_proxy.cli import main
from memory_proxy.store import teams
from memory_proxy.store.database import make_pool
from tests.conftest import USER_A, USER_B


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


def _set_env(env: dict, monkeypatch: Any) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_the_teams_command(env: dict, monkeypatch: Any, capsys: Any) -> None:
    _set_env(env, monkeypatch)
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
