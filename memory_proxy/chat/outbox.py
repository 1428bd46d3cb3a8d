"""Formation jobs on their way to the database: written at once, or held (and spooled to disk) until it answers.

A chat turn's job is written before its request ends, together with the jobs of the turns that ended
while the previous write was in flight (group commit: one transaction for all). When the database is
down, slow or not migrated yet, the job is held instead of being lost: kept in order in memory and
spooled as one small file in `<data dir>/outbox/` (written and fsynced before the request ends), so
that it survives a restart of the proxy too. A background loop writes the held jobs in arrival order as
soon as the database answers again (retrying every `RETRY_S`), deleting each spool file once its job is
in the database. A new start takes over the spool files a previous run left. Each job carries the id
of its turn, so a write that committed but whose answer was lost is not made twice (memory_proxy/store/migrations/0010).

A job the database refuses for what it is, not for being down (a value PostgreSQL cannot store, such
as NUL in a user id), is set aside: moved to `<data dir>/outbox/rejected/`, logged and counted
(`jobs_total{event="rejected"}`), and the jobs behind it go on; rejected files are deleted after
DEAD_JOB_RETENTION_DAYS. The hold is bounded: past `capacity` the oldest job is dropped and counted,
so an outage cannot grow without end.

Assumes one process per data dir (each replica has its own), as the embedded database does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..job_payload import FormationPayload
from ..observability import JOB_EVENTS, OUTBOX_JOBS, log
from ..private_files import create_private, private_dir
from ..store import jobs

WRITE_TIMEOUT_S = 2.0  # one attempt; a request waits at most two (the write in flight, then its own)
RETRY_S = 1.0
FLUSH_BATCH = 100  # held jobs written per transaction once the database answers
# What a refused job looks like: the value, not the connection, is at fault. Everything else (connection
# lost, timeout, pool exhausted, schema not there yet) is the database being unavailable: hold and retry.
_REFUSED = (psycopg.DataError, psycopg.IntegrityError, ValueError, TypeError, UnicodeError)


@dataclass(frozen=True, slots=True)
class PendingJob:
    user_id: str
    said_at: datetime
    payload: FormationPayload
    turn_id: str | None = field(default_factory=lambda: str(uuid.uuid4()))  # written once, however often sent

    def to_json(self) -> str:
        return json.dumps({"user_id": self.user_id, "said_at": self.said_at.isoformat(),
                           "payload": self.payload.to_json(), "turn_id": self.turn_id})

    @classmethod
    def from_json(cls, text: str) -> PendingJob:
        """A spool file, whichever payload version it holds (job_payload.py)."""
        data = json.loads(text)
        return cls(data["user_id"], datetime.fromisoformat(data["said_at"]),
                   FormationPayload.from_json(data["payload"]), data.get("turn_id"))


class Written(Enum):
    OK = "ok"
    UNAVAILABLE = "unavailable"  # the database is down, slow or not ready: hold and retry
    REFUSED = "refused"  # the database will never take this job: set it aside


@dataclass(slots=True)
class _Held:
    job: PendingJob
    spooled: Path | None


class Outbox:
    def __init__(self, pool: AsyncConnectionPool, ready: asyncio.Event, spool_dir: Path | None = None,
                 capacity: int = 10_000, rejected_days: float = 30.0) -> None:
        self.pool = pool
        self.ready = ready  # the database answered and is migrated: until then jobs are held at once
        self.spool_dir = spool_dir
        self.capacity = capacity
        self._held: deque[_Held] = deque()
        self._waiting: list[tuple[PendingJob, asyncio.Future[Written]]] = []  # for the write in flight to end
        self._writer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        if spool_dir:
            self._take_over_spool(spool_dir)
            self._forget_rejected(spool_dir / "rejected", rejected_days)

    def __len__(self) -> int:
        return len(self._held)

    async def put(self, job: PendingJob, *, hold: bool = False) -> None:
        """Write `job` now if the database takes it within WRITE_TIMEOUT_S, else hold it (at once with `hold`:
        the caller knows the database is failing); never raises."""
        if self.ready.is_set() and not self._held and not hold:
            written = await self._write_together(job)
            if written is Written.OK:
                return
            if written is Written.REFUSED:
                self._reject(job, None)
                return
        await self._hold(job)  # behind older held jobs too, so that a user's turns keep their order

    async def _write_together(self, job: PendingJob) -> Written:
        """`_write`, shared (group commit): the jobs of turns that end while a write is in flight go together
        in the next one, one transaction for all (a transaction per turn costs every turn CPU under load:
        docs/BENCHMARKS.md#relay-overhead). A refused batch is written again job by job, so that only the refused
        one is set aside."""
        written: asyncio.Future[Written] = asyncio.get_running_loop().create_future()
        self._waiting.append((job, written))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_waiting())
        return await asyncio.shield(written)

    async def _write_waiting(self) -> None:
        batch: list[tuple[PendingJob, asyncio.Future[Written]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                together = await self._write([job for job, _ in batch])
                for job, written in batch:
                    written.set_result(await self._write([job]) if together is Written.REFUSED and len(batch) > 1
                                       else together)
                batch = []
        finally:
            self._writer = None
            for _, written in [*batch, *self._waiting]:  # only if this task was cancelled: the turns hold
                if not written.done():                   # their jobs instead of waiting forever
                    written.set_result(Written.UNAVAILABLE)

    async def run(self, stop: asyncio.Event) -> None:
        """Write held jobs whenever there are some and the schema is ready, until `stop`; then try once more.
        What is still held at the end stays spooled for the next start."""
        stopping = asyncio.ensure_future(stop.wait())
        stopping.add_done_callback(lambda _: self._wake.set())  # a stop ends the wait at once, not at the tick
        try:
            while not stop.is_set():
                with anyio.move_on_after(RETRY_S):
                    await self._wake.wait()
                self._wake.clear()
                if self.ready.is_set() and not stop.is_set():
                    await self.flush()
        finally:
            stopping.cancel()
        if self._held:
            await self.flush()
            if self._held:
                unspooled = sum(1 for held in self._held if held.spooled is None)
                log.warning("outbox_held_at_stop", jobs=len(self._held), lost=unspooled)
                if unspooled:
                    JOB_EVENTS.labels("dropped").inc(unspooled)

    async def flush(self) -> None:
        """Write held jobs in order, FLUSH_BATCH to a transaction (one each drained too slowly to catch up
        under load: benchmarks.relay at c=64); a batch refused is tried job by job, so that only the refused
        one is set aside; an unavailable database stops the round."""
        while self._held:
            batch = list(itertools.islice(self._held, FLUSH_BATCH))
            written = await self._write([held.job for held in batch])
            if written is Written.REFUSED and len(batch) > 1:
                batch = batch[:1]
                written = await self._write([batch[0].job])
            if written is Written.UNAVAILABLE:
                break
            for held in batch:
                self._held.popleft()
                if written is Written.REFUSED:
                    self._reject(held.job, held.spooled)
                elif held.spooled:
                    held.spooled.unlink(missing_ok=True)
        OUTBOX_JOBS.set(len(self._held))

    async def _hold(self, job: PendingJob) -> None:
        if len(self._held) >= self.capacity:
            oldest = self._held.popleft()
            if oldest.spooled:
                oldest.spooled.unlink(missing_ok=True)
            JOB_EVENTS.labels("dropped").inc()
            log.warning("outbox_full_dropped_oldest", capacity=self.capacity)
        spooled = await asyncio.to_thread(self._spool, job) if self.spool_dir else None
        self._held.append(_Held(job, spooled))
        JOB_EVENTS.labels("held").inc()
        OUTBOX_JOBS.set(len(self._held))

    def _spool(self, job: PendingJob) -> Path | None:
        """One file per job, named to sort in arrival order, written whole (temp file, fsync, rename)."""
        assert self.spool_dir is not None
        path = self.spool_dir / f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        temp = path.with_suffix(".tmp")
        try:
            private_dir(self.spool_dir)
            with os.fdopen(create_private(temp), "w", encoding="utf-8") as handle:
                handle.write(job.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except (OSError, ValueError) as exc:  # a full disk, a value JSON cannot hold: held in memory only
            log.warning("outbox_spool_failed", error=f"{type(exc).__name__}: {exc}"[:300])
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            return None
        return path

    def _take_over_spool(self, spool_dir: Path) -> None:
        """Jobs a previous run held and could not write: held again, in their order."""
        for path in sorted(spool_dir.glob("*.json")) if spool_dir.is_dir() else []:
            try:
                self._held.append(_Held(PendingJob.from_json(path.read_text(encoding="utf-8")), path))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("outbox_spool_unreadable", file=path.name, error=str(exc)[:200])
                self._set_aside(path)
        if self._held:
            log.info("outbox_spool_taken_over", jobs=len(self._held))
            OUTBOX_JOBS.set(len(self._held))

    @staticmethod
    def _forget_rejected(rejected: Path, days: float) -> None:
        """Refused jobs keep the turn's text: deleted after DEAD_JOB_RETENTION_DAYS, as dead jobs are."""
        horizon = time.time() - days * 86400
        for path in rejected.glob("*.json") if rejected.is_dir() else []:
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < horizon:
                    path.unlink()

    def _reject(self, job: PendingJob, spooled: Path | None) -> None:
        JOB_EVENTS.labels("rejected").inc()
        log.warning("job_rejected", said_at=job.said_at.isoformat(),
                    reason="the database refuses this job's values; set aside, the jobs behind it go on")
        if spooled:
            self._set_aside(spooled)

    def _set_aside(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            private_dir(path.parent / "rejected")
            os.replace(path, path.parent / "rejected" / path.name)

    async def _write(self, batch: list[PendingJob]) -> Written:
        """Write the jobs in one transaction: all written, or none (refused, or the database unavailable)."""
        # Shielded: a client disconnect must not abandon a write half-way; bounded by the timeout.
        with anyio.move_on_after(WRITE_TIMEOUT_S, shield=True) as scope:
            try:
                async with self.pool.connection() as conn:
                    written = await jobs.enqueue_many(
                        conn, [(job.user_id, job.payload, job.said_at, job.turn_id) for job in batch])
            except _REFUSED as exc:
                log.warning("job_write_refused", error=f"{type(exc).__name__}: {exc}"[:300])
                return Written.REFUSED
            except (psycopg.Error, PoolTimeout, OSError) as exc:  # down, not migrated, full: held and retried
                log.warning("job_write_failed", error=f"{type(exc).__name__}: {exc}"[:300], held=len(self._held))
                return Written.UNAVAILABLE
            except Exception as exc:  # noqa: BLE001 - unforeseen: set aside (kept on disk), never block the others
                log.warning("job_write_refused", error=f"{type(exc).__name__}: {exc}"[:300])
                return Written.REFUSED
        if scope.cancelled_caught:
            log.warning("job_write_failed", error=f"timed out after {WRITE_TIMEOUT_S}s", held=len(self._held))
            return Written.UNAVAILABLE
        JOB_EVENTS.labels("enqueued").inc(len(written))
        if len(written) < len(batch):  # an earlier write committed but its answer was lost
            log.info("job_already_written", jobs=len(batch) - len(written))
        return Written.OK
