"""Teams and their members (memory_proxy/store/migrations/0012, docs/TEAMS.md).

A team is a set of users who share a memory scope; each member is a `member` (reads the team's memories) or
an `editor` (may also change and delete them). These tables are not under row-level security: they say
who belongs where, and the memory tables' policies read them. Operators change them (the admin API and the
CLI), and so does each chat turn that carries the user's OpenWebUI groups (`mirror_groups`, for the mirrored
memberships only); a user reads only the teams they belong to (`teams_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.errors import UniqueViolation

Role = Literal["member", "editor"]
ROLES: tuple[Role, ...] = ("member", "editor")
# The same rule as the table's CHECK: a short id that is safe in a URL path, a log line and a scope name.
TEAM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_NAME = 100
MAX_ABOUT = 500
PRINCIPAL_PREFIX = "team:"


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds memory rows, as the memory tables' `user_id` column names them: a user by their id, a team by its
    principal "team:<id>" (migrations/0013: the team's members see its rows). No user id may read as a principal
    (`reserved`, refused where an id comes in: http/auth.py)."""

    principal: str

    @classmethod
    def team(cls, team_id: str) -> Holder:
        return cls(PRINCIPAL_PREFIX + team_id)

    @classmethod
    def of_memory(cls, user_id: str, team_id: str) -> Holder:
        """Who holds a memory `user_id` was shown: its team (`Memory.team`), or the user when that is ""."""
        return cls.team(team_id) if team_id else cls(user_id)

    @property
    def is_team(self) -> bool:
        return self.principal.startswith(PRINCIPAL_PREFIX)

    @property
    def team_id(self) -> str:
        """The team's id; "" for a user."""
        return self.principal.removeprefix(PRINCIPAL_PREFIX) if self.is_team else ""

    @staticmethod
    def reserved(user_id: str) -> bool:
        """Whether a user id would read as a team's principal, in any case."""
        return user_id[:len(PRINCIPAL_PREFIX)].lower() == PRINCIPAL_PREFIX


class TeamExists(Exception):
    """A team with this id already exists."""


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    name: str
    about: str
    created_at: datetime
    member_count: int = 0
    mirrored: bool = False  # made by the group mirror (an OpenWebUI group), not by an operator


