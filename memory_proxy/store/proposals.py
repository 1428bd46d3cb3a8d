"""A team's pending facts (TEAM_FACTS=review, memory_proxy/store/migrations/0015, docs/TEAMS.md): what formation would have
written to the team, kept apart until an editor accepts it (applied as formation would have: added, or
replacing the team's memory the relate step named, if it is still active) or rejects it (deleted).

Every function runs in the caller's row-level security scope (a member's, or a team's for an operator): a
proposal of a team the scope's user is not in does not exist for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from ..records import FactAttributes
from . import memories
from .scope import in_user_scope
from .search import as_vector

_COLUMNS = "id, content, memory_type, action, replaces, reason, proposed_by, stated_at, expires_at, created_at"


@dataclass(frozen=True, slots=True)
class Proposal:
    id: int
    content: str
    memory_type: str
    action: str  # add, replace or refine (then `replaces` is the team memory it changes)
    replaces: str | None
    reason: str
    proposed_by: str
    stated_at: datetime
    expires_at: datetime | None
    created_at: datetime


async def propose(conn: AsyncConnection[Any], *, holder: str, proposed_by: str, content: str,
                  embedding: Sequence[float], model: str, action: str, replaces: str | None, reason: str,
                  stated_at: datetime, attributes: FactAttributes) -> int:
    """Keep a team's fact apart for its editors (in the proposer's scope: a member's write); its id."""
    async with in_user_scope(conn, proposed_by):
        cur = await conn.execute(
            "INSERT INTO team_proposals (user_id, proposed_by, content, memory_type, embedding, embedding_model,"
            " action, replaces, reason, stated_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING id", [holder, proposed_by, content, attributes.memory_type, as_vector(embedding), model,
                              action, replaces, reason, stated_at, attributes.expires_at])
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def pending(conn: AsyncConnection[Any], holder: str) -> list[Proposal]:
    """The team's pending proposals, oldest first."""
    async with in_user_scope(conn, holder):
        cur = await conn.execute(f"SELECT {_COLUMNS} FROM team_proposals WHERE user_id = %s ORDER BY id", [holder])
        rows = await cur.fetchall()
    return [Proposal(*row) for row in rows]


async def reject(conn: AsyncConnection[Any], holder: str, proposal_id: int) -> bool:
    """Delete a pending proposal; False when the team has none by that id."""
    async with in_user_scope(conn, holder):
        cur = await conn.execute("DELETE FROM team_proposals WHERE user_id = %s AND id = %s", [holder, proposal_id])
    return cur.rowcount == 1


async def accept(conn: AsyncConnection[Any], holder: str, proposal_id: int, reason: str) -> str | None:
    """Apply a pending proposal to the team's memories and delete it, in one transaction: the fact is added, and
    the memory it replaces or refines is retired (audited as that action) if it is still active and older;
    the id of the team's memory that holds it now; None when the team has no such proposal."""
    async with in_user_scope(conn, holder):
        cur = await conn.execute(
            f"DELETE FROM team_proposals WHERE user_id = %s AND id = %s RETURNING {_COLUMNS}, embedding,"
            " embedding_model", [holder, proposal_id])
        row = await cur.fetchone()
        if row is None:
            return None
        proposal, (embedding, model) = Proposal(*row[:10]), row[10:]
        target = await memories.lock_active_link(conn, holder, proposal.replaces) if proposal.replaces else None
        new_id = await memories.add_memory(
            conn, user_id=holder, content=proposal.content, embedding=embedding.to_numpy(), model=model,
            stated_at=proposal.stated_at,
            attributes=FactAttributes(memory_type=proposal.memory_type, expires_at=proposal.expires_at))
        new_id = new_id or await memories.find_same_text(conn, holder, proposal.content)
        if new_id:  # taught by the member whose words it came from; accepted by the acting editor (the audit)
            await conn.execute("UPDATE users_vectors SET author = %s WHERE user_id = %s AND vector_id = %s",
                               [proposal.proposed_by, holder, new_id])
        if new_id and target is not None and target.stated_at < proposal.stated_at and proposal.replaces != new_id:
            await memories.supersede_memory(conn, user_id=holder, old_id=proposal.replaces or "", new_id=new_id,
                                            reason=f"{reason}: {proposal.reason}", action=proposal.action)
    return new_id
