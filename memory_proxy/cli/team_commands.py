"""Teams: teams create, list, show, delete, add, remove (docs/TEAMS.md)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..settings import Settings
from .common import api_argument, user_id_argument, with_connection

if TYPE_CHECKING:
    from ..store.teams import Role


def _team_id(raw: str) -> str:
    from ..api.team_routes import checked_team_id

    return api_argument(checked_team_id, raw)


def _text(limit: int, param: str) -> Any:
    def parse(raw: str) -> str:
        from ..api.team_routes import checked_text

        return api_argument(checked_text, raw, limit, param)
    return parse


def _create(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import teams

    try:
        team = with_connection(settings, lambda conn: teams.create_team(conn, args.team, args.name or args.team,
                                                                   args.about))
    except teams.TeamExists:
        print(f"error: team {args.team} exists already", file=sys.stderr)
        return 1
    print(f"team {team.id} created")
    return 0


def _list(settings: Settings, _: argparse.Namespace) -> int:
    from ..store import teams

    for team in with_connection(settings, teams.list_teams):
        print(f"id={team.id}  name={team.name}  members={team.member_count}  about={team.about}")
    return 0


def _show(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import teams

    async def show(conn: Any) -> tuple[Any, list[Any]]:
        return await teams.get_team(conn, args.team), await teams.members(conn, args.team)

    team, members = with_connection(settings, show)
    if team is None:
        print(f"error: no team {args.team}", file=sys.stderr)
        return 1
    print(f"id={team.id}  name={team.name}  about={team.about}")
    for member in members:
        print(f"  user={member.user_id}  role={member.role}  added={member.added_at:%Y-%m-%d %H:%M:%S}")
    return 0


def _delete(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import teams

    if not with_connection(settings, lambda conn: teams.delete_team(conn, args.team)):
        print(f"error: no team {args.team}", file=sys.stderr)
        return 1
    print(f"team {args.team} deleted")
    return 0


def _add(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import teams

    role: Role = "editor" if args.editor else "member"
    if not with_connection(settings, lambda conn: teams.set_member(conn, args.team, args.user, role)):
        print(f"error: no team {args.team}", file=sys.stderr)
        return 1
    print(f"{args.user} is a {role} of team {args.team}")
    return 0


def _remove(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import teams

    if not with_connection(settings, lambda conn: teams.remove_member(conn, args.team, args.user)):
        print(f"error: {args.user} is not a member of team {args.team}", file=sys.stderr)
        return 1
    print(f"{args.user} removed from team {args.team}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    from ..store.teams import MAX_ABOUT, MAX_NAME

    team = commands.add_parser("teams", help="create teams and manage their members")
    actions = team.add_subparsers(dest="teams_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a team (no members yet)")
    create.add_argument("team", type=_team_id, help="the team id (an OpenWebUI group id when it mirrors one)")
    create.add_argument("--name", type=_text(MAX_NAME, "--name"), default="",
                        help="its display name (default: the id)")
    create.add_argument("--about", type=_text(MAX_ABOUT, "--about"), default="",
                        help="what the team works on, in a line")
    create.set_defaults(run=_create)
    actions.add_parser("list", help="list teams with their member counts").set_defaults(run=_list)
    show = actions.add_parser("show", help="a team and its members")
    show.add_argument("team", type=_team_id)
    show.set_defaults(run=_show)
    delete = actions.add_parser("delete", help="delete a team and its memberships")
    delete.add_argument("team", type=_team_id)
    delete.set_defaults(run=_delete)
    add = actions.add_parser("add", help="add a member to a team, or change a member's role")
    add.add_argument("team", type=_team_id)
    add.add_argument("user", type=user_id_argument, help="the user id as the proxy identifies the user")
    add.add_argument("--editor", action="store_true", help="may also change and delete the team's memories")
    add.set_defaults(run=_add)
    remove = actions.add_parser("remove", help="remove a member from a team, at once")
    remove.add_argument("team", type=_team_id)
    remove.add_argument("user", type=user_id_argument)
    remove.set_defaults(run=_remove)