@dataclass(frozen=True, slots=True)
class TeamRef:
    """A team as a memory shows it: whose memory (the id) and what to call it (the name)."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Member:
    user_id: str
    role: Role
    added_at: datetime


@dataclass(frozen=True, slots=True)
class Membership:
    """One of a user's teams, with the user's role in it."""

    team: Team
    role: Role


_TEAM_COLUMNS = ("t.id, t.name, t.about, t.created_at,"
                 " (SELECT count(*) FROM team_members m WHERE m.team_id = t.id), t.mirrored")


def _team(row: tuple[Any, ...]) -> Team:
    return Team(id=row[0], name=row[1], about=row[2], created_at=row[3], member_count=int(row[4]), mirrored=row[5])


async def create_team(conn: AsyncConnection[Any], team_id: str, name: str, about: str = "") -> Team:
    """A new team without members; raises TeamExists when the id is taken."""
    try:
        cur = await conn.execute("INSERT INTO teams (id, name, about) VALUES (%s, %s, %s)"
                                 " RETURNING id, name, about, created_at, 0, mirrored", [team_id, name, about])
    except UniqueViolation as exc:
        raise TeamExists(team_id) from exc
    row = await cur.fetchone()
    assert row is not None  # INSERT … RETURNING of one row
    return _team(row)


async def update_team(conn: AsyncConnection[Any], team_id: str, *, name: str | None = None,
                      about: str | None = None) -> Team | None:
    """Rename a team or change what it is about; None when there is no such team."""
    cur = await conn.execute("UPDATE teams SET name = coalesce(%s, name), about = coalesce(%s, about)"
                             " WHERE id = %s", [name, about, team_id])
    return await get_team(conn, team_id) if cur.rowcount else None


async def delete_team(conn: AsyncConnection[Any], team_id: str) -> bool:
    """Delete a team and every membership of it; False when there is no such team."""
    cur = await conn.execute("DELETE FROM teams WHERE id = %s", [team_id])
    return cur.rowcount == 1


async def get_team(conn: AsyncConnection[Any], team_id: str) -> Team | None:
    cur = await conn.execute(f"SELECT {_TEAM_COLUMNS} FROM teams t WHERE t.id = %s", [team_id])
    row = await cur.fetchone()
    return _team(row) if row else None


async def list_teams(conn: AsyncConnection[Any], *, after: str = "", limit: int | None = None) -> list[Team]:
    """The teams by id (an operator's listing): those after the id `after`, at most `limit`."""
    cur = await conn.execute(f"SELECT {_TEAM_COLUMNS} FROM teams t WHERE t.id > %s ORDER BY t.id LIMIT %s",
                             [after, limit])
    return [_team(row) for row in await cur.fetchall()]


MAX_TEAMS_READ = 20  # of a user's teams, a chat turn and a formation job read the newest memberships' only:
# each team read costs a turn one SQL statement or one in-process search (~0.4 ms at 10,000 memories, on the event
# loop, where other users' turns wait), and the extraction call's prompt a line


async def teams_of(conn: AsyncConnection[Any], user_id: str, *, newest: int | None = None) -> list[Membership]:
    """The teams `user_id` belongs to, by id, with the user's role in each; with `newest`, that many of the
    memberships added last, newest first."""
    order, params = ("t.id", [user_id]) if newest is None else ("m.added_at DESC, t.id LIMIT %s", [user_id, newest])
    cur = await conn.execute(f"SELECT {_TEAM_COLUMNS}, m.role FROM team_members m JOIN teams t ON t.id = m.team_id"
                             f" WHERE m.user_id = %s ORDER BY {order}", params)
    return [Membership(team=_team(row), role=row[6]) for row in await cur.fetchall()]


async def role_of(conn: AsyncConnection[Any], team_id: str, user_id: str) -> Role | None:
    """`user_id`'s role in the team now, or None when they are not a member (or there is no such team)."""
    cur = await conn.execute("SELECT role FROM team_members WHERE team_id = %s AND user_id = %s", [team_id, user_id])
    row = await cur.fetchone()
    return row[0] if row else None


async def members(conn: AsyncConnection[Any], team_id: str) -> list[Member]:
    """The members of a team, by user id."""
    cur = await conn.execute("SELECT user_id, role, added_at FROM team_members WHERE team_id = %s ORDER BY user_id",
                             [team_id])
    return [Member(user_id=row[0], role=row[1], added_at=row[2]) for row in await cur.fetchall()]


async def set_member(conn: AsyncConnection[Any], team_id: str, user_id: str, role: Role = "member") -> bool:
    """Add `user_id` to the team with `role`, or change the role of a member; False when there is no such
    team."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    cur = await conn.execute(
        "INSERT INTO team_members (team_id, user_id, role) SELECT id, %s, %s FROM teams WHERE id = %s"
        " ON CONFLICT (team_id, user_id) DO UPDATE SET role = excluded.role", [user_id, role, team_id])
    return cur.rowcount == 1


async def remove_member(conn: AsyncConnection[Any], team_id: str, user_id: str) -> bool:
    """Remove a member at once (nothing caches membership); False when they were not a member."""
    cur = await conn.execute("DELETE FROM team_members WHERE team_id = %s AND user_id = %s", [team_id, user_id])
    return cur.rowcount == 1


MAX_MIRRORED_GROUPS = 100  # a user's OpenWebUI groups mirrored at once, at most

_MIRROR = """
WITH wanted AS (SELECT DISTINCT unnest(%(groups)s::text[]) AS id),
room AS (SELECT greatest(%(cap)s - (SELECT count(*) FROM teams WHERE mirrored), 0) AS n),
new_ AS (SELECT w.id FROM wanted w WHERE NOT EXISTS (SELECT 1 FROM teams t WHERE t.id = w.id) ORDER BY w.id
         LIMIT (SELECT n FROM room)),
made AS (INSERT INTO teams (id, name, mirrored) SELECT id, id, true FROM new_ ON CONFLICT (id) DO NOTHING
         RETURNING id),
theirs AS (SELECT t.id FROM teams t JOIN wanted w ON w.id = t.id WHERE t.mirrored UNION SELECT id FROM made),
joined AS (INSERT INTO team_members (team_id, user_id, mirrored) SELECT id, %(user)s, true FROM theirs
           ON CONFLICT (team_id, user_id) DO NOTHING RETURNING team_id),
left_ AS (DELETE FROM team_members WHERE user_id = %(user)s AND mirrored AND team_id <> ALL(%(groups)s::text[])
          RETURNING team_id)
SELECT (SELECT count(*) FROM joined), (SELECT count(*) FROM left_), (SELECT count(*) FROM made),
       (SELECT count(*) FROM wanted) - (SELECT count(*) FROM theirs)
"""


@dataclass(frozen=True, slots=True)
class Mirrored:
    """What one mirror of a user's groups did: memberships added and removed, teams made, and the groups not
    mirrored (an operator's team of that id, or past the cap on teams the mirror makes)."""

    joined: int
    left: int
    made: int
    skipped: int


async def mirror_groups(conn: AsyncConnection[Any], user_id: str, groups: list[str], *, max_teams: int) -> Mirrored:
    """Make `user_id` a member of exactly `groups` among the mirrored teams, each group a team the mirror makes
    (with its id as its name) on first sight while fewer than `max_teams` mirrored teams exist. An operator's
    team is never joined, whatever its id, and an operator's membership is never removed. One statement."""
    cur = await conn.execute(_MIRROR, {"groups": groups, "user": user_id, "cap": max_teams})
    row = await cur.fetchone()
    assert row is not None
    return Mirrored(*(int(value) for value in row))
