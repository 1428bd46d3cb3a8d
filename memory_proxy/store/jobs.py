"""The durable formation queue in PostgreSQL: enqueue, claim (FOR UPDATE SKIP LOCKED), finish, fail.

Hand-written rather than procrastinate/pgqueuer because a job's effects and its completion must commit
in *one* transaction with the memory writes (`complete` runs inside the caller's transaction and
only succeeds while this worker still holds the lease): a crash or a lost lease can then never apply
a job twice. A queue library runs jobs outside our transaction and would give at-least-once effects.

Row-level security (scope.py): `enqueue` runs in its user's scope (a batch of several users' jobs in
all users'); the queue's upkeep (claim, leases,
release) and the operator's views are cross-user and run with all users; `complete` and `fail` run in the
caller's scope, which the worker sets to the job's user.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from ..job_payload import FormationPayload
from .scope import in_all_users, in_user_scope

CHANNEL = "memory_jobs"  # NOTIFY channel: wakes idle workers as soon as a job is written


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    user_id: str
    payload: dict[str, Any]  # as stored, of any version: the worker reads it (FormationPayload.from_json), so
    # that a payload it cannot read fails its own job, not the claim of the others
    said_at: datetime
    attempts: int
    timeouts: int = 0  # of its memory-LLM calls so far (0019): its next calls are given more time


async def enqueue(conn: AsyncConnection[Any], *, user_id: str, payload: FormationPayload, said_at: datetime) -> int:
    return (await enqueue_many(conn, [(user_id, payload, said_at, None)]))[0]


async def enqueue_many(conn: AsyncConnection[Any],
                       batch: Sequence[tuple[str, FormationPayload, datetime, str | None]]) -> list[int]:
    """Write (user_id, payload, said_at, turn_id) jobs in one statement, announced once (PostgreSQL folds
    identical notifications): several users' turns that ended together (outbox.py's group commit) in every
    user's scope, one user's in theirs. A job whose turn id is already written is not written again (its
    first write committed but its answer was lost: memory_proxy/store/migrations/0010); the ids of the jobs written."""
    users = {user_id for user_id, _, _, _ in batch}
    async with in_user_scope(conn, users.pop()) if len(users) == 1 else in_all_users(conn):
        cur = await conn.execute(
            "WITH job AS (INSERT INTO memory_jobs (user_id, payload, said_at, turn_id)"
            " SELECT * FROM unnest(%s::text[], %s::jsonb[], %s::timestamptz[], %s::uuid[])"
            " ON CONFLICT (turn_id) DO NOTHING RETURNING id)"
            " SELECT id, pg_notify(%s, '') FROM job",
            [[u for u, _, _, _ in batch], [Jsonb(p.to_json()) for _, p, _, _ in batch], [t for _, _, t, _ in batch],
             [turn for _, _, _, turn in batch], CHANNEL],
        )
    return [int(row[0]) for row in await cur.fetchall()]


async def announced(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """One item per job written anywhere from now on (LISTEN on CHANNEL; `conn` is given over to it)."""
    await conn.execute(f"LISTEN {CHANNEL}")
    async for _ in conn.notifies():
        yield None


async def claim(conn: AsyncConnection[Any], *, worker_id: str, limit: int, lease_s: float) -> list[Job]:
    """Take up to `limit` ready jobs; first re-queue running jobs whose lease expired (a dead worker's).
    The attempt is counted at claim time, so a job that kills its worker still ends up dead.
    Fair and in order: only each user's oldest queued job can be taken, and none of a user who has one
    running, so one user's thousand turns take one slot while the other users' jobs go on beside them,
    and a user's turns are formed in the order they were said (a retried job holds back the later ones).
    Heads go oldest `run_after` first, and `complete` moves a user's next head to the back: when users with
    backlogs hold every slot, a freed slot goes round to whoever waited longest.
    Across users (one transaction, one round trip); the worker then handles each job in its user's scope."""
    async with in_all_users(conn):
        await conn.execute(
            "UPDATE memory_jobs SET status = 'queued', locked_by = NULL, locked_until = NULL,"
            " last_error = 'lease expired: worker died or stalled'"
            " WHERE status = 'running' AND locked_until < now()")
        cur = await conn.execute(
            """
            WITH heads AS (
                SELECT DISTINCT ON (user_id) id, user_id, run_after FROM memory_jobs
                WHERE status = 'queued'
                ORDER BY user_id, id
            ), next AS (
                SELECT j.id FROM memory_jobs j JOIN heads h ON h.id = j.id
                WHERE j.status = 'queued' AND h.run_after <= now()
                  AND NOT EXISTS (SELECT 1 FROM memory_jobs r WHERE r.user_id = h.user_id AND r.status = 'running')
                ORDER BY h.run_after, h.id
                LIMIT %(limit)s
                FOR UPDATE OF j SKIP LOCKED
            )
            UPDATE memory_jobs j
            SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
                locked_until = now() + make_interval(secs => %(lease)s)
            FROM next WHERE j.id = next.id
            RETURNING j.id, j.user_id, j.payload, j.said_at, j.attempts, j.timeouts
            """,
            {"limit": limit, "worker": worker_id, "lease": lease_s},
        )
    return [Job(*row) for row in await cur.fetchall()]


async def extend_lease(conn: AsyncConnection[Any], *, job_ids: list[int], worker_id: str, lease_s: float) -> None:
    async with in_all_users(conn):
        await conn.execute(
            "UPDATE memory_jobs SET locked_until = now() + make_interval(secs => %s)"
            " WHERE id = ANY(%s) AND status = 'running' AND locked_by = %s", [lease_s, job_ids, worker_id])


async def hold(conn: AsyncConnection[Any], *, job_id: int, worker_id: str) -> bool:
    """Lock the job's row inside the caller's transaction, before it writes anything; False if this worker no
    longer holds the job. Formation's write and an erasure (store/manage.py, which deletes the user's jobs
    first) then lock in one order, job row first: the erasure waits for the write and erases what it wrote, or
    the write finds its job erased, where the other order (memories, then the job) deadlocked with it."""
    cur = await conn.execute("SELECT 1 FROM memory_jobs WHERE id = %s AND status = 'running' AND locked_by = %s"
                             " FOR UPDATE", [job_id, worker_id])
    return await cur.fetchone() is not None


async def complete(conn: AsyncConnection[Any], *, job_id: int, worker_id: str) -> bool:
    """Mark done inside the caller's transaction (scoped to the job's user); False if this worker no longer
    holds the job. The chat text in the payload is dropped: only the memories formed from it are kept."""
    cur = await conn.execute(
        "UPDATE memory_jobs SET status = 'done', finished_at = now(), payload = '{}'::jsonb,"
        " locked_by = NULL, locked_until = NULL, last_error = NULL"
        " WHERE id = %s AND status = 'running' AND locked_by = %s RETURNING user_id", [job_id, worker_id])
    row = await cur.fetchone()
    if row is None:
        return False
    # Round robin: the user's next job queues behind every job waiting now. Claims take the heads with the
    # oldest run_after, so without this a user with a backlog would win every slot it frees against a newer
    # user's job whenever as many users with backlogs as slots hold them all (benchmarks.flood measures it).
    # Skipped when another transaction holds that row: an erasure deleting the user's jobs holds it while it
    # waits for this one (`hold`), and waiting for it here was a deadlock.
    await conn.execute(
        "UPDATE memory_jobs SET run_after = greatest(run_after, clock_timestamp())"
        " WHERE id = (SELECT id FROM memory_jobs WHERE id = (SELECT min(id) FROM memory_jobs"
        " WHERE user_id = %s AND status = 'queued') FOR UPDATE SKIP LOCKED)", [row[0]])
    return True


async def fail(conn: AsyncConnection[Any], *, job_id: int, worker_id: str, error: str,
               max_attempts: int, backoff_s: float, busy_max_s: float | None = None,
               timed_out: bool = False) -> str | None:
    """Back to the queue after `backoff_s`, or dead after `max_attempts`; returns the new status.
    With `busy_max_s` (the model server was busy or down: waiting, not failure), a job written less than that long ago
    gets its attempt back and waits a quarter of its age (10 s to 60 s) instead. `timed_out` counts a memory-LLM
    timeout in the job's `timeouts`. In the caller's scope (the job's user), like `complete`."""
    cur = await conn.execute(
        "WITH j AS (SELECT id, %(busy)s::float8 IS NOT NULL"
        "   AND created_at > now() - make_interval(secs => coalesce(%(busy)s::float8, 0)) AS busy"
        "   FROM memory_jobs WHERE id = %(id)s)"
        " UPDATE memory_jobs m SET"
        " status = CASE WHEN NOT j.busy AND m.attempts >= %(max)s THEN 'dead' ELSE 'queued' END,"
        " attempts = m.attempts - CASE WHEN j.busy THEN 1 ELSE 0 END,"
        " timeouts = m.timeouts + CASE WHEN %(timed_out)s THEN 1 ELSE 0 END,"
        " run_after = now() + make_interval(secs => CASE WHEN j.busy"
        "   THEN least(greatest(extract(epoch FROM now() - m.created_at) / 4, 10), 60) ELSE %(backoff)s END),"
        " last_error = left(%(error)s, 2000), locked_by = NULL, locked_until = NULL"
        " FROM j WHERE m.id = j.id AND m.status = 'running' AND m.locked_by = %(worker)s RETURNING m.status",
        {"busy": busy_max_s, "id": job_id, "max": max_attempts, "backoff": backoff_s, "error": error,
         "worker": worker_id, "timed_out": timed_out})
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def release(conn: AsyncConnection[Any], *, worker_id: str) -> int:
    """Give this worker's running jobs back (graceful shutdown); the attempt is not counted."""
    async with in_all_users(conn):
        cur = await conn.execute(
            "UPDATE memory_jobs SET status = 'queued', attempts = greatest(attempts - 1, 0),"
            " locked_by = NULL, locked_until = NULL WHERE status = 'running' AND locked_by = %s", [worker_id])
    return cur.rowcount


async def retry_dead(conn: AsyncConnection[Any], job_id: int | None = None) -> int:
    """Dead jobs (one, or all) back to the queue with a fresh attempt budget (operator: all users)."""
    async with in_all_users(conn):
        cur = await conn.execute(
            "UPDATE memory_jobs SET status = 'queued', attempts = 0, run_after = now()"
            " WHERE status = 'dead' AND (%s::bigint IS NULL OR id = %s)", [job_id, job_id])
    return cur.rowcount


async def status_counts(conn: AsyncConnection[Any]) -> dict[str, int]:
    """Jobs by status, all users (gauges, operator)."""
    async with in_all_users(conn):
        cur = await conn.execute("SELECT status, count(*) FROM memory_jobs GROUP BY status")
    counts = {"queued": 0, "running": 0, "done": 0, "dead": 0}
    counts.update({row[0]: int(row[1]) for row in await cur.fetchall()})
    return counts


async def list_jobs(conn: AsyncConnection[Any], *, status: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest jobs of all users (operator)."""
    async with in_all_users(conn):
        cur = await conn.execute(
            "SELECT id, user_id, status, attempts, run_after, last_error, created_at, finished_at FROM memory_jobs"
            " WHERE %s::text IS NULL OR status = %s ORDER BY id DESC LIMIT %s", [status, status, limit])
    names = [c.name for c in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def purge(conn: AsyncConnection[Any], *, done_days: float, dead_days: float) -> dict[str, int]:
    """JOB_RETENTION_DAYS / DEAD_JOB_RETENTION_DAYS: done jobs (their text is already gone) and dead jobs
    (which still hold the turn's text, for a retry) finished or failed longer ago than that."""
    async with in_all_users(conn):
        done = await conn.execute(
            "DELETE FROM memory_jobs WHERE status = 'done' AND finished_at < now() - %s * interval '1 day'",
            [done_days])
        dead = await conn.execute(
            "DELETE FROM memory_jobs WHERE status = 'dead' AND coalesce(finished_at, run_after, created_at)"
            " < now() - %s * interval '1 day'", [dead_days])
    return {"jobs_done_purged": done.rowcount, "jobs_dead_purged": dead.rowcount}
