"""The limits an operator set, and the usage they are checked against, in PostgreSQL (migration 0018): one
`limits_admit` call admits a request of several subjects at once, exactly, whichever replica asks."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from psycopg import AsyncConnection

KINDS = ("key", "user", "model")
# The statement's transaction commits without waiting for its WAL to reach the disk (PostgreSQL's asynchronous
# commit; set for this transaction alone). Every request of a subject updates the same usage rows, and each
# holds their row locks until its commit: waiting for the flush there put every request in line behind the
# disk (16 at once: 10.4 ms p50 per admission on this machine, 4.6 ms with it). What a database crash can
# lose is the last fraction of a second of counts and leases, which the limits tolerate.
UNFLUSHED = "set_config('synchronous_commit', 'off', true)"
EVERY = "*"  # a row for every subject of its kind that has none of its own


@dataclass(frozen=True, slots=True)
class Limit:
    """The limits of one subject (None: no limit of that kind)."""

    kind: str
    subject: str
    rpm: int | None = None
    tpm: int | None = None
    concurrent: int | None = None
    daily_tokens: int | None = None

    @property
    def limits_anything(self) -> bool:
        return any(v is not None for v in (self.rpm, self.tpm, self.concurrent, self.daily_tokens))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not admitted: the first limit it would have passed, and how long until it may not."""

    kind: str
    subject: str
    which: str  # rpm, tpm, concurrent or daily_tokens
    retry_after: float  # seconds


@dataclass(frozen=True, slots=True)
class Usage:
    kind: str
    subject: str
    requests_minute: float  # the sliding minute's estimate
    tokens_minute: float
    requests_today: int  # this UTC day
    tokens_today: int
    in_flight: int  # places at once held: requests in flight, and the places a replica reserved (limits/reserve.py)


@dataclass(frozen=True, slots=True)
class Reserving:
    """An admission's ask for a reserve (limits/reserve.py): `spare` requests more, counted now, their places at
    once in the block lease `block`, of which this process holds `in_use` per subject already."""

    spare: int
    block: uuid.UUID
    in_use: Sequence[int]


@dataclass(frozen=True, slots=True)
class Admitted:
    spare: int = 0  # requests reserved beside this one (0: none; it holds a lease of its own)
    step_left: float = 0.0  # seconds they may be used in


async def admit(conn: AsyncConnection[Any], limits: Sequence[Limit], request: uuid.UUID, lease_s: int,
                reserving: Reserving | None = None) -> Refusal | Admitted:
    """Count the request against every one of `limits`' subjects, or against none: the first limit it would pass.
    Far from every limit it is admitted side by side with the subjects' other requests (and with a reserve, when
    asked); a subject found near one ('near', migration 0021) has it admitted again, in line with them, which is
    exact."""
    row = await _admit(conn, limits, request, lease_s, reserving, exclusive=False)
    if row is not None and not row[0] and row[3] == "near":
        row = await _admit(conn, limits, request, lease_s, None, exclusive=True)
    if row is None:
        return Admitted()
    if row[0]:
        return Admitted(int(row[5]), float(row[6]))
    return Refusal(row[1], row[2], row[3], float(row[4]))


async def _admit(conn: AsyncConnection[Any], limits: Sequence[Limit], request: uuid.UUID, lease_s: int,
                 reserving: Reserving | None, *, exclusive: bool) -> tuple[Any, ...] | None:
    cur = await conn.execute(
        f"SELECT admitted, kind, subject, which, retry_after, spare, step_left, {UNFLUSHED} "
        "FROM limits_admit(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [[lim.kind for lim in limits], [lim.subject for lim in limits], [lim.rpm for lim in limits],
         [lim.tpm for lim in limits], [lim.concurrent for lim in limits], [lim.daily_tokens for lim in limits],
         request, lease_s, exclusive, reserving.spare if reserving else 0, reserving.block if reserving else None,
         list(reserving.in_use) if reserving else None])
    return await cur.fetchone()


async def spent(conn: AsyncConnection[Any], subjects: Sequence[tuple[str, str]], request: uuid.UUID | None,
                tokens: int) -> None:
    """An admitted request's tokens counted, its leases given back (or a user's memory work's tokens: no request)."""
    await conn.execute(f"SELECT limits_spent(%s, %s, %s, %s), {UNFLUSHED}",
                       [[k for k, _ in subjects], [s for _, s in subjects], request, tokens])


async def settle(conn: AsyncConnection[Any], kinds: list[str], subjects: list[str], tokens: list[int],
                 block: uuid.UUID, places: list[int], lease_s: int) -> None:
    """A process's reserves settled (limits/reserve.py): each subject's tokens counted, its block's places set."""
    await conn.execute(f"SELECT limits_settle(%s, %s, %s, %s, %s, %s), {UNFLUSHED}",
                       [kinds, subjects, tokens, block, places, lease_s])


async def set_limit(conn: AsyncConnection[Any], limit: Limit) -> None:
    """Set one subject's limits (all None: its row removed, the defaults apply again)."""
    if not limit.limits_anything:
        await delete_limit(conn, limit.kind, limit.subject)
        return
    await conn.execute(
        "INSERT INTO limits (kind, subject, rpm, tpm, concurrent, daily_tokens) VALUES (%s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (kind, subject) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm, "
        "concurrent = excluded.concurrent, daily_tokens = excluded.daily_tokens, updated_at = now()",
        [limit.kind, limit.subject, limit.rpm, limit.tpm, limit.concurrent, limit.daily_tokens])


async def delete_limit(conn: AsyncConnection[Any], kind: str, subject: str) -> bool:
    cur = await conn.execute("DELETE FROM limits WHERE kind = %s AND subject = %s", [kind, subject])
    return cur.rowcount > 0


async def list_limits(conn: AsyncConnection[Any]) -> list[Limit]:
    cur = await conn.execute("SELECT kind, subject, rpm, tpm, concurrent, daily_tokens FROM limits "
                             "ORDER BY kind, subject")
    return [Limit(*row) for row in await cur.fetchall()]


async def usage(conn: AsyncConnection[Any], kind: str | None = None, subject: str | None = None,
                limit: int = 100) -> list[Usage]:
    """Each subject's use (of one kind, or one subject), busiest today first."""
    cur = await conn.execute("""
        SELECT u.kind, u.subject,
               limits_rate(u.kind, u.subject, clock_timestamp(), false), limits_rate(u.kind, u.subject, clock_timestamp(), true),
               u.requests, u.tokens,
               (SELECT coalesce(sum(l.places), 0) FROM limit_leases l WHERE l.kind = u.kind AND l.subject = u.subject
                                                      AND l.expires_at > clock_timestamp())
          FROM limit_usage u
         WHERE u.span = 'd' AND u.start = limits_day(clock_timestamp())
           AND (%(kind)s::text IS NULL OR u.kind = %(kind)s) AND (%(subject)s::text IS NULL OR u.subject = %(subject)s)
         ORDER BY u.tokens DESC, u.requests DESC, u.kind, u.subject LIMIT %(limit)s""",
                             {"kind": kind, "subject": subject, "limit": limit})
    return [Usage(r[0], r[1], float(r[2]), float(r[3]), int(r[4]), int(r[5]), int(r[6])) for r in await cur.fetchall()]


async def forget_old_usage(conn: AsyncConnection[Any], days: int = 2) -> int:
    """Usage windows older than `days` (maintenance): only the minute before this one and today are ever read."""
    cur = await conn.execute("DELETE FROM limit_usage WHERE start < now() - make_interval(days => %s)", [days])
    await conn.execute("DELETE FROM limit_leases WHERE expires_at < now()")
    return cur.rowcount
