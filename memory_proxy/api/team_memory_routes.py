"""A team's memories under /api/v1/teams/{team_id}/ (docs/TEAMS.md): memory_routes.py's routes, for the team.

The same handlers as a user's own memories (list, search, one memory, create, edit, pin, unpin, delete,
history, restore), with the team's principal, `team:<id>`, as the holder; and the team's proposals
(TEAM_FACTS=review: the facts formation keeps apart for its editors), which editors list, accept or reject. Who may (`team_role`, the router's
guard, reading the membership at the request): a member reads; an editor also changes; an operator (a proxy
key without an identity, or an admin key) does both; anyone else gets a 404, as if the team did not exist.
Then the rows are reached in the team's scope, with the acting member named (`store.scope.acting_member`):
memory_proxy/store/migrations/0014 writes them as the `author` of a memory they create or edit and the `actor` of each audit
row, which is how export and erasure find what a user wrote in teams. A user's export, erasure and the chat
turn are not here: a team has no chat of its own.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from litestar import Request, Router, get, post
from litestar.di import NamedDependency, Provide
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath

from ..errors import Forbidden, NotFound
from ..http.guards import Connection, provide_services, require_any_key
from ..services import Services
from ..store import manage, proposals, teams
from ..store.scope import acting_member
from ..store.teams import Holder
from .input_bounds import MAX_BODY_BYTES, checked_request
from .memory_routes import (
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
from .team_routes import OPERATOR, checked_team_id, team_caller

READING = frozenset({"GET", "HEAD"})
EDITORS_ONLY = "editors_only"  # a route's `opt`: editors and operators only, even to read (the proposals)


async def team_role(connection: Connection, route: BaseRouteHandler) -> None:
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
    changing = connection.scope["method"] not in READING  # type: ignore[typeddict-item]
    if (changing or route.opt.get(EDITORS_ONLY)) and role != "editor":
        raise Forbidden("only the team's editors change its memories or see its proposals", param="team_id")
    acting_member.set(who)


async def team_holder(request: Request[Any, Any, Any]) -> str:
    return Holder.team(checked_team_id(request.path_params["team_id"])).principal


@get("/proposals", summary="The team's pending facts (TEAM_FACTS=review), oldest first: editors",
     opt={EDITORS_ONLY: True})
async def list_proposals(services: NamedDependency[Services], user_id: NamedDependency[str]) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        found = await proposals.pending(conn, user_id)
    return {"team": Holder(user_id).team_id, "data": [asdict(p) for p in found]}


@post("/proposals/{proposal_id:int}/accept", status_code=200, opt={EDITORS_ONLY: True},
      summary="Accept a pending fact: added to the team's memories (replacing the one it changes)")
async def accept_proposal(services: NamedDependency[Services], user_id: NamedDependency[str],
                          proposal_id: FromPath[int]) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        memory_id = await proposals.accept(conn, user_id, proposal_id, "accepted by an editor")
        if memory_id is None:
            raise NotFound(f"no pending proposal {proposal_id} in this team", param="proposal_id")
        return {"proposal": proposal_id, "accepted": True, "memory": await manage.get_memory(conn, user_id, memory_id)}


@post("/proposals/{proposal_id:int}/reject", status_code=200, opt={EDITORS_ONLY: True},
      summary="Reject a pending fact: deleted")
async def reject_proposal(services: NamedDependency[Services], user_id: NamedDependency[str],
                          proposal_id: FromPath[int]) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        if not await proposals.reject(conn, user_id, proposal_id):
            raise NotFound(f"no pending proposal {proposal_id} in this team", param="proposal_id")
    return {"proposal": proposal_id, "rejected": True}


TEAM_MEMORIES = Router(
    path=f"{API_PREFIX}/teams/{{team_id:str}}",
    route_handlers=[list_memories, search_memories, get_memory, create_memory, edit_memory, pin_memory,
                    unpin_memory, delete_memory, memory_history, restore_memory, list_proposals, accept_proposal,
                    reject_proposal],
    guards=[require_any_key, team_role],
    dependencies={"user_id": Provide(team_holder)},
    before_request=checked_request,
    request_max_body_size=MAX_BODY_BYTES,
    tags=["team memories"],
)
