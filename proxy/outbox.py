"""Formation jobs on their way to the database, held in memory while it is down.

A chat turn's job is written before its request ends. When the database is down, slow or not migrated
yet, the job waits here instead of being lost, and a background loop writes the held jobs in arrival
order as soon as the database answers again (retrying every `RETRY_S`). The hold is bounded: past
`capacity` the oldest job is dropped and counted, so an outage cannot grow memory without end. What is
held dies with the process (a graceful stop makes one last attempt): the durable queue starts at the
database, and `memory_proxy_outbox_jobs` shows what is waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
from psycopg_pool import AsyncConnectionPool

from .observability import JOB_EVENTS, OUTBOX_JOBS, log
from .store import jobs

WRITE_TIMEOUT_S = 2.0  # one attempt; a request never waits longer than this for its job to be written
RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class PendingJob:
    user_id: str
    said_at: datetime
    payload: dict[str, Any]


class Outbox:
    def __init__(self, pool: AsyncConnectionPool, ready: asyncio.Event, capacity: int = 10_000) -> None:
        self.pool = pool
        self.ready = ready  # the database answered and is migrated: until then jobs are held at once
        self.capacity = capacity
        self._held: deque[PendingJob] = deque()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._held)

    async def put(self, job: PendingJob) -> None:
        """Write `job` now if the database takes it within WRITE_TIMEOUT_S, else hold it; never raises."""
        if self.ready.is_set() and not self._held and await self._write(job):
            return
        self._hold(job)  # behind older held jobs too, so that a user's turns keep their order

    async def run(self, stop: asyncio.Event) -> None:
        """Write held jobs whenever there are some and the schema is ready, until `stop`; then try once more."""
        while not stop.is_set():
            with anyio.move_on_after(RETRY_S):
                await self._wake.wait()
            self._wake.clear()
            if self.ready.is_set():
                await self.flush()
        if self._held:
            await self.flush()
            if self._held:
                log.warning("outbox_lost_on_stop", jobs=len(self._held))
                JOB_EVENTS.labels("dropped").inc(len(self._held))

    async def flush(self) -> None:
        while self._held and await self._write(self._held[0]):
            self._held.popleft()
        OUTBOX_JOBS.set(len(self._held))

    def _hold(self, job: PendingJob) -> None:
        if len(self._held) >= self.capacity:
            self._held.popleft()
            JOB_EVENTS.labels("dropped").inc()
            log.warning("outbox_full_dropped_oldest", capacity=self.capacity)
        self._held.append(job)
        JOB_EVENTS.labels("held").inc()
        OUTBOX_JOBS.set(len(self._held))

    async def _write(self, job: PendingJob) -> bool:
        # Shielded: a client disconnect must not abandon a write half-way; bounded by the timeout.
        with anyio.move_on_after(WRITE_TIMEOUT_S, shield=True) as scope:
            try:
                async with self.pool.connection() as conn:
                    await jobs.enqueue(conn, user_id=job.user_id, said_at=job.said_at, payload=job.payload)
            except Exception as exc:  # noqa: BLE001 - down, not migrated, full: held, retried, never raised
                log.warning("job_write_failed", error=f"{type(exc).__name__}: {exc}"[:300], held=len(self._held))
                return False
        if scope.cancelled_caught:
            log.warning("job_write_failed", error=f"timed out after {WRITE_TIMEOUT_S}s", held=len(self._held))
            return False
        JOB_EVENTS.labels("enqueued").inc()
        return True
