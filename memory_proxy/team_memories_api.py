"""A team's memories under /api/v1/teams/{team_id}/ (docs/TEAMS.md): the memory routes of api.py, for the team.

The same handlers as a user's own memories (list, search, one memory, create, edit, pin, unpin, delete,
history, restore), with the team's principal, `team:<id>`, as the holder. Who may (`team_role`, the router's
guard, reading the membership at the request): a member reads; an editor also changes; an operator (a proxy
key without an identity, or an admin key) does both; anyone else gets a 404, as if the team did not exist.
Then the rows are reached in the team's scope, with the acting member named (`store.scope.acting_member`):
db/migrations/0014 writes them as the `author` of a memory they create or edit and the `actor` of each audit
row, which is how export and erasure find what a user wrote in teams. A user's export, erasure and the chat
turn are not here: a team has no chat of its own.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Router
from litestar.di import Provide
from litestar.handlers import BaseRouteHandler

from .api import (
    API_PREFIX,
    create_memory,
    delete_memory,
    edit_memory,
    get_memory,
    list_memories,
    memory_history,
    pin_memory,
    restore_memory,
    search_memories,
    unpin_memory,
)
from .api_input import MAX_BODY_BYTES, checked_request
from .errors import Forbidden, NotFound
from .guards import Connection, provide_services, require_any_key
from .store import teams
from .store.scope import acting_member
from .teams_api import OPERATOR, checked_team_id, team_caller

READING = frozenset({"GET", "HEAD"})


async def team_role(connection: Connection, _: BaseRouteHandler) -> None:
    """A member may read the team's memories, an editor change them too (403 for a member who tries), an
    operator both; for anyone else the team does not exist (404). Names the acting member for the request."""
    services = provide_services(connection.app.state)
    team_id = checked_team_id(connection.path_params["team_id"])
    who = team_caller(connection, services)
    if who is OPERATOR:
        return
    async with services.pool.connection() as conn:
        role = await teams.role_of(conn, team_id, who)
    if role is None:
        raise NotFound(f"no team {team_id!r}", param="team_id")
    if connection.scope["method"] not in READING and role != "editor":  # type: ignore[typeddict-item]
        raise Forbidden("only the team's editors change its memories", param="team_id")
    acting_member.set(who)


async def team_holder(request: Request[Any, Any, Any]) -> str:
    return teams.principal(checked_team_id(request.path_params["team_id"]))


TEAM_MEMORIES = Router(
    path=f"{API_PREFIX}/teams/{{team_id:str}}",
    route_handlers=[list_memories, search_memories, get_memory, create_memory, edit_memory, pin_memory,
                    unpin_memory, delete_memory, memory_history, restore_memory],
    guards=[require_any_key, team_role],
    dependencies={"user_id": Provide(team_holder)},
    before_request=checked_request,
    request_max_body_size=MAX_BODY_BYTES,
    tags=["team memories"],
)
