"""Fair use under /api/v1/limits and /api/v1/usage (docs/LIMITS.md): operators set, list and remove the limits
of an API key (by its fingerprint: `memory-proxy limits key-id`), a user or a model (`*`: every one of that kind
without its own), and read everyone's use; a user reads their own use only.

Who is an operator is the teams API's rule (team_routes.team_caller): a proxy key without an OpenWebUI identity,
or an admin key of `api_keys`. A change is in force in this process at once and in every other within
limiter.REFRESH_S.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Annotated, Any

from litestar import Request, Router, delete, get, put
from litestar.di import NamedDependency
from litestar.params import JSONBody, QueryParameter

from ..errors import BadRequest, Forbidden, NotFound
from ..http.auth import NOT_ONE_LINE, checked_user_id
from ..http.guards import require_any_key
from ..services import Services
from ..settings.limits_settings import LIMIT_NAMES
from ..store import limits
from ..store.limits import EVERY, KINDS, Limit
from .input_bounds import MAX_BODY_BYTES, checked_request
from .memory_routes import API_PREFIX
from .team_routes import OPERATOR, team_caller

KEY_ID = re.compile(r"[0-9a-f]{16}")
MAX_LIMIT = 2**62
USAGE_PAGE = 100


def checked_subject(kind: str, subject: str) -> tuple[str, str]:
    """A subject as every path takes it (the API, the CLI): a known kind; `*`, or a key's fingerprint, a user id
    by the users' rule, a model's name on one line; raises BadRequest."""
    if kind not in KINDS:
        raise BadRequest(f"kind is one of: {', '.join(KINDS)}", param="kind", code="invalid_kind")
    subject = subject.strip()
    if subject == EVERY:
        return kind, subject
    if kind == "key" and not KEY_ID.fullmatch(subject):
        raise BadRequest("a key is named by its fingerprint, 16 hex digits (`memory-proxy limits key-id KEY`), "
                         "never by the key itself", param="subject", code="invalid_subject")
    if kind == "user":
        return kind, checked_user_id(subject, "subject")
    if not subject or len(subject) > 255 or NOT_ONE_LINE.search(subject):
        raise BadRequest("a model's name is one line of 1 to 255 characters", param="subject", code="invalid_subject")
    return kind, subject


def _operator_only(request: Request[Any, Any, Any], services: Services) -> None:
    if team_caller(request, services) is not OPERATOR:
        raise Forbidden("only an operator sets limits: a proxy key without a user identity, or an admin key",
                        code="not_operator")


@get("/limits", summary="Every limit an operator set, and the defaults (operators)")
async def list_limits(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> dict[str, Any]:
    _operator_only(request, services)
    async with services.pool.connection() as conn:
        found = await limits.list_limits(conn)
    settings = services.settings.limits
    return {"limits": [lim.as_dict() for lim in found],
            "defaults": {"key": dict(settings.key), "user": dict(settings.user), "model": dict(settings.model)}}


@put("/limits", summary="Set a key's, user's or model's limits; none given: back to the defaults (operators)")
async def set_limit(request: Request[Any, Any, Any], services: NamedDependency[Services],
                    data: JSONBody[Limit]) -> dict[str, Any]:
    _operator_only(request, services)
    kind, subject = checked_subject(data.kind, data.subject)
    values = {name: getattr(data, name) for name in LIMIT_NAMES}
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not 1 <= value <= MAX_LIMIT):
            raise BadRequest(f"{name} is a positive whole number, or null for none", param=name,
                             code="invalid_limit")
    limit = Limit(kind, subject, **values)
    async with services.pool.connection() as conn:
        await limits.set_limit(conn, limit)
    services.limiter.changed(limit if limit.limits_anything else None, gone=(kind, subject))
    return limit.as_dict()


@delete("/limits", status_code=200, summary="Remove a key's, user's or model's own limits (operators)")
async def remove_limit(request: Request[Any, Any, Any], services: NamedDependency[Services],
                       kind: Annotated[str, QueryParameter(max_length=16)],
                       subject: Annotated[str, QueryParameter(max_length=255)]) -> dict[str, Any]:
    _operator_only(request, services)
    kind, subject = checked_subject(kind, subject)
    async with services.pool.connection() as conn:
        if not await limits.delete_limit(conn, kind, subject):
            raise NotFound(f"no limits of their own for {kind} {subject!r}", param="subject", code="no_limit")
    services.limiter.changed(gone=(kind, subject))
    return {"kind": kind, "subject": subject, "removed": True}


@get("/usage", summary="Use today and in the last minute: everyone's for operators (busiest first), one's own for a user")
async def usage(request: Request[Any, Any, Any], services: NamedDependency[Services],
                kind: Annotated[str | None, QueryParameter(max_length=16)] = None,
                subject: Annotated[str | None, QueryParameter(max_length=255)] = None,
                limit: Annotated[int, QueryParameter(ge=1, le=500)] = USAGE_PAGE) -> dict[str, Any]:
    user_id = team_caller(request, services)
    if user_id is not OPERATOR:
        kind, subject = "user", user_id  # a user sees their own use, whatever they asked for
    elif kind is not None:  # one kind; one subject of it, or all (`*` or none named)
        kind, subject = checked_subject(kind, EVERY if subject is None else subject)
        subject = None if subject == EVERY else subject
    async with services.pool.connection() as conn:
        found = await limits.usage(conn, kind, subject, limit)
    return {"usage": [asdict(use) for use in found]}


LIMITS_API = Router(
    path=API_PREFIX,
    route_handlers=[list_limits, set_limit, remove_limit, usage],
    guards=[require_any_key],
    before_request=checked_request,
    request_max_body_size=MAX_BODY_BYTES,
    tags=["limits"],
)
