"""The memory management API under /api/v1 (docs/MANAGEMENT.md) and the memory browser page at /memories/.

Who a request acts for (`acting_user`, on every route):
- a proxy key (PROXY_API_KEYS) with the OpenWebUI identity (user header, or signed JWT when
  USER_JWT_SECRET is set): that user only; a `?user=` naming someone else is refused (403);
- a proxy key or an admin key (api_keys, user NULL) without an identity: the user named by `?user=`;
- a per-user key (api_keys): its user only; a `?user=` naming someone else is refused (403).
Every store call then runs in that user's row-level security scope. A memory the user does not hold
is a 404, whoever else holds it: nothing tells that another user's id exists.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from litestar import Request, Response, Router, delete, get, patch, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.static_files import create_static_files_router

from ..embedding.embedders import embed_one
from ..embedding.memory_document import embedding_text
from ..errors import BadRequest, Conflict, Forbidden, MemoryUnavailable, NotFound, Unavailable
from ..http.auth import checked_user_id, read_user_id
from ..http.guards import caller, require_any_key
from ..observability import log
from ..records import FactAttributes
from ..retrieval.retrieve import retrieve_memories
from ..services import Services
from ..settings import STORED_TYPES
from ..store import manage, memories
from . import export_format
from .input_bounds import (
    MAX_BODY_BYTES,
    BadCursor,
    MemoryIn,
    MemoryPatch,
    check_type,
    checked_request,
    clean_content,
    decode_cursor,
    encode_cursor,
    reason_text,
)

API_PREFIX = "/api/v1"
BROWSER_DIR = Path(__file__).parent / "browser"
MAX_STATIC_PATH = 256
PAGE_LIMIT = 50
MAX_PAGE_LIMIT = 200


# ---------------------------------------------------------------- who acts

async def acting_user(
    request: Request[Any, Any, Any], services: NamedDependency[Services],
    user: Annotated[str | None, QueryParameter(description="the user to act for (admin keys)")] = None,
) -> str:
    """The one user this request acts for (see the module docstring), its key checked by the router's guard
    (guards.require_any_key); raises 401 (a bad signed identity) / 403 / 400."""
    named = None if user is None else checked_user_id(user, "?user=")
    who = caller(request)
    if who.proxy_key:
        identity = read_user_id(request.headers, services.settings.server)
        if identity:
            return _only(identity, named)
    elif who.user_id:
        return _only(who.user_id, named)
    if not named:
        raise BadRequest("an admin key must name the user: add ?user=<user id>", param="user", code="user_required")
    return named


def _only(identity: str, named: str | None) -> str:
    if named and named != identity:
        raise Forbidden("this credential acts only for its own user; ?user= may not name another", param="user")
    return identity


# ---------------------------------------------------------------- input

def _attributes(services: Services, memory_type: str, stated_at: datetime) -> FactAttributes:
    return FactAttributes(memory_type=memory_type, expires_at=services.settings.formation.expiry(memory_type, stated_at))


async def _embed(services: Services, content: str, stated_at: datetime) -> list[float]:
    try:
        return await embed_one(services.embedder, embedding_text(content, stated_at))
    except MemoryUnavailable as exc:
        raise Unavailable(f"the embedder failed: {exc}") from exc


async def _memory_or_404(services: Services, user_id: str, memory_id: str, *, active: bool = True) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        found = await manage.get_memory(conn, user_id, memory_id)
    if found is None or (active and not found["active"]):
        raise NotFound(f"no {'active ' if active else ''}memory {memory_id!r} for this user", param="id")
    return found


# ---------------------------------------------------------------- routes

@get("/memories", summary="List active memories, newest first (cursor pagination)")
async def list_memories(
    services: NamedDependency[Services], user_id: NamedDependency[str],
    memory_type: Annotated[str | None, QueryParameter(name="type")] = None,
    pinned: FromQuery[bool | None] = None,
    q: Annotated[str | None, QueryParameter(description="words or a substring of the text")] = None,
    cursor: FromQuery[str | None] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE_LIMIT)] = PAGE_LIMIT,
) -> dict[str, Any]:
    try:
        after = decode_cursor(cursor) if cursor else None
    except BadCursor as exc:
        raise BadRequest(str(exc), param="cursor", code="bad_cursor") from exc
    async with services.pool.connection() as conn:
        kind = memory_type and check_type(memory_type, STORED_TYPES)  # episodes too
        found = await manage.list_memories(conn, user_id, memory_type=kind,
                                           pinned=pinned, text=(q or "").strip() or None, after=after,
                                           limit=limit + 1)
    page = found[:limit]
    return {"user": user_id, "data": page,
            "next_cursor": encode_cursor(page[-1]) if len(found) > limit else None}


@get("/memories/search", summary="Search as chat injection ranks (hybrid search + ranking), with scores")
async def search_memories(
    services: NamedDependency[Services], user_id: NamedDependency[str], q: FromQuery[str],
    limit: Annotated[int, QueryParameter(ge=1, le=50)] = 10,
) -> dict[str, Any]:
    if not q.strip():
        raise BadRequest("q is empty", param="q")
    try:
        found = await retrieve_memories(pool=services.pool, embedder=services.embedder, user_id=user_id,
                                        query=q.strip(), settings=replace(services.settings.retrieval, top_k=limit),
                                        indexes=services.indexes)
    except MemoryUnavailable as exc:
        raise Unavailable(f"search failed ({exc.reason})") from exc
    return {"user": user_id, "data": [
        {"id": m.id, "content": m.content, "memory_type": m.memory_type, "pinned": m.pinned,
         "stated_at": m.said_at, "created_at": m.created_at, "score": m.score} for m in found]}


@get("/memories/{memory_id:str}", summary="One memory of the user (active or retired)")
async def get_memory(services: NamedDependency[Services], user_id: NamedDependency[str],
                     memory_id: FromPath[str]) -> dict[str, Any]:
    return await _memory_or_404(services, user_id, memory_id, active=False)


@post("/memories", summary="Create a memory (embedded now)")
async def create_memory(services: NamedDependency[Services], user_id: NamedDependency[str],
                        data: JSONBody[MemoryIn]) -> Response[dict[str, Any]]:
    memory_type = check_type(data.memory_type)
    content = await clean_content(services, data.content)
    cap = services.settings.formation.max_memories
    async with services.pool.connection() as conn:
        existing = await memories.find_same_text(conn, user_id, content)
        if existing is None:
            if await memories.count_memories(conn, user_id) >= cap:  # before embedding; checked again when added
                raise _at_cap(user_id, cap)
            stated_at = services.clock()
            embedding = await _embed(services, content, stated_at)
            try:
                existing = await memories.add_within_cap(
                    conn, user_id=user_id, max_memories=cap, content=content, embedding=embedding,
                    model=services.embedder.model, stated_at=stated_at, metadata={"type": "memory", "source": "api"},
                    attributes=_attributes(services, memory_type, stated_at))
            except memories.MemoryCapReached as exc:
                raise _at_cap(user_id, cap) from exc
            status = 201
        else:
            status = 200
        if data.pinned:
            await memories.set_pinned(conn, user_id, existing, True)
        return Response(await manage.get_memory(conn, user_id, existing) or {}, status_code=status)


def _at_cap(user_id: str, cap: int) -> Conflict:
    log.warning("memory_limit", limit="max_memories_per_user", user_id=user_id, active=cap)
    return Conflict(f"this user holds {cap} active memories (MAX_MEMORIES_PER_USER): delete some first",
                    code="memory_cap")


@patch("/memories/{memory_id:str}", summary="Edit: new content is re-embedded as a new version; pin; retype")
async def edit_memory(services: NamedDependency[Services], user_id: NamedDependency[str], memory_id: FromPath[str],
                      data: JSONBody[MemoryPatch]) -> dict[str, Any]:
    reason = reason_text(data.reason, "edited by the user")
    memory_type = check_type(data.memory_type) if data.memory_type is not None else None
    old = await _memory_or_404(services, user_id, memory_id)
    content = await clean_content(services, data.content) if data.content is not None else old["content"]
    memory_type = memory_type or old["memory_type"]
    current = memory_id
    if content != old["content"] or memory_type != old["memory_type"]:
        stated_at = old["stated_at"]
        embedding = await _embed(services, content, stated_at) if content != old["content"] else None
        async with services.pool.connection() as conn:
            try:
                new_id = await manage.edit_memory(
                    conn, user_id, memory_id, content=content, embedding=embedding, model=services.embedder.model,
                    attributes=_attributes(services, memory_type, stated_at), reason=reason,
                    max_versions=services.settings.formation.max_versions)
            except manage.EditConflict as exc:
                raise Conflict(str(exc), param="content") from exc
        if new_id is None:
            raise NotFound(f"no active memory {memory_id!r} for this user", param="id")
        current = new_id
    if data.pinned is not None:
        await _pin(services, user_id, current, data.pinned)
    return await _memory_or_404(services, user_id, current)


async def _pin(services: Services, user_id: str, memory_id: str, pinned: bool) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        if not await memories.set_pinned(conn, user_id, memory_id, pinned):
            raise NotFound(f"no active memory {memory_id!r} for this user", param="id")
        return await manage.get_memory(conn, user_id, memory_id) or {}


@post("/memories/{memory_id:str}/pin", status_code=200, summary="Pin: always injected, never expires")
async def pin_memory(services: NamedDependency[Services], user_id: NamedDependency[str],
                     memory_id: FromPath[str]) -> dict[str, Any]:
    return await _pin(services, user_id, memory_id, True)


@post("/memories/{memory_id:str}/unpin", status_code=200, summary="Unpin")
async def unpin_memory(services: NamedDependency[Services], user_id: NamedDependency[str],
                       memory_id: FromPath[str]) -> dict[str, Any]:
    return await _pin(services, user_id, memory_id, False)


@delete("/memories/{memory_id:str}", status_code=200, summary="Delete for this user (restorable from history)")
async def delete_memory(services: NamedDependency[Services], user_id: NamedDependency[str], memory_id: FromPath[str],
                        reason: FromQuery[str | None] = None) -> dict[str, Any]:
    reason = reason_text(reason, "deleted by the user")
    async with services.pool.connection() as conn:
        if not await manage.delete_memory(conn, user_id, memory_id, reason):
            raise NotFound(f"no active memory {memory_id!r} for this user", param="id")
    return {"id": memory_id, "deleted": True}


@get("/memories/{memory_id:str}/history", summary="Versions and audit rows (memory_updates) of a memory")
async def memory_history(services: NamedDependency[Services], user_id: NamedDependency[str],
                         memory_id: FromPath[str]) -> dict[str, Any]:
    found = await _memory_or_404(services, user_id, memory_id, active=False)
    async with services.pool.connection() as conn:
        return {"memory": found, **await manage.history(conn, user_id, memory_id)}


@post("/memories/{memory_id:str}/restore", status_code=200, summary="Make a retired version active again")
async def restore_memory(services: NamedDependency[Services], user_id: NamedDependency[str],
                         memory_id: FromPath[str]) -> dict[str, Any]:
    await _memory_or_404(services, user_id, memory_id, active=False)
    cap = services.settings.formation.max_memories
    async with services.pool.connection() as conn:
        try:
            replaced = await memories.restore_memory(conn, user_id=user_id, vector_id=memory_id, max_memories=cap)
        except memories.RestoreConflict as exc:
            raise Conflict(str(exc), param="id") from exc
        except memories.MemoryCapReached as exc:
            raise _at_cap(user_id, cap) from exc
    return {"memory": await _memory_or_404(services, user_id, memory_id), "replaced": replaced}


@get("/export", summary="Everything held for the user, as JSON or Markdown")
async def export_memories(services: NamedDependency[Services], user_id: NamedDependency[str],
                          format: Annotated[str, QueryParameter(pattern="^(json|markdown)$")] = "json",
                          ) -> Response[Any]:
    async with services.pool.connection() as conn:
        body = export_format.document(user_id, await manage.export(conn, user_id), datetime.now(UTC))
    if format == "markdown":
        return Response(export_format.markdown(body), media_type="text/markdown",  # Litestar adds "; charset=utf-8"
                        headers={"content-disposition": 'attachment; filename="memories.md"'})
    return Response(body, headers={"content-disposition": 'attachment; filename="memories.json"'})


@post("/erase", status_code=200, summary="GDPR erasure of every memory, audit row and job of the user")
async def erase_user(services: NamedDependency[Services], user_id: NamedDependency[str],
                     confirm: Annotated[str | None, QueryParameter(description="the user id, again")] = None
                     ) -> dict[str, Any]:
    async with services.pool.connection() as conn:
        if confirm != user_id:
            counts = await manage.counts(conn, user_id)
            raise BadRequest(f"this erases {counts['memories']} memories, {counts['updates']} history rows and "
                             f"{counts['jobs']} pending jobs of this user for good: repeat with ?confirm=<user id>",
                             param="confirm", code="confirmation_required")
        erased = await manage.erase_user(conn, user_id)
    return {"user": user_id, "erased": erased}


API = Router(
    path=API_PREFIX,
    route_handlers=[list_memories, search_memories, get_memory, create_memory, edit_memory, pin_memory,
                    unpin_memory, delete_memory, memory_history, restore_memory, export_memories, erase_user],
    guards=[require_any_key],
    dependencies={"user_id": Provide(acting_user)},
    before_request=checked_request,
    request_max_body_size=MAX_BODY_BYTES,
    tags=["memories"],
)
# The page loads nothing but its own files: no inline script, no frame around it, no guessed types.
BROWSER_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _browser_headers(response: Response[Any]) -> Response[Any]:
    response.headers.update(BROWSER_HEADERS)
    return response


def _sane_file_path(request: Request[Any, Any, Any]) -> None:
    """The page's files have short plain names: NUL or an over-long name would make the file system raise
    (a 500), so either is a 404 here."""
    path = request.url.path
    if "\x00" in path or len(path) > MAX_STATIC_PATH or any(len(part) > 64 for part in path.split("/")):
        raise NotFoundException("no such file")


BROWSER = create_static_files_router(path="/memories", directories=[BROWSER_DIR], html_mode=True,
                                     name="memory_browser", before_request=_sane_file_path,
                                     after_request=_browser_headers)
MANAGE_ROUTES = [API, BROWSER]
# The schema of every route as JSON at /api/v1/schema/openapi.json (no UI: it would load from a CDN).
OPENAPI_CONFIG = OpenAPIConfig(title="memory-proxy", version="1", path=f"{API_PREFIX}/schema",
                               render_plugins=[JsonRenderPlugin()])
