"""Teams under /api/v1/teams (docs/TEAMS.md): operators manage teams and members, a user sees their own.

Who a request is (`team_caller`): an operator (a proxy key without an OpenWebUI identity, or an admin key of
`api_keys`), or one user (a proxy key with the identity, or a per-user key). Operators create, rename and
delete teams and add, re-role and remove members. A user lists the teams they belong to and reads one of
them with its members; a team they are not in is a 404, as if it did not exist.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from litestar import Request, Router, delete, get, patch, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..http.auth import NOT_ONE_LINE, checked_user_id, read_user_id
from ..http.guards import Connection, caller, require_any_key
from ..services import Services
from ..store import teams
from .input_bounds import MAX_BODY_BYTES, checked_request
from .memory_routes import API_PREFIX

OPERATOR = None  # `team_caller`'s answer for an operator
TEAMS_PAGE = 100  # teams an operator's listing gives by default; `next_after` names where the next page starts
MAX_TEAMS_PAGE = 500


@dataclass
class TeamIn:
    id: str
    name: str = ""
    about: str = ""


@dataclass
class TeamPatch:
    name: str | None = None
    about: str | None = None


@dataclass
class MemberIn:
    role: str = "member"


def team_caller(connection: Connection, services: Services) -> str | None:
    """The user a request acts as, or OPERATOR."""
    who = caller(connection)
    if who.proxy_key:
        return read_user_id(connection.headers, services.settings.server) or OPERATOR
    return who.user_id


def _operator_only(request: Request[Any, Any, Any], services: Services) -> None:
    if team_caller(request, services) is not OPERATOR:
        raise Forbidden("only an operator manages teams: a proxy key without a user identity, or an admin key")


def checked_team_id(raw: str) -> str:
    """A team id as every path takes it (the API, the CLI); raises BadRequest."""
    if not teams.TEAM_ID.fullmatch(raw):
        raise BadRequest("a team id is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
                         param="id", code="invalid_team_id")
    return raw


def checked_text(raw: str | None, limit: int, param: str) -> str | None:
    """A team's name or about, stripped: one line of at most `limit` characters; raises BadRequest."""
    if raw is None:
        return None
    text = raw.strip()
    if len(text) > limit:
        raise BadRequest(f"{param} is over {limit} characters", param=param, code="too_long")
    if NOT_ONE_LINE.search(text):
        raise BadRequest(f"{param} holds control characters or lone surrogates", param=param, code="unstorable_text")
    return text


def _shown(team: teams.Team, **extra: Any) -> dict[str, Any]:
    return {**asdict(team), **extra}


@get("/", summary="Teams: every team for an operator, a page at a time by id; a user's own teams (with their role)")
async def list_teams(request: Request[Any, Any, Any], services: NamedDependency[Services],
                     limit: Annotated[int, QueryParameter(ge=1, le=MAX_TEAMS_PAGE)] = TEAMS_PAGE,
                     after: Annotated[str, QueryParameter(max_length=64)] = "") -> dict[str, Any]:
    user_id = team_caller(request, services)
    async with services.pool.connection() as conn:
        if user_id is OPERATOR:
            found = await teams.list_teams(conn, after=after, limit=limit + 1)
            page = found[:limit]
            return {"teams": [_shown(team) for team in page],
                    "next_after": page[-1].id if len(found) > limit else None}
        return {"teams": [_shown(m.team, role=m.role) for m in await teams.teams_of(conn, user_id)],
                "next_after": None}


@post("/", status_code=201, summary="Create a team (operators)")
async def create_team(request: Request[Any, Any, Any], services: NamedDependency[Services],
                      data: JSONBody[TeamIn]) -> dict[str, Any]:
    _operator_only(request, services)
    team_id = checked_team_id(data.id)
    name = checked_text(data.name, teams.MAX_NAME, "name") or team_id
    about = checked_text(data.about, teams.MAX_ABOUT, "about") or ""
    async with services.pool.connection() as conn:
        try:
            return _shown(await teams.create_team(conn, team_id, name, about), members=[])
        except teams.TeamExists as exc:
            raise Conflict(f"team {team_id!r} exists already", param="id", code="team_exists") from exc


@get("/{team_id:str}", summary="A team and its members (operators, and the team's members)")
async def get_team(request: Request[Any, Any, Any], services: NamedDependency[Services],
                   team_id: FromPath[str]) -> dict[str, Any]:
    user_id = team_caller(request, services)
    async with services.pool.connection() as conn:
        team = await teams.get_team(conn, team_id)
        members = await teams.members(conn, team_id) if team else []
    if team is None or (user_id is not OPERATOR and user_id not in {m.user_id for m in members}):
        raise NotFound(f"no team {team_id!r}", param="team_id")
    return _shown(team, members=[asdict(m) for m in members])


@patch("/{team_id:str}", summary="Rename a team or change what it is about (operators)")
async def edit_team(request: Request[Any, Any, Any], services: NamedDependency[Services], team_id: FromPath[str],
                    data: JSONBody[TeamPatch]) -> dict[str, Any]:
    _operator_only(request, services)
    name = checked_text(data.name, teams.MAX_NAME, "name")
    if name == "":
        raise BadRequest("name is empty", param="name", code="empty_name")
    async with services.pool.connection() as conn:
        about = checked_text(data.about, teams.MAX_ABOUT, "about")
        team = await teams.update_team(conn, team_id, name=name, about=about)
    if team is None:
        raise NotFound(f"no team {team_id!r}", param="team_id")
    return _shown(team)


@delete("/{team_id:str}", status_code=200, summary="Delete a team and its memberships (operators)")
async def delete_team(request: Request[Any, Any, Any], services: NamedDependency[Services],
                      team_id: FromPath[str]) -> dict[str, Any]:
    _operator_only(request, services)
    async with services.pool.connection() as conn:
        if not await teams.delete_team(conn, team_id):
            raise NotFound(f"no team {team_id!r}", param="team_id")
    return {"team": team_id, "deleted": True}


@put("/{team_id:str}/members/{member:str}", summary="Add a member, or change a member's role (operators)")
async def put_member(request: Request[Any, Any, Any], services: NamedDependency[Services], team_id: FromPath[str],
                     member: FromPath[str], data: JSONBody[MemberIn]) -> dict[str, Any]:
    _operator_only(request, services)
    user_id = checked_user_id(member, "path")
    if data.role not in teams.ROLES:
        raise BadRequest(f"role must be one of: {', '.join(teams.ROLES)}", param="role", code="invalid_role")
    async with services.pool.connection() as conn:
        if not await teams.set_member(conn, team_id, user_id, data.role):
            raise NotFound(f"no team {team_id!r}", param="team_id")
    return {"team": team_id, "user": user_id, "role": data.role}


@delete("/{team_id:str}/members/{member:str}", status_code=200,
        summary="Remove a member: they lose the team's memories at once (operators)")
async def remove_member(request: Request[Any, Any, Any], services: NamedDependency[Services],
                        team_id: FromPath[str], member: FromPath[str]) -> dict[str, Any]:
    _operator_only(request, services)
    async with services.pool.connection() as conn:
        if not await teams.remove_member(conn, team_id, member):
            raise NotFound(f"{member!r} is not a member of team {team_id!r}", param="member")
    return {"team": team_id, "user": member, "removed": True}


TEAMS_API = Router(
    path=f"{API_PREFIX}/teams",
    route_handlers=[list_teams, create_team, get_team, edit_team, delete_team, put_member, remove_member],
    guards=[require_any_key],
    before_request=checked_request,
    request_max_body_size=MAX_BODY_BYTES,
    tags=["teams"],
)
